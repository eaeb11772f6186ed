"""An attempt's keeper, and the agent's link to it.

- `process.py`     the keeper process (`python -m tpuq.agent.keeper.process`): owns one
                   job's process group, outlives the agent, fences the job at its lease
- `link.py`        the agent's side: the server that forks keepers, launch, talk, adopt
- `messages.py`    what the two say, and the exit file: typed, versioned, one encode/decode
"""
