"""An attempt's keeper, and the agent's link to it.

- `process.py`     the keeper: owns one job's process group at a time, outlives the
                   agent, fences the job at its lease
- `pool.py`        the keepers' pool (`python -m tpuq.agent.keeper.pool`): idle keepers
                   waiting for launches, forked by the agent's server, back after each
- `link.py`        the agent's side: the server that forks keepers, launch, talk, adopt
- `messages.py`    what the two say, and the exit file: typed, versioned, one encode/decode
"""
