#!/usr/bin/env python3
"""XLA's own memory figure for a MaxText-style Llama training step on a TPU topology, for checking
the simulator's memory report (docs/simulator.md, "Validation against published runs", Memory).

Compiles the step ahead of time with XLA's TPU compiler (no TPU needed) and prints
compiled.memory_analysis() as JSON (peak_memory_in_bytes, host_temp_size_in_bytes, ...), or the
compiler's RESOURCE_EXHAUSTED message when it does not fit. Needs jax and the libtpu wheel jax[tpu]
pins (jax 0.10.2: libtpu 0.0.42.*; TPU_LIBRARY_PATH pointing at its libtpu.so); not part of CI.

  python3 tests/validation/xla_memory_replica.py '{"topology": "v5p:4x4x4", "fsdp": 16,
      "tensor": 4, "batch": 448, "seq": 2048, "d": 8192, "heads": 64, "head_dim": 128,
      "ffn": 28672, "layers": 32, "vocab": 32000, "remat": "minimal"}'

The step, as MaxText builds it (layers/llama2.py, attentions.py, linears.py MlpBlock, decoders.py):
embedding, a scan over the layers of RMSNorm, q/k/v/out einsums, the Pallas TPU flash kernel
(causal, 512 blocks) in shard_map, RMSNorm, SwiGLU MLP, each layer under jax.checkpoint with the
remat policy (minimal: checkpoint_dots_with_no_batch_dims; minimal_offloaded:
offload_dot_with_no_batch_dims to pinned_host; full: nothing_saveable; custom: the names in
"offload", of "context" and "mlpwo", offloaded to pinned_host and the rest recomputed), with
"kv_heads" grouped-query attention and "mlp": "gelu" GPT-3's MLP, the logits and an f32
cross entropy; "quantization": "int8" runs the layers' einsums through AQT as MaxText's
quantization=int8 does (quantizations.py _get_int8_quant_config: aqt config_v3 with int8
forward, dlhs and drhs, stochastic rounding of the gradient operand (rng_type jax.uniform), drhs
LocalAqt over quantization_local_shard_count = 1 shard; needs the aqtp package); f32 weights and Adam moments donated; weights sharded embed -> fsdp, heads / mlp /
vocab -> tensor, activations batch -> fsdp (and "data" across slices with "slices": N, the
topology N times over DCN), heads / mlp / embed -> tensor (base.yml's logical
axis rules). Rotary embeddings and the optimizer's bias correction are left out (elementwise).
build(cfg) returns the lowered step (xla_fusion_census.py compiles it and walks its HLO).
"""
import sys, json, functools
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental.shard_map import shard_map
from jax.experimental.pallas.ops.tpu import flash_attention as fa

