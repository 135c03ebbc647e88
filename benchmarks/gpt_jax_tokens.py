"""Tokens/s of the GPT example's model and training step in JAX, for comparison with Tessel.

The same byte-level GPT as `tessel run --example gpt --seq-len 64 --batch 16 --position learned
--mlp gelu` (nn/gpt.h: learned positions, pre-LayerNorm blocks with separate Q/K/V projections,
GELU MLP, tied head), the same AdamW step (beta2 0.95,
decoupled weight decay on the matrices and the embedding, clipping by global norm), sharded the
same way: mesh data x fsdp x tensor, parameters by the fsdp_tp recipe (Q/K/V and MLP-in split by
columns over `tensor`, attention-out and MLP-out by rows, the embedding on vocab over `tensor`,
the other dim of each matrix over `fsdp`), the batch over (data, fsdp). Random tokens: only the
speed is measured. Not part of CI.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/gpt_jax_tokens.py
  python benchmarks/gpt_jax_tokens.py --single-device
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def init_params(key, layers, d, ffn, seq, vocab=256):
    keys = iter(jax.random.split(key, 4 + 8 * layers))
    normal = lambda shape, std=0.02: std * jax.random.normal(next(keys), shape, jnp.float32)
    out_std = 0.02 / np.sqrt(2 * layers)
    params = {"wte": normal((vocab, d)), "wpe": normal((seq, d)),
              "lnf_g": jnp.ones(d), "lnf_b": jnp.zeros(d)}
    for i in range(layers):
        params[f"h{i}"] = {
            "ln1_g": jnp.ones(d), "ln1_b": jnp.zeros(d),
            "wq": normal((d, d)), "bq": jnp.zeros(d), "wk": normal((d, d)), "bk": jnp.zeros(d),
            "wv": normal((d, d)), "bv": jnp.zeros(d),
            "wo": normal((d, d), out_std), "bo": jnp.zeros(d),
            "ln2_g": jnp.ones(d), "ln2_b": jnp.zeros(d),
            "w_in": normal((d, ffn)), "b_in": jnp.zeros(ffn),
            "w_out": normal((ffn, d), out_std), "b_out": jnp.zeros(d)}
    return params


def specs(params):
    """fsdp_tp partition specs (nn/transformer.h WeightPartitionSpec)."""
    col, row = P("fsdp", "tensor"), P("tensor", "fsdp")
    by_name = {"wq": col, "wk": col, "wv": col, "w_in": col, "wo": row, "w_out": row,
               "bq": P("tensor"), "bk": P("tensor"), "bv": P("tensor"), "b_in": P("tensor")}
    out = {}
    for name, value in params.items():
        if isinstance(value, dict):
            out[name] = {k: by_name.get(k, P()) for k in value}
        else:
            out[name] = P("tensor", "fsdp") if name == "wte" else P()
    return out


def layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g + b


def loss_fn(params, tokens, labels, layers, heads):
    b, s = tokens.shape
    x = params["wte"][tokens] + params["wpe"][None, :s]
    d = x.shape[-1]
    mask = jnp.tril(jnp.ones((s, s), bool))
    for i in range(layers):
        p = params[f"h{i}"]
        h = layer_norm(x, p["ln1_g"], p["ln1_b"])
        split = lambda t: t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)
        q, k, v = (split(h @ p[w] + p[c]) for w, c in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
        att = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -1e9)
        y = (jax.nn.softmax(att, -1) @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + y @ p["wo"] + p["bo"]
        h = layer_norm(x, p["ln2_g"], p["ln2_b"])
        x = x + jax.nn.gelu(h @ p["w_in"] + p["b_in"], approximate=True) @ p["w_out"] + p["b_out"]
    x = layer_norm(x, params["lnf_g"], params["lnf_b"])
    logits = x @ params["wte"].T
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.take_along_axis(logp, labels[..., None], -1).mean()


def make_step(layers, heads, lr=3e-3, b1=0.9, b2=0.95, eps=1e-8, wd=0.1, clip=1.0):
    def decayed(path):
        name = path[-1].key
        return name.startswith("w") and name != "wpe"

    def step(params, m, v, t, tokens, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, labels, layers, heads)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        scale = jnp.minimum(1.0, clip / (norm + 1e-6))
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g * scale, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * (g * scale) ** 2, v, grads)
        step_size = lr / (1 - b1 ** t)
        inv = 1 / jnp.sqrt(1 - b2 ** t)

        def update(path, p, m, v):
            if decayed(path):
                p = p * (1 - lr * wd)
            return p - step_size * m / (jnp.sqrt(v) * inv + eps)

        params = jax.tree_util.tree_map_with_path(update, params, m, v)
        return params, m, v, loss

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--single-device", action="store_true")
    args = ap.parse_args()
    params = init_params(jax.random.PRNGKey(0), args.layers, args.d_model, 4 * args.d_model,
                         args.seq_len)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (args.batch, args.seq_len + 1), dtype=np.int32)
    x, y = tokens[:, :-1], tokens[:, 1:]
    step = make_step(args.layers, args.heads)
    if args.single_device:
        step = jax.jit(step)
        where = "single device"
    else:
        devices = np.array(jax.devices()[:8]).reshape(2, 2, 2)
        mesh = Mesh(devices, ("data", "fsdp", "tensor"))
        shard = lambda tree: jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), tree)
        pspecs = shard(specs(params))
        params = jax.device_put(params, pspecs)
        batch = NamedSharding(mesh, P(("data", "fsdp"), None))
        x, y = jax.device_put(x, batch), jax.device_put(y, batch)
        step = jax.jit(step, out_shardings=(pspecs, pspecs, pspecs, None))
        where = "8 devices, mesh data=2 x fsdp=2 x tensor=2"
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    for t in range(1, args.warmup_steps + 1):  # compile and warm up
        params, m, v, loss = step(params, m, v, float(t), x, y)
    loss.block_until_ready()
    start = time.perf_counter()
    for t in range(args.warmup_steps + 1, args.warmup_steps + args.steps + 1):
        params, m, v, loss = step(params, m, v, float(t), x, y)
    loss.block_until_ready()
    seconds = time.perf_counter() - start
    tokens_per_second = args.steps * args.batch * args.seq_len / seconds
    print(f"JAX {jax.__version__}, {where}: {args.steps} steps of batch {args.batch} x "
          f"{args.seq_len}: {tokens_per_second:.0f} tokens/s ({1e3 * seconds / args.steps:.1f} "
          f"ms/step), loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
