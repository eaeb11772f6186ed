"""The tiny model both examples train: an MLP regression on synthetic data.

Every batch is derived from the step number, so a run that is interrupted and resumed
from a checkpoint produces bit-identical parameters to an uninterrupted one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

IN_DIM, HIDDEN, OUT_DIM, BATCH = 8, 32, 1, 64

optimizer = optax.adam(1e-2)


def init_params() -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {
        "w1": jax.random.normal(k1, (IN_DIM, HIDDEN)) * 0.3,
        "b1": jnp.zeros((HIDDEN,)),
        "w2": jax.random.normal(k2, (HIDDEN, OUT_DIM)) * 0.3,
        "b2": jnp.zeros((OUT_DIM,)),
    }


def batch_for(step: int) -> tuple[jax.Array, jax.Array]:
    # Data depends only on the step number, so resuming replays exactly the same batches.
    key = jax.random.fold_in(jax.random.PRNGKey(1), step)
    x = jax.random.normal(key, (BATCH, IN_DIM))
    true_w = jnp.arange(1, IN_DIM + 1, dtype=jnp.float32)[:, None] / IN_DIM
    y = jnp.sin(x @ true_w)
    return x, y


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    pred = h @ params["w2"] + params["b2"]
    return jnp.mean((pred - y) ** 2)


@jax.jit
def train_step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any, Any]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def params_sha256(params: Any) -> str:
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(params):  # dict leaves come in sorted-key order
        digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()
