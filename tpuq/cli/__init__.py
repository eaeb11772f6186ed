"""The `tpuq` command line: thin Click commands over the library.

- `entry.py`       the `tpuq` executable: loads the command line with the collector off
- `main.py`        the command table, the group and the one error path
- `lazy.py`        the group that imports a subcommand's module only when it runs
- `errors.py`      UserError / Unavailable, and library errors as one line
- `context.py`     settings, the client, --json, output lines (Click-free)
- `args.py`        argument types the commands share (a job id)
- `admin.py`       tpuq whoami, tpuq admin, tpuq user
- `render.py`      tables, durations, the JSON shape of a job
- `submit.py`      tpuq submit: Click's reader of its line (every option, --help, #TPUQ)
- `quick.py`       tpuq submit's plain lines read without loading Click, the rest left to Click
- `submitting.py`  what tpuq submit does once its line is read (both readers end there)
- `run.py`         tpuq run (an interactive session, and --attach)
- `status.py`      tpuq status
- `show.py`        tpuq show
- `logs.py`        tpuq logs
- `history.py`     tpuq history (sacct) and tpuq usage: ended jobs and what they cost
- `wait.py`        tpuq wait (and submit --wait): block until jobs end, exit with the outcome
- `interrupts.py`  Ctrl-C while waiting on jobs: say what goes on, or cancel it (Click-free)
- `control.py`     cancel, preempt, hold, release, update, resubmit, drain, undrain
- `quota.py`       tpuq quota (and set, add-member, remove-member)
- `agent_cmds.py`  tpuq agent, tpuq db, tpuq config
- `pod.py`         tpuq pod hosts, run, clean, setup (a pod slice over SSH, from host 0)
- `fleet.py`       tpuq fleet apply, status, controller (the team's TPU VMs, kept alive)
- `web.py`         tpuq web (the dashboard and /metrics) and its sign-in tokens
"""
