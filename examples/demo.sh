#!/usr/bin/env bash
# The quickstart: tpuq on a fake TPU (4 device files in a temp dir), embedded SQLite,
# no servers. Starts an agent, queues examples/train.py (JAX on CPU), follows its
# output, shows the queue and the job's story, and stops the agent it started.
set -euo pipefail
cd "$(dirname "$0")/.."
TPUQ=${TPUQ:-.venv/bin/tpuq}

TPUQ_HOME=$(mktemp -d -t tpuq-demo.XXXXXX)
export TPUQ_HOME
export TPUQ_DEVICE_GLOB="$TPUQ_HOME/dev/accel*" TPUQ_LIBTPU_LOCKFILE="$TPUQ_HOME/libtpu_lockfile"
export JAX_PLATFORMS=cpu PATH="$PWD/.venv/bin:$PATH"
mkdir -p "$TPUQ_HOME/dev" && touch "$TPUQ_HOME"/dev/accel{0,1,2,3}

"$TPUQ" agent >"$TPUQ_HOME/agent.log" 2>&1 &
agent=$!
# stop the agent it started (by its pid) and remove the demo's state (KEEP=1 keeps it)
trap 'kill -TERM $agent 2>/dev/null; wait $agent 2>/dev/null || true
      [ -n "${KEEP:-}" ] || rm -rf "$TPUQ_HOME"' EXIT
until grep -qs "agent on" "$TPUQ_HOME/agent.log"; do
  kill -0 $agent 2>/dev/null || { cat "$TPUQ_HOME/agent.log"; exit 1; }
  sleep 0.1
done

echo "\$ tpuq submit -q examples/train.py --steps 60 --ckpt-every 20"
id=$("$TPUQ" submit -q examples/train.py --steps 60 --ckpt-every 20)
echo "\$ tpuq logs $id -f"
"$TPUQ" logs "$id" -f
echo; echo "\$ tpuq status"; "$TPUQ" status
echo; echo "\$ tpuq show $id"; "$TPUQ" show "$id"
echo; echo "(the agent stops now; its state in $TPUQ_HOME is removed unless KEEP=1)"
