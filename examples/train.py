"""A small, deterministic JAX training loop that cooperates with tpuq.

Tiny MLP regression on synthetic data.  Every batch is derived from the step number, so an
interrupted-then-resumed run produces bit-identical parameters to an uninterrupted one.

    JAX_PLATFORMS=cpu python examples/train.py --steps 200 --ckpt-every 10 --out hash.txt

Checkpoints (params + optimizer state + step) go to ``job.checkpoint_dir()`` as a single
``.npz`` written atomically.  On the preemption signal the loop saves at once and exits 75
so tpuq requeues it.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tinymodel import batch_for, init_params, optimizer, params_sha256, train_step

from tpuq import job

CKPT_NAME = "state.npz"


def save(ckpt_dir: Path, params: Any, opt_state: Any, step: int) -> None:
    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves((params, opt_state))]
    tmp = ckpt_dir / f".{CKPT_NAME}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:  # file object: np.savez would append ".npz" to a str name
        np.savez(f, np.int64(step), *leaves)  # stored as arr_0 (step), arr_1, ...
        f.flush()
        os.fsync(f.fileno())
    # os.replace is atomic: a reader (or the next attempt) sees the old or the new file.
    os.replace(tmp, ckpt_dir / CKPT_NAME)
    job.checkpointed(step)


def restore(ckpt_dir: Path, params: Any, opt_state: Any) -> tuple[Any, Any, int] | None:
    path = ckpt_dir / CKPT_NAME
    if not path.exists():
        return None
    # The freshly initialised state supplies the tree structure and dtypes.
    leaves, treedef = jax.tree_util.tree_flatten((params, opt_state))
    with np.load(path) as data:
        step = int(data["arr_0"])
        loaded = [
            jnp.asarray(data[f"arr_{i + 1}"], dtype=leaf.dtype) for i, leaf in enumerate(leaves)
        ]
    params, opt_state = jax.tree_util.tree_unflatten(treedef, loaded)
    return params, opt_state, step


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step")
    p.add_argument("--out", type=Path, help="write the final params' sha256 here")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    job.preemption_requested()  # install the flag handler before any long work
    ckpt_dir = job.checkpoint_dir()
    params = init_params()
    opt_state = optimizer.init(params)
    step = 0
    state = restore(ckpt_dir, params, opt_state)
    if state is not None:
        params, opt_state, step = state
        print(f"resumed from step {step}", flush=True)
    while step < args.steps:
        x, y = batch_for(step)
        params, opt_state, loss = train_step(params, opt_state, x, y)
        step += 1
        if args.step_delay:
            time.sleep(args.step_delay)
        if job.preemption_requested():
            save(ckpt_dir, params, opt_state, step)
            print(f"preempted at step {step}, checkpoint saved", flush=True)
            job.requeue("preempted")
        if step % args.ckpt_every == 0:
            save(ckpt_dir, params, opt_state, step)
            print(f"checkpoint at step {step} loss {float(loss):.6f}", flush=True)
    if step % args.ckpt_every != 0:
        save(ckpt_dir, params, opt_state, step)  # so a re-run of a finished job is a no-op
        print(f"checkpoint at step {step} (final)", flush=True)
    digest = params_sha256(params)
    print(f"done: {step} steps, params sha256 {digest}", flush=True)
    if args.out:
        args.out.write_text(digest + "\n")


if __name__ == "__main__":
    main()