def build(cfg):
    """The lowered step for cfg (the keys of the example above; "tensor" may be 1). Returns
    (jax.stages.Lowered, mesh)."""
    # "slices" > 1: that many copies of the topology joined by DCN (Megascale), the batch split
    # over them too (MaxText's dcn_data_parallelism: a "data" axis across slices).
    slices = cfg.get("slices", 1)
    topo = topologies.get_topology_desc(platform="tpu", topology_name=cfg["topology"],
                                        **({"num_slices": slices} if slices > 1 else {}))
    import numpy as np
    if slices > 1:
        devs = np.array(topo.devices).reshape(slices, cfg["fsdp"], cfg["tensor"])
        mesh = Mesh(devs, ("data", "fsdp", "tensor"))
        BATCH = ("data", "fsdp")
    else:
        devs = np.array(topo.devices).reshape(cfg["fsdp"], cfg["tensor"])
        mesh = Mesh(devs, ("fsdp", "tensor"))
        BATCH = "fsdp"
    B, S, D, H, HD, F, L, V = (cfg[k] for k in ("batch", "seq", "d", "heads", "head_dim", "ffn", "layers", "vocab"))
    bf = jnp.bfloat16
    KVH = cfg.get("kv_heads", H)
    # "mlp": "gelu": GPT-3's MLP (one input matrix, GELU); default SwiGLU (Llama).
    gated = cfg.get("mlp", "swiglu") == "swiglu"
    # "custom": MaxText's remat_policy custom with the names of "offload" (MaxText's
    # checkpoint_name tags "context" and "mlpwo" here) offloaded to host memory and every other
    # value recomputed (the scan carry, the layer input, stays in HBM).
    policies = {"minimal": lambda: jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
                "full": lambda: jax.checkpoint_policies.nothing_saveable,
                "minimal_offloaded": lambda: jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host"),
                "custom": lambda: jax.checkpoint_policies.save_and_offload_only_these_names(
                    names_which_can_be_saved=[], names_which_can_be_offloaded=cfg.get("offload", []),
                    offload_src="device", offload_dst="pinned_host")}
    policy = policies[cfg["remat"]]()
    from jax.ad_checkpoint import checkpoint_name
    def c(x, spec): return lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
    RES = P(BATCH, None, "tensor")  # activation_batch, activation_length, activation_embed
    def rms(x, w):
        x32 = x.astype(jnp.float32)
        return (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6) * w).astype(bf)
    blocks = fa.BlockSizes(block_q=512, block_k_major=512, block_k=512, block_b=1,
                           block_q_major_dkv=512, block_k_major_dkv=512, block_k_dkv=512, block_q_dkv=512,
                           block_k_major_dq=512, block_k_dq=512, block_q_dq=512)
    @functools.partial(shard_map, mesh=mesh, in_specs=(P(BATCH, "tensor", None, None),) * 3,
                       out_specs=P(BATCH, "tensor", None, None), check_rep=False)
    def flash(q, k, v):
        return fa.flash_attention(q, k, v, causal=True, sm_scale=HD ** -0.5, block_sizes=blocks)
    if cfg.get("quantization") == "int8":
        from aqt.jax.v2 import config as aqt_config
        aqt_cfg = aqt_config.config_v3(
            fwd_bits=8, dlhs_bits=8, drhs_bits=8, rng_type="jax.uniform", dlhs_local_aqt=None,
            drhs_local_aqt=aqt_config.LocalAqt(contraction_axis_shard_count=1),
            fwd_accumulator_dtype=jnp.int32, dlhs_accumulator_dtype=jnp.int32,
            drhs_accumulator_dtype=jnp.int32)
    def layer(x, w, i=0):
        if cfg.get("quantization") == "int8":
            # The stochastic rounding's random bits: one key per layer, as MaxText's "aqt" rng.
            dg_cfg = aqt_config.set_context(aqt_cfg, jax.random.fold_in(jax.random.PRNGKey(0), i),
                                            train_step=None)
            def dot_general(*args, **kwargs): return dg_cfg(*args, **kwargs)
            einsum = functools.partial(jnp.einsum, _dot_general=dot_general)
        else:
            einsum = jnp.einsum
        a = rms(x, w["n1"])
        q = einsum("bsd,dhk->bshk", a, w["wq"].astype(bf))
        # Grouped-query attention ("kv_heads"): each k / v head serves H / KVH query heads.
        k = jnp.repeat(einsum("bsd,dhk->bshk", a, w["wk"].astype(bf)), H // KVH, axis=2)
        v = jnp.repeat(einsum("bsd,dhk->bshk", a, w["wv"].astype(bf)), H // KVH, axis=2)
        q, k, v = (c(t, P(BATCH, None, "tensor", None)) for t in (q, k, v))
        o = checkpoint_name(flash(*(t.transpose(0, 2, 1, 3) for t in (q, k, v))).transpose(0, 2, 1, 3), "context")
        out = c(einsum("bshk,hkd->bsd", o, w["wo"].astype(bf)), RES)
        x1 = x + out
        m = rms(x1, w["n2"])
        u = c(einsum("bsd,df->bsf", m, w["wu"].astype(bf)), P(BATCH, None, "tensor"))
        if gated:
            g = c(einsum("bsd,df->bsf", m, w["wg"].astype(bf)), P(BATCH, None, "tensor"))
            h = jax.nn.silu(g) * u
        else:
            h = jax.nn.gelu(u)
        return c(x1 + checkpoint_name(einsum("bsf,fd->bsd", h, w["wd"].astype(bf)), "mlpwo"), RES)
    remat_layer = jax.checkpoint(layer, policy=policy, prevent_cse=False)
    def loss_fn(params, tokens):
        x = c(params["emb"].astype(bf)[tokens], RES)
        x, _ = lax.scan(lambda x, wi: (remat_layer(x, *wi), None), x, (params["layers"], jnp.arange(L)))
        logits = jnp.einsum("bsd,dv->bsv", rms(x, params["nf"]), params["out"].astype(bf))
        logits = c(logits, P(BATCH, None, "tensor"))
        lp = jax.nn.log_softmax(logits.astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(lp, tokens[..., None], -1))
    def step(params, mu, nu, tokens):
        g = jax.grad(loss_fn)(params, tokens)
        mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, mu, g)
        nu = jax.tree.map(lambda n, g: 0.95 * n + 0.05 * g * g, nu, g)
        params = jax.tree.map(lambda p, m, n: p - 1e-4 * m / (jnp.sqrt(n) + 1e-8), params, mu, nu)
        return params, mu, nu
    # MaxText's kernel axes: embed -> fsdp, heads / mlp / vocab -> tensor; layers stacked.
    shapes = {"emb": ((V, D), P("tensor", "fsdp")), "out": ((D, V), P("fsdp", "tensor")), "nf": ((D,), P()),
              "layers": {"wq": ((L, D, H, HD), P(None, "fsdp", "tensor", None)),
                         "wk": ((L, D, KVH, HD), P(None, "fsdp", "tensor" if KVH % cfg["tensor"] == 0 else None, None)),
                         "wv": ((L, D, KVH, HD), P(None, "fsdp", "tensor" if KVH % cfg["tensor"] == 0 else None, None)),
                         "wo": ((L, H, HD, D), P(None, "tensor", None, "fsdp")),
                         "wg": ((L, D, F), P(None, "fsdp", "tensor")), "wu": ((L, D, F), P(None, "fsdp", "tensor")),
                         "wd": ((L, F, D), P(None, "tensor", "fsdp")),
                         "n1": ((L, D), P()), "n2": ((L, D), P())}}
    if not gated:
        del shapes["layers"]["wg"]
    def sds(t): return jax.ShapeDtypeStruct(t[0], jnp.float32, sharding=NamedSharding(mesh, t[1]))
    is_leaf = lambda t: isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], P)
    params = jax.tree.map(sds, shapes, is_leaf=is_leaf)
    tokens = jax.ShapeDtypeStruct((B, S), jnp.int32, sharding=NamedSharding(mesh, P(BATCH, None)))
    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    return jitted.lower(params, params, params, tokens), mesh


if __name__ == "__main__":
    compiled = build(json.loads(sys.argv[1]))[0].compile()
    m = compiled.memory_analysis()
    out = {k: getattr(m, k) for k in dir(m) if k.endswith("_in_bytes")}
    print(json.dumps(out))
