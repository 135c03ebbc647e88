"""JAX (XLA CPU) side of the executor comparison: one MLP training step, timed.

The same step as `tessel run ... --example fashion-mnist-mlp`: MLP 784-1024-1024-10 with ReLU,
softmax cross-entropy, and SGD or Adam (torch.optim.Adam's update: bias corrections on the host,
eps after sqrt(v) / sqrt(1 - beta2^t)), f32. With --devices 8 the batch is sharded over "data"
and the hidden layers over "model" of a data=4 x model=2 mesh (Megatron-style: W1 by columns, W2
by rows), as Tessel's example shards it; XLA's SPMD partitioner inserts the collectives.
Each step feeds a new host batch (jax.device_put of a numpy array, as a data loader would).

Development only, not part of CI: needs `pip install jax` (CPU), and for 8 devices
XLA_FLAGS=--xla_force_host_platform_device_count=8 in the environment.

  python3 benchmarks/jax_compare/mlp_step.py --devices 1 --optimizer adam --batch 128

Prints one JSON object: ms_per_step (median of the timed steps), the mean, cpu_ms_per_step (CPU
time of the process, all threads, over the timed steps), and the settings.
"""

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

SIZES = (784, 1024, 1024, 10)


def init_params(key):
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        key, sub = jax.random.split(key)
        bound = 1.0 / np.sqrt(fan_in)
        w = jax.random.uniform(sub, (fan_in, fan_out), jnp.float32, -bound, bound)
        params.append((w, jnp.zeros((fan_out,), jnp.float32)))
    return params


def loss_fn(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i + 1 < len(params):
            h = jax.nn.relu(h)
    logp = jax.nn.log_softmax(h)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def make_step(optimizer, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    if optimizer == "sgd":
        def step(params, state, x, y, scalars):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
            return params, state, loss
        return step

    def step(params, state, x, y, scalars):
        step_size, inv_sqrt_bc2 = scalars[0], scalars[1]
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        m, v = state
        m = jax.tree_util.tree_map(lambda m, g: m * beta1 + g * (1 - beta1), m, grads)
        v = jax.tree_util.tree_map(lambda v, g: v * beta2 + g * g * (1 - beta2), v, grads)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - step_size * m / (jnp.sqrt(v) * inv_sqrt_bc2 + eps), params, m, v)
        return params, (m, v), loss
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, choices=(1, 8), default=1)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    params = init_params(jax.random.PRNGKey(0))
    state = (jax.tree_util.tree_map(jnp.zeros_like, params),
             jax.tree_util.tree_map(jnp.zeros_like, params))
    step = make_step(args.optimizer)
    if args.devices == 8:
        if len(jax.devices()) < 8:
            raise SystemExit("need 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
        mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
        specs = [(P(None, "model"), P("model")), (P("model", None), P(None)),
                 (P(None, None), P(None))]
        param_sharding = [tuple(NamedSharding(mesh, s) for s in layer) for layer in specs]
        params = jax.device_put(params, param_sharding)
        state = jax.device_put(state, (param_sharding, param_sharding))
        x_sharding = NamedSharding(mesh, P("data", None))
        y_sharding = NamedSharding(mesh, P("data"))
        replicated = NamedSharding(mesh, P())
        jitted = jax.jit(step, donate_argnums=(0, 1),
                         in_shardings=(param_sharding, (param_sharding, param_sharding),
                                       x_sharding, y_sharding, replicated),
                         out_shardings=(param_sharding, (param_sharding, param_sharding),
                                        replicated))
    else:
        x_sharding = y_sharding = jax.devices()[0]
        jitted = jax.jit(step, donate_argnums=(0, 1))

    rng = np.random.default_rng(1)
    images = rng.random((8, args.batch, 784), dtype=np.float32)
    labels = rng.integers(0, 10, (8, args.batch), dtype=np.int32)
    times = []
    cpu_start = None
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            cpu_start = time.process_time()
        t = i + 1
        scalars = np.array([1e-3 / (1 - 0.9 ** t), 1 / np.sqrt(1 - 0.999 ** t)], np.float32)
        start = time.perf_counter()
        x = jax.device_put(images[i % 8], x_sharding)
        y = jax.device_put(labels[i % 8], y_sharding)
        params, state, loss = jitted(params, state, x, y, scalars)
        loss.block_until_ready()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"system": "jax", "jax": jax.__version__, "devices": args.devices,
                      "optimizer": args.optimizer, "batch": args.batch, "steps": args.steps,
                      "ms_per_step": 1e3 * statistics.median(times),
                      "mean_ms": 1e3 * statistics.fmean(times),
                      "cpu_ms_per_step": 1e3 * (time.process_time() - cpu_start) / args.steps,
                      "loss": float(loss)}))


if __name__ == "__main__":
    main()
