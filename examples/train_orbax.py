"""The same model and data as train.py, written as an ordinary JAX user would, without tpuq.

It relies on JAX's own preemption service: ``jax.distributed.initialize()`` installs a
SIGTERM handler that only sets a flag (verified on CPU with JAX 0.10), and Orbax's
``CheckpointManager`` saves at the preemption sync point.  tpuq's notice is a plain SIGTERM,
so this script needs no tpuq code at all.

    JAX_PLATFORMS=cpu python examples/train_orbax.py --steps 200 --ckpt-every 10 --out h.txt

The coordinator port comes from ``--coord-port``, else env ``COORD_PORT``, else a free port.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from tinymodel import batch_for, init_params, optimizer, params_sha256
from tinymodel import train_step as step_params

EX_TEMPFAIL = 75


def train_step(state: dict[str, Any], x: jax.Array, y: jax.Array) -> tuple[dict[str, Any], Any]:
    params, opt_state, loss = step_params(state["params"], state["opt_state"], x, y)
    return {"params": params, "opt_state": opt_state}, loss


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step")
    p.add_argument("--out", type=Path, help="write the final params' sha256 here")
    p.add_argument("--ckpt-dir", default=os.environ.get("TPUQ_CHECKPOINT_DIR") or "ckpt",
                   help="a directory, or a gs:// URL (Orbax writes buckets itself)")
    p.add_argument("--coord-port", type=int,
                   default=int(os.environ.get("COORD_PORT") or 0) or None)
    return p.parse_args()


def make_manager(ckpt_dir: str, every: int) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(save_interval_steps=every, max_to_keep=3)
    # Orbax wants an absolute path, or a bucket URL as it is (a Path would mangle gs://)
    where = ckpt_dir if ckpt_dir.startswith("gs://") else Path(ckpt_dir).resolve()
    return ocp.CheckpointManager(where, options=options)


def restore_latest(mngr: ocp.CheckpointManager, state: dict[str, Any]) -> tuple[Any, int]:
    step = mngr.latest_step()
    if step is None:
        return state, 0
    # The fresh state is the restore target: it fixes tree structure, shapes and dtypes.
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, state)
    restored = mngr.restore(step, args=ocp.args.StandardRestore(abstract))
    print(f"resumed from step {step}", flush=True)
    return restored, step


def train(args: argparse.Namespace, mngr: ocp.CheckpointManager) -> bool:
    """Runs to ``args.steps``; returns False if it stopped early for preemption."""
    params = init_params()
    state, step = restore_latest(mngr, {"params": params, "opt_state": optimizer.init(params)})
    while step < args.steps:
        x, y = batch_for(step)
        state, loss = train_step(state, x, y)
        step += 1
        if args.step_delay:
            time.sleep(args.step_delay)
        # save() saves on the interval and also at the preemption sync point.
        if mngr.save(step, args=ocp.args.StandardSave(state)):
            print(f"checkpoint at step {step} loss {float(loss):.6f}", flush=True)
        if mngr.reached_preemption(step):
            mngr.wait_until_finished()
            print(f"preempted at step {step}, checkpoint saved", flush=True)
            return False
    if mngr.latest_step() != step:  # keep the final state so a re-run is a no-op
        mngr.save(step, args=ocp.args.StandardSave(state), force=True)
    mngr.wait_until_finished()
    digest = params_sha256(state["params"])
    print(f"done: {step} steps, params sha256 {digest}", flush=True)
    if args.out:
        args.out.write_text(digest + "\n")
    return True


def main() -> int:
    args = parse_args()
    # Turns on JAX's preemption service: from here on SIGTERM only sets a flag.
    jax.distributed.initialize(
        coordinator_address=f"localhost:{args.coord_port or free_port()}",
        num_processes=1,
        process_id=0,
    )
    mngr = make_manager(args.ckpt_dir, args.ckpt_every)
    try:
        finished = train(args, mngr)
    finally:
        mngr.close()
    # EX_TEMPFAIL: ask any scheduler to run us again.
    return 0 if finished else EX_TEMPFAIL


if __name__ == "__main__":
    sys.exit(main())
