// What the partitioned training-step graph of nn/transformer.h does not say by itself:
// rematerialization (the forward ops a remat policy runs again in the backward, and the
// activations it keeps), fused (flash) attention (no S x S scores in HBM, the kernel's FLOPs and
// memory traffic), and the per-device memory of a training step (parameters, gradients,
// optimizer state, activations, temporaries). The simulator costs the graph; this file costs
// these on top of it, per device and per step, with the same CostModel.
//
//   mesh::TrainingStepOptions options{.remat = mesh::RematPolicy::kFull,
//                                     .attention = mesh::AttentionKernel::kFlash};
//   sim_options.costed_elsewhere = mesh::DenseAttentionFilter(config);  // flash only
//   ... simulator.Run(program) -> report ...
//   TESSEL_ASSIGN_OR_RETURN(mesh::TrainingStepEstimate e, mesh::EstimateTrainingStep(
//       config, shards, options, simulator.cost_model(), program, step.weight_parameters,
//       step.moment_parameters));
//   mesh::ApplyTrainingStep(e, report);  // adds recompute and flash time, sets memory and "fits"
//
// Remat, per decoder layer (the same in every layer; MaxText scans one remat'ed block). The
// layer's named values and the ops producing them:
//   a = norm1(x); q, k, v = qkv_proj(a); context (+ attention residual) = attention(q, k, v);
//   out = out_proj(context); x1 = x + out; m = norm2(x1) (parallel block: m = a, no x1);
//   wi = mlp_in(m) (gate and up for SwiGLU); h = act(wi); wo = mlp_out(h).
// The backward reads: x (norm1), a (qkv_proj), q, k, v, context and the attention residual
// (attention), context (out_proj), x1 (norm2), m (mlp_in), wi (act), h (mlp_out). A policy names
// the values it saves; every value the backward reads that is not saved is recomputed from its
// producer's inputs, transitively, down to saved values or the layer input x (always kept: the
// scan carry). That closure gives the recomputed ops and the kept values; mlp_out's output is
// read by no backward op, so no policy recomputes mlp_out.
// Policies (MaxText decoders.py get_remat_policy; jax.checkpoint_policies):
//   none: every value the backward reads is kept (no remat).
//   minimal: checkpoint_dots_with_no_batch_dims: q, k, v, out, wi, wo saved (the attention dots
//     and a flash kernel are not "dots with no batch dims", so the context is recomputed).
//   minimal_with_context: minimal + context.
//   save_dot_with_context_except_mlp: q, k, v, context, out.
//   save_dot_except_mlpwi: q, k, v, out, wo.   save_dot_except_mlp: q, k, v, out.
//   save_qkv_proj: q, k, v.   save_out_proj: out.   full: nothing (only x).
//   minimal_offloaded: minimal's values, offloaded to host memory (below).
//   qkv_proj_offloaded: save_qkv_proj's q, k, v, offloaded to host memory.
//   selective: Megatron-LM's selective recompute (Korthikanti et al. 2022, "Reducing Activation
//     Recomputation in Large Transformer Models", sec. 4.2): everything but the attention core's
//     context and residual (scores / probabilities) is saved.
//   custom: MaxText's per-name policy (decoders.py: save_and_offload_only_these_names with
//     names_which_can_be_saved = the names set to "device", names_which_can_be_offloaded = the
//     names set to "offload"; every other name is recomputed): CustomRemat. Its names, MaxText's
//     checkpoint_name tags: decoder_layer_input (x), query_proj, key_proj, value_proj, qkv_proj
//     (q, k and v), context, out_proj, mlpwi (wi), mlpwi_0 and mlpwi_1 (SwiGLU's gate and up:
//     wi when both are named alike), mlpwo (wo). x offloaded leaves HBM too (the scan's stacked
//     carries); x never named stays on device, as MaxText's default decoder_layer_input: device.
// Recompute seconds: the recomputed matmuls at the matmul peak x the "dot" efficiency;
// elementwise recompute (norms, activations, residual adds) is fused into its neighbours under
// FusionMode::kXla and not counted; under kEager / kNone each recomputed elementwise op is its own
// kernel, its inputs read and its output written at the HBM bandwidth x the "elementwise"
// efficiency (recompute_bytes).
//
// Host offload (minimal_offloaded, qkv_proj_offloaded; MaxText decoders.py:
// jax.checkpoint_policies.save_and_offload_only_these_names(names_which_can_be_saved=[],
// names_which_can_be_offloaded=[...], offload_src="device", offload_dst="pinned_host"), older
// MaxText offload_dot_with_no_batch_dims): the policy's saved values (RematPlan::offloaded; the
// layer input x, the scan carry, stays on device) are copied to the host's pinned memory in the
// forward and back to HBM in the backward. Recompute is the on-device policy's. Memory: they
// leave HBM (TrainingMemory::host_offloaded_bytes, not counted against it) but for one layer's,
// back in HBM for its backward (in the temporaries' working set). Time: each way
// layers x their bytes (all microbatches: every one copies its own) over the device's host link
// (DeviceSpec::host_bandwidth_gbytes_per_s, per direction), T = bytes / bandwidth:
//   in order: 2 T exposed (the copies wait on the compute stream);
//   overlapped (XLA schedules the copy-start / copy-done pairs of host offload asynchronously,
//   xla/service/host_offloader.cc and the latency-hiding scheduler): the device -> host copies
//   run under the forward, the host -> device copies under the backward, exposed
//   max(0, T - F) + max(0, T - B), with F = (compute - recompute) / 3 the forward (a matmul
//   step's forward is a third of its forward + backward flops) and B = compute - F the backward
//   (HostOffloadExposedSeconds).
// Not modelled: the host memory's capacity, and the host link shared with input feeding.
//
// Replay (TrainingStepOptions::remat_replay): PyTorch's torch.utils.checkpoint and Megatron-LM's
// CheckpointFunction (megatron/mpu/random.py) re-run the checkpointed function's whole forward in
// the backward (ctx.run_function), with no dead-code elimination: under kFull every op of the
// layer is recomputed, mlp_out and the layer's closing residual add (3 [t, D] through HBM)
// included; kSelective's function is the attention core, recomputed whole either way.
// Narayanan et al. 2021 (SC '21) count full recompute as one extra forward pass (equation (3)).
//
// Quantized matmuls (CostModelOptions::matmul_dtype): the layers' projections and experts run at
// the int8 or fp8 peak (CostModel); attention's matmuls (the flash kernel, the dense attention's
// dots: SimulatorOptions::unquantized, and their recompute) stay at the bf16 peak, as AQT in
// MaxText and Transformer Engine's fp8 linear layers leave them. Every matmul of the layers
// (qkv_proj, out_proj, mlp_in, mlp_out, the experts' whole matrices under MoE) quantizes its two
// operands first, in passes through HBM at the HBM bandwidth x the "elementwise" efficiency:
//   int8: AQT as MaxText's quantization=int8 configures it (MaxText quantizations.py
//     _get_int8_quant_config: aqt config_v3 with fwd_bits, dlhs_bits and drhs_bits 8, abs-max
//     calibration along the contracting dimension, use_fwd_quant off): per operand an abs-max
//     reduction reads it and the quantize reads it again and writes int8, 2 x dtype + 1 bytes
//     per element. The gradient's stochastic rounding (rng_type jax.uniform) is taken as fused
//     into its quantize pass.
//   fp8: delayed scaling (NVIDIA Transformer Engine's recipe: the scale comes from earlier
//     steps' amax history, the amax of this cast is taken in the same pass): one cast reads the
//     operand and writes fp8, dtype + 1 bytes per element.
// Operands per matmul Y = X W and step: each forward run (the forward, and the remat recompute
// when the policy recomputes the op) quantizes X and W (W as gathered on the device); the
// backward's dX = dY W^T quantizes dY and W, its dW = X^T dY quantizes X and dY, each along its
// own contracting dimension (nothing is reused). So (runs + 1) (|X| + |W|) + 2 |Y| elements
// per matmul (runs 1, or 2 when recomputed). With microbatches (gradient accumulation, or a
// pipeline's m microbatches; EstimatePipeline) every microbatch quantizes the weights again, as
// AQT quantizes inside each microbatch's matmuls: the (runs + 1) |W| elements m times; the
// activations' elements add up to the whole batch's. Not counted: the int32 or fp32 results'
// rescale (fused into the matmul), the logits matmul (MaxText quantizes the decoder layers' dense
// layers), and Transformer Engine's fusions that emit fp8 straight from a LayerNorm.
//
// Attention dropout (TrainingStepOptions::attention_dropout > 0, dot_product attention, kEager or
// kNone fusion; Megatron-LM --attention-dropout, default 0.1): a dropout kernel on the [t, H, S]
// probabilities after the fused softmax: forward reads them and writes its output and a 1-byte
// mask, backward reads the gradient and the mask and writes the gradient, t*H*S*(2*dtype + 1)
// bytes each way, once more forward when the attention is recomputed; at the HBM bandwidth x the
// "elementwise" efficiency. Under kXla the mask comes from the RNG inside the softmax fusion and
// a flash kernel holds it: nothing extra.
//
// Attention core, per layer and device, t local tokens, H local heads (heads / tensor shards),
// Dh head_dim, S seq_len:
//   dot_product (XLA's dense attention; what the graph holds): forward 4*t*H*S*Dh flops, the
//     S x S scores and probabilities in HBM (a band mask still computes all S keys).
//   flash (Dao et al. 2022, FlashAttention; TPU splash attention): forward 4*t*H*K*Dh flops with
//     K = mean keys a query attends (causal: (S+1)/2; window W: sum_i min(i+1, W) / S, the
//     kernels skip fully masked blocks); backward 2.5x the forward (it recomputes Q.K^T, then
//     dP, dV, dQ, dK: 5 matmuls against 2; Dao et al. sec. 3.1 and appendix B). HBM traffic:
//     forward reads q, k, v and writes o and the log-sum-exp (f32 per head and token); backward
//     reads q, k, v, o, dO, lse and writes dq, dk, dv (the K/V re-reads per query block are not
//     counted). Each pass costs max(flops / (peak x e), bytes / (HBM bandwidth x e)), the cost
//     model's roofline, with e the device spec's "flash_attention" efficiency
//     (CostModel::FlashAttentionEfficiency: a kernel microbenchmark's rate on the tile-padded
//     flops below; the "dot" factor where the spec has none). The remat recompute of the
//     attention is a forward pass of the same kernel.
//   flash, as a block kernel runs it (TrainingStepOptions::flash_block = B > 0; MaxText's
//     splash attention with sa_block_q = sa_block_kv = ... = B): the mask is applied per
//     B x B block of (query, key); a block with no attended pair is skipped, any other block
//     is computed whole (the causal diagonal blocks, the window's edge blocks), so K = the
//     computed blocks' area / S (BlockCausalKeysPerQuery; causal, B dividing S: (S + B) / 2).
//     Source: jax/experimental/pallas/ops/tpu/flash_attention.py (below_or_on_diag: a tile runs
//     when its bottom-left corner is on or below the diagonal) and splash_attention (MaskInfo:
//     block_mask 0 skips a block, 1 computes it with the partial mask, 2 without a mask); MaxText
//     layers/attentions.py tpu_flash_attention (every block size min(512, S), later base.yml
//     sa_block_*: 512).
//   flash with a split backward (TrainingStepOptions::flash_split_backward; splash attention
//     with use_fused_bwd_kernel false, MaxText sa_use_fused_bwd_kernel: False): the backward is
//     two kernels, dK/dV (Q.K^T, dV = P^T dO, dP = dO V^T, dK = dS^T Q: 4 matmuls) and dQ
//     (Q.K^T, dP = dO V^T, dQ = dS K: 3), 3.5x the forward's 2 instead of 2.5x; the dQ kernel
//     reads q, k, v, dO and the f32 log-sum-exp and di (o . dO per query) once more.
//     Source: flash_attention.py _flash_attention_bwd_dkv / _flash_attention_bwd_dq;
//     splash_attention_kernel.py _splash_attention_bwd_dkv / _splash_attention_bwd_dq.
//
// Matrix-unit tiles (device spec matmul_tile t > 0, TPU MXUs): every matmul term costed here
// (the remat recompute, the attention kernel, MoE's extra expert slots) occupies the MXU as the
// cost model's graph dots do, its contracting size K and rhs non-contracting size N padded to
// multiples of t (CostModel::TilePadding); `flops` and MFU keep the useful count. Each attention
// matmul has head_dim Dh as K or N and a tile of the kernel as the other: forward Q.K^T
// (K = Dh, N = key tile) and P.V (K = key tile, N = Dh); dK/dV kernel Q.K^T and dP = dO.V^T
// (N = key tile), dV = P^T.dO and dK = dS^T.Q (K = query tile); dQ kernel Q.K^T, dP and
// dQ = dS.K (key tile); the fused backward the five over the dK/dV tiles. dot_product's key
// tile is S; the per-element flash kernel pads Dh only. On v6e (t = 256) a head_dim of 128 fills
// half the array: MaxText's guide, "How to customize your model configs on TPU"
// (docs/guides/custom_model.md): Trillium's MXU is 256x256, "two 128x128 operations on
// Trillium will halve the efficiency", head_dim should be a multiple of 256 there.
//
// Mixture of experts (config.experts = E > 0, top_k k, capacity factor C), costed here, not in
// the graph (which holds one expert-sized MLP per layer): with expert parallelism over the mesh
// axis "expert" of size ep, a dispatch group is the t tokens of each of the ep devices; each
// expert takes at most C*k*t*ep/E tokens (the capacity, padded: MaxText's dropping path,
// GShard, Lepikhin et al. 2020), so each device runs its E/ep experts over C*k*t token slots:
//   the MLP matmuls and the kept MLP activations (wi, h) are C*k times the dense ones;
//   router: 2*t*D*E flops forward (x3 with the backward), not split by the tensor axis;
//   all-to-alls per layer: dispatch and combine in the forward, their transposes in the
//     backward, 4 of V = C*k*t*D*dtype bytes each over the expert axis group (the cost model's
//     all-to-all on the links that group spans); 0 without an expert axis. They are added to the
//     step time unhidden (MaxText's dropping implementation waits on them);
//   parameters: E/ep experts per device, each split over tensor and the FSDP axes other than
//     "expert", plus the replicated [D, E] router (gradients and Adam moments alike).
//   dispatch (TrainingStepOptions::moe_dispatch): kGather (a sort and gather, as megablox or
//     Megatron's token dispatcher: no matmul work) or kEinsum (GShard's one-hot einsums, MaxText's
//     dense dropping path, moe.py dense_matmul with megablox false): per sequence of S tokens,
//     the capacity C = int(max(ceil(S*k/E) * capacity_factor, capacity_factor)) (moe.py
//     generate_masks), and the dispatch "BSM,BSEC->EBCM" and combine "EBCM,BSEC->BSM" einsums
//     are 2*t*(D/residual shards)*E*C flops each forward (x3 with the backward).
// Not modelled: the all-to-alls a remat policy would run again with the recomputed MLP input,
// load imbalance beyond the capacity, and the router's softmax / top-k (elementwise).
// Source: Lepikhin et al. 2020 (GShard: capacity, dispatch / combine all-to-alls); Fedus et al.
// 2021 (Switch: capacity factor); MaxText moe.py (expert axis, dropping path).
//
// Context parallelism (MaxText's "sequence" axis, size cp > 1; flash attention only): each
// device holds S/cp positions of its sequences (LocalLayer.tokens = batch/batch_shards x
// S/cp); every op but the attention core is per token and unchanged. Per layer, K and V
// (2 x t x KVh x Dh x dtype bytes per device) are all-gathered over the sequence group before
// the attention (forward; once more when the remat plan recomputes the attention) and dK, dV
// reduce-scattered after it (backward), with the cost model's all-gather / reduce-scatter on
// the links the group spans; added unhidden. A causal query attends (S+1)/2 keys on average
// whichever device holds it (MaxText's load-balanced reordering of the sequence).
// Source: MaxText attentions.py (context parallelism: all-gather of K/V over "sequence");
// Liu et al. 2023 (Ring Attention) for the per-device attention flops.
//
// Pipeline parallelism (the "stage" axis, p stages, m microbatches; EstimatePipeline), modelled
// analytically on top of the simulated step of one stage (layers/p layers, the whole batch of
// its data-parallel rank; the graph is built so, replicated over the stage axis):
//   step = stage step + bubble + exposed transfers,
//   bubble = (p - 1) / (m v) x stage compute (GPipe and 1F1B alike: the idle slots are
//     (p-1)/(m v+p-1) of the pipeline's time; Huang et al. 2019, GPipe; Narayanan et al. 2021,
//     "Efficient Large-Scale Language Model Training on GPU Clusters", sec. 2.2), v = 1 or the
//     model chunks per stage of the interleaved 1F1B schedule (sec. 2.2.2; Megatron-LM
//     --num-layers-per-virtual-pipeline-stage),
//   transfers: one microbatch activation [b/m, S/cp, D] per chunk boundary forward and its
//     gradient backward, 2 m v a step (collective-permute to the next stage device over ICI or
//     DCN, as the stage axis lies); the 2(p-1) on the fill and drain path are exposed, the rest
//     overlap; with blocking_transfers (Megatron-LM's p2p_communication: batch_isend_irecv,
//     req.wait(), torch.cuda.synchronize()) all 2 m v are exposed; with scatter_gather
//     (Megatron's scatter_gather_tensors_in_pipeline, sec. 4.1) each of the t tensor ranks sends
//     1/t of the activation and the receiver all-gathers it over the tensor group,
//   memory: GPipe keeps the activations of all m microbatches, 1F1B of min(p, m) (the first
//     stage's in-flight microbatches; Narayanan et al. 2021 sec. 2.2.1), interleaved of
//     min(m v, 2(p-1) + (v-1) p + 1) chunk-microbatches of 1/v of the stage's layers (the warm-up
//     of megatron/schedules.py); the temporaries but the gathered weights (a layer's backward
//     working set, the loss's logits) are one microbatch's: 1/m of the whole batch's.
// Gradient accumulation (no stage axis, m > 1 microbatches: MaxText gradient_accumulation_steps,
// Megatron-LM's forward_backward_no_pipelining): the microbatches run one after another and the
// gradients are reduced once; the flops and collectives are the graph's (the step time does not
// change) and the memory is one microbatch's, by the 1F1B rule with p = 1.
// Not modelled: the embedding and the LM head are costed on every stage (the graph of a stage
// holds both), which the last stage, the slowest (it has the head and the loss), does.
//
// Memory per device (bytes):
//   parameters, gradients (param_dtype, sharded like their parameter: FSDP reduce-scatters them),
//   optimizer state (the two Adam moments, sharded like their parameter): from the local shapes
//   of the partitioned program's parameters;
//   activations = layers x (bytes of the values the remat plan keeps), with local shapes: the
//     residual-stream values [t, D] are whole on every tensor rank, or split over it with
//     TrainingStepOptions::sequence_parallel (Megatron-LM's sequence parallelism, Korthikanti
//     et al. 2022 sec. 4.2.2; MaxText's logical axis rule activation_embed -> tensor in
//     base.yml): memory only, since its reduce-scatter + all-gather move what the graph's
//     all-reduce moves,
//     q / context [t, H*Dh], k / v [t, KVh*Dh], wi [t, ffn/tensor] (x2 for SwiGLU), h, and the
//     attention residual: dot_product t*H*S*(4 + dtype) (f32 softmax and dtype probabilities),
//     flash t*H*4 (the log-sum-exp);
//   temporaries = FSDP-gathered weights (in dtype, divided by the tensor shards; 0 without
//     FSDP) of one layer under FusionMode::kXla (XLA's compiled peak holds one layer's: the
//     GPT-3 175B v6e-256 recipe compiles to 31.8 GB, docs/simulator.md "Memory") and of two
//     under kEager / kNone (the one in use and the prefetched next: PyTorch FSDP keeps two
//     all-gather outputs alive, its notes' "FSDP Prefetch Nuances") + the larger of one layer's
//     backward working set (the gradients of its values, as large as the values the backward
//     reads, plus the values the remat plan recomputes and, with host offload, the layer's
//     offloaded values copied back; the kept values are in the activations)
//     and the loss's: under FusionMode::kXla one [t, V/tensor] buffer in dtype (the logits,
//     then their gradient; the f32 cast, log-softmax and its gradient are fused into the
//     reductions and the backward dots, as XLA:TPU's compiled peak shows), t*(V/tensor)*dtype;
//     under kEager / kNone the logits in dtype plus the log-softmax and its gradient in f32,
//     t*(V/tensor)*(dtype + 8).
//   fits = total <= HBM.
// Source of the accounting: Korthikanti et al. 2022 sec. 4 (activation bytes per layer);
// Rajbhandari et al. 2020, ZeRO (parameter, gradient and optimizer-state bytes per device).
#ifndef TESSEL_MESH_SIM_TRAINING_STEP_H_
#define TESSEL_MESH_SIM_TRAINING_STEP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/mesh/sim/simulator.h"
#include "tessel/nn/transformer.h"
#include "tessel/partitioner/partitioner.h"

namespace tessel::mesh {

enum class RematPolicy {
  kNone,
  kMinimal,
  kMinimalWithContext,
  kSaveDotWithContextExceptMlp,
  kSaveDotExceptMlpwi,
  kSaveDotExceptMlp,
  kSaveQkvProj,
  kSaveOutProj,
  kMinimalOffloaded,
  kQkvProjOffloaded,
  kSelective,
  kFull,
  kCustom,  // CustomRemat's lists
};
// MaxText's names ("none", "minimal", ..., "minimal_offloaded", "qkv_proj_offloaded", "full",
// "custom") and Megatron's "selective".
[[nodiscard]] std::string_view RematPolicyName(RematPolicy policy);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<RematPolicy> ParseRematPolicy(std::string_view name);

// How an MoE layer sends tokens to experts (file comment, "Mixture of experts").
enum class MoeDispatch { kGather, kEinsum };
// "gather" / "einsum". Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<MoeDispatch> ParseMoeDispatch(std::string_view name);

enum class AttentionKernel { kDotProduct, kFlash };
// "dot_product" / "flash" (MaxText's attention=dot_product|flash).
[[nodiscard]] std::string_view AttentionKernelName(AttentionKernel kernel);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<AttentionKernel> ParseAttentionKernel(std::string_view name);

// The values of one decoder layer (file comment). Names as MaxText's checkpoint_name tags
// where it has one ("query_proj", "context", "out_proj", "mlpwi", "mlpwo").
enum class LayerValue {
  kInput,              // x, the layer input (always kept)
  kNormOut,            // a = norm1(x)
  kQuery,              // q
  kKey,                // k
  kValue,              // v
  kAttentionResidual,  // dense: scores/probabilities; flash: log-sum-exp
  kContext,            // the attention output, before out_proj
  kOutProj,            // out
  kResidual,           // x1 = x + out (sequential block only)
  kMlpNormOut,         // m = norm2(x1) (sequential block only; parallel: m = a)
  kMlpIn,              // wi (gate and up)
  kMlpActivation,      // h = act(wi)
  kMlpOut,             // wo
};
[[nodiscard]] std::string_view LayerValueName(LayerValue value);

// RematPolicy::kCustom's values (file comment): kept in HBM (`device`) or in host memory
// (`offload`); every other value the backward reads is recomputed. Sorted, no repeats, no value
// in both.
struct CustomRemat {
  std::vector<LayerValue> device;
  std::vector<LayerValue> offload;
  bool operator==(const CustomRemat&) const = default;
};
// Adds MaxText's checkpoint names in `names` (comma-separated: "query_proj,key_proj") to
// `custom` as `where` ("device" or "offload"); `source` names the flag or key in errors.
// Errors: kInvalidArgument naming an unknown name (and the accepted ones), a name given twice,
// one of mlpwi_0 / mlpwi_1 without the other or the two placed differently (their pair is one
// value here), or an empty list entry.
absl::Status AddCustomRematNames(std::string_view names, std::string_view where,
                                 std::string_view source, CustomRemat* custom);
// "device: a,b; offload: c" with MaxText's names (empty lists left out), for reports.
[[nodiscard]] std::string CustomRematToString(const CustomRemat& custom);

// The forward ops of one layer, each producing the values listed beside it.
enum class LayerOp {
  kNorm1,          // a
  kQkvProj,        // q, k, v
  kAttention,      // context, attention residual
  kOutProj,        // out
  kResidualAdd,    // x1
  kNorm2,          // m
  kMlpIn,          // wi
  kMlpActivation,  // h
  kMlpOut,         // wo
};
[[nodiscard]] std::string_view LayerOpName(LayerOp op);

// What one layer keeps and recomputes under a policy (the same for every layer).
struct RematPlan {
  std::vector<LayerValue> kept;     // held from forward to backward, in enum order
  std::vector<LayerOp> recomputed;  // run again in the backward, in enum order
  // The kept values held in host memory (host offload policies; file comment), in enum order.
  std::vector<LayerValue> offloaded;
};

// The closure of the file comment. `parallel_block`: PaLM's block (no x1, m = a). `replay`
// (TrainingStepOptions::remat_replay): the framework re-runs the whole forward of the
// checkpointed layer, so kFull recomputes every op of the layer, mlp_out included; the other
// policies are unchanged (selective's checkpointed function is the attention core, recomputed
// whole either way).
// `custom`: the lists of RematPolicy::kCustom (ignored by the other policies).
[[nodiscard]] RematPlan PlanRemat(RematPolicy policy, bool parallel_block, bool replay = false,
                                  const CustomRemat& custom = {});

// One layer's sizes on one device (see the file comment for the splits).
struct LocalLayer {
  int64_t tokens = 0;  // local sequences x seq_len
  int64_t seq_len = 0;
  int64_t d_model = 0;
  int64_t heads = 0;     // ceil(heads / tensor shards)
  int64_t kv_heads = 0;  // ceil(kv_heads / tensor shards)
  int64_t head_dim = 0;
  int64_t ffn = 0;     // ceil(ffn / tensor shards)
  bool gated = false;  // SwiGLU (Llama): two input matrices
  int64_t dtype_bytes = 2;
  double keys_per_query = 0;    // attended keys per query (flash); S for dot_product
  double mlp_token_factor = 1;  // MoE: capacity_factor * top_k token slots per token; dense 1
  int64_t residual_shards = 1;  // sequence parallelism: the [t, D] values split this many ways
  // Keys per tile of the attention forward's two matmuls (the size they pad on the matrix
  // unit besides head_dim): seq_len for dot_product, the flash kernel's key block, 0 for the
  // per-element (ideal) flash kernel (not padded).
  int64_t attention_kv_tile = 0;
};

// Local sizes of `config` under `shards` (batch split over shards.batch, the sequence over
// shards.sequence, heads and ffn over shards.tensor, ceilings as the partitioner pads).
[[nodiscard]] LocalLayer LocalLayerOf(const nn::TransformerConfig& config,
                                      const nn::RecipeShards& shards, AttentionKernel attention);

// Mean keys a causal query attends, with a sliding window of `window` keys (0: none):
// sum_{i=0}^{S-1} min(i + 1, W) / S.
[[nodiscard]] double CausalKeysPerQuery(int64_t seq_len, int64_t window);

// Mean keys per query a block-sparse attention kernel computes (file comment, "flash, as a block
// kernel runs it"): the causal mask with a sliding window of `window` keys (0: none) over
// `block` x `block` tiles of (query, key) (the last tile of each dimension shorter when `block`
// does not divide `seq_len`); a tile holding an attended pair counts whole. block <= 0 or
// block >= seq_len and no window: the whole S x S (S keys); block 1: CausalKeysPerQuery.
[[nodiscard]] double BlockCausalKeysPerQuery(int64_t seq_len, int64_t window, int64_t block);
// The same over rectangular tiles of `block_q` queries by `block_kv` keys (a row of tiles runs
// from the key tile holding its first visible key to the one holding its last query's key).
// Equal sizes: BlockCausalKeysPerQuery.
[[nodiscard]] double BlockCausalKeysPerQuery(int64_t seq_len, int64_t window, int64_t block_q,
                                             int64_t block_kv);

// The tiles of a block flash kernel (MaxText's splash attention sa_block_*): forward
// (sa_block_q x sa_block_kv), the dK/dV backward kernel (sa_block_q_dkv x sa_block_kv_dkv; also
// the fused backward's) and the dQ kernel (sa_block_q_dq x sa_block_kv_dq). 0: per element.
struct FlashBlocks {
  int64_t q = 0, kv = 0, q_dkv = 0, kv_dkv = 0, q_dq = 0, kv_dq = 0;
  bool operator==(const FlashBlocks&) const = default;
};
// "B" (every tile B x B) or six sizes "q,kv,q_dkv,kv_dkv,q_dq,kv_dq"; `source` names the flag.
// Errors: kInvalidArgument naming `text` when it is neither, or a size is not positive.
[[nodiscard]] absl::StatusOr<FlashBlocks> ParseFlashBlocks(std::string_view text,
                                                           std::string_view source);

// Bytes of `value` on one device (file comment).
[[nodiscard]] int64_t LocalValueBytes(LayerValue value, const LocalLayer& layer,
                                      AttentionKernel attention);

// Forward matmul flops of `op` on one device (0 for the elementwise ops); kAttention is the two
// attention matmuls over layer.keys_per_query keys: 4 * t * H * K * Dh; the MLP ops scale with
// mlp_token_factor.
[[nodiscard]] double LocalOpFlops(LayerOp op, const LocalLayer& layer);
// The flops `op` occupies a `tile` x `tile` matrix unit for (file comment, "Matrix-unit
// tiles"): LocalOpFlops with each matmul's contracting and rhs non-contracting sizes padded to
// multiples of `tile` (CostModel::TilePadding); kAttention pads head_dim and
// layer.attention_kv_tile. tile <= 0: LocalOpFlops.
[[nodiscard]] double LocalOpMxuFlops(LayerOp op, const LocalLayer& layer, int64_t tile);

struct TrainingStepOptions {
  RematPolicy remat = RematPolicy::kNone;
  CustomRemat custom_remat;  // remat == kCustom: its lists
  AttentionKernel attention = AttentionKernel::kDotProduct;
  // MoE: the global ids of the expert-axis group of the device costed (empty or one id: no
  // expert parallelism, no all-to-all).
  std::vector<int64_t> expert_group;
  // Context parallelism: the global ids of the "sequence"-axis group of the device costed
  // (empty or one id: none).
  std::vector<int64_t> sequence_group;
  // Sequence parallelism (file comment, memory): the residual-stream values split over the
  // tensor shards.
  bool sequence_parallel = false;
  // Remat by replay (file comment, "Replay"): the framework re-runs the whole forward of each
  // checkpointed layer (torch.utils.checkpoint, Megatron-LM's CheckpointFunction), not only what
  // the backward reads (JAX remat, which drops dead recomputation).
  bool remat_replay = false;
  // Dropout probability on the attention probabilities (Megatron-LM --attention-dropout); any
  // value > 0 costs the unfused dropout kernels (file comment, "Attention dropout").
  double attention_dropout = 0;
  // Flash attention as a block kernel (file comment): the mask applied per flash_block x
  // flash_block tile (0: per element, the ideal kernel), and a backward split into dK/dV and dQ
  // kernels (false: one fused backward, FlashAttention-2).
  int64_t flash_block = 0;
  bool flash_split_backward = false;
  // Per-kernel tiles (FlashBlocks); when any is set they replace flash_block.
  FlashBlocks flash_blocks;
  // MoE only: how tokens reach the experts (file comment).
  MoeDispatch moe_dispatch = MoeDispatch::kGather;
};

// Memory of one device (file comment), bytes.
struct TrainingMemory {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t temporary_bytes = 0;
  // Host offload (file comment): the offloaded activations, in the host's memory; not part of
  // total_bytes (HBM).
  int64_t host_offloaded_bytes = 0;
  int64_t total_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes + temporary_bytes;
  }
};

// Per device and step.
struct TrainingStepEstimate {
  RematPlan remat;
  double recompute_flops = 0;
  double recompute_seconds = 0;  // matmuls, and the elementwise kernels when they are unfused
  int64_t recompute_bytes = 0;   // HBM bytes of the recomputed elementwise kernels (unfused only)
  // Attention dropout, all layers (0 without it, with flash, or under FusionMode::kXla).
  int64_t dropout_bytes = 0;
  double dropout_seconds = 0;
  // Quantized matmuls (CostModelOptions::matmul_dtype int8 or fp8), all layers: the HBM passes
  // that quantize their operands (file comment, "Quantized matmuls"); 0 in bf16.
  int64_t quantize_bytes = 0;
  double quantize_seconds = 0;
  // Of quantize_bytes: the weights' passes for one microbatch; EstimatePipeline adds them once
  // more for each further microbatch (gradient accumulation or pipeline).
  int64_t quantize_weight_bytes = 0;
  // The flash kernel, forward and backward, all layers (0 with dot_product: the graph costs it).
  double attention_flops = 0;
  int64_t attention_bytes = 0;
  double attention_seconds = 0;
  // Mixture of experts, all layers (0 when dense): the extra expert and router matmuls, and the
  // all-to-alls (seconds on ICI and DCN, bytes this device sends).
  double moe_flops = 0;
  double moe_dispatch_flops = 0;  // of moe_flops: the einsum dispatch and combine (kEinsum)
  double moe_seconds = 0;
  double moe_ici_seconds = 0;
  double moe_dcn_seconds = 0;
  int64_t moe_ici_bytes = 0;
  int64_t moe_dcn_bytes = 0;
  // Context parallelism, all layers (0 without a sequence group): the K/V all-gathers and the
  // dK/dV reduce-scatters (seconds on ICI and DCN, bytes this device sends).
  double cp_ici_seconds = 0;
  double cp_dcn_seconds = 0;
  int64_t cp_ici_bytes = 0;
  int64_t cp_dcn_bytes = 0;
  TrainingMemory memory;
  // Host offload (file comment): bytes copied each way per step (device -> host in the forward,
  // host -> device in the backward) and the seconds of one way at the host link's bandwidth.
  int64_t offload_bytes = 0;
  double offload_seconds = 0;
  int64_t gathered_weight_bytes = 0;  // the FSDP-gathered weights in memory.temporary_bytes
  int64_t hbm_bytes = 0;
  bool fits = true;
};

// Estimates the terms of the file comment for `config` trained with `options` on the
// partitioned `program` (its parameters `weight_parameters` and `moment_parameters`, as
// nn::TransformerStep lists them).
// Errors: kInvalidArgument when a parameter number is outside the program, or for a host offload
// policy on a device spec without host_bandwidth_gbytes_per_s; kUnimplemented for
// flash attention with head_dim == seq_len (DenseAttentionFilter tells the S x S tensors by
// their shape and could not tell them from [.., S, head_dim]).
[[nodiscard]] absl::StatusOr<TrainingStepEstimate> EstimateTrainingStep(
    const nn::TransformerConfig& config, const nn::RecipeShards& shards,
    const TrainingStepOptions& options, const CostModel& cost_model,
    const partitioner::SpmdProgram& program, const std::vector<int64_t>& weight_parameters,
    const std::vector<int64_t>& moment_parameters);

// True for a node of the dense attention core of the step graph: a rank-4 value [b, h, S, S]
// (scores, mask, softmax, probabilities and their gradients) or an op reading one (the dots,
// the softmax reductions). For SimulatorOptions::costed_elsewhere with flash attention.
[[nodiscard]] bool IsDenseAttentionNode(const Node& node, int64_t seq_len);
[[nodiscard]] std::function<bool(const Node&)> DenseAttentionFilter(
    const nn::TransformerConfig& config);

// Adds the estimate's recompute, flash-attention, attention-dropout, quantization and MoE seconds
// and flops to `report` (step time of both schedules, compute, flops; the MoE all-to-alls to ICI
// / DCN seconds and bytes), the exposed host offload copies to each schedule's step time, and
// replaces its memory verdict: peak_memory_bytes becomes the estimate's total, exceeds_hbm its
// !fits, and the live-buffer "error: peak memory" warning (which assumes no remat and dense
// attention) gives way to a "warning: ... does not fit" one when it does not fit.
void ApplyTrainingStep(const TrainingStepEstimate& estimate, SimulationReport& report);

// The exposed seconds of the host offload copies (file comment, "Host offload"): 2 x
// estimate.offload_seconds in order; overlapped, what the forward and the backward windows of
// `compute_seconds` (the step's compute, estimate.recompute_seconds included) do not hide.
// 0 without offload.
[[nodiscard]] double HostOffloadExposedSeconds(const TrainingStepEstimate& estimate,
                                               double compute_seconds, bool overlap);

// Pipeline schedules (file comment): "gpipe" (all forwards, then all backwards) and "1f1b"
// (PipeDream-Flush: one forward, one backward in the steady state).
enum class PipelineSchedule { kGpipe, kOneForwardOneBackward };
[[nodiscard]] std::string_view PipelineScheduleName(PipelineSchedule schedule);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(std::string_view name);

// (p - 1) / (m + p - 1): the idle fraction of a p-stage pipeline over m microbatches (0 for
// p <= 1).
[[nodiscard]] double PipelineBubbleFraction(int64_t stages, int64_t microbatches);

struct PipelineOptions {
  // The global ids of the "stage"-axis group of the device costed, stage 0 first (fewer than 2:
  // no pipeline).
  std::vector<int64_t> stage_group;
  int64_t microbatches = 1;
  PipelineSchedule schedule = PipelineSchedule::kOneForwardOneBackward;
  // Model chunks per stage of the interleaved 1F1B schedule (file comment, "Interleaving"); 1:
  // one contiguous block of layers per stage.
  int64_t virtual_stages = 1;
  // Every stage-to-stage transfer waits on the compute stream (Megatron-LM's
  // p2p_communication without --overlap-p2p-comm): all of them are exposed, not only the fill
  // and drain.
  bool blocking_transfers = false;
  // Scatter-gather transfers (Megatron-LM's scatter_gather_tensors_in_pipeline, Narayanan et al.
  // 2021 sec. 4.1): each of the tensor_group's ranks sends 1/t of the activation to its peer,
  // which all-gathers it over tensor_group (the global ids of the costed device's "tensor" group).
  bool scatter_gather = false;
  std::vector<int64_t> tensor_group;
};

// Per device and step (file comment).
struct PipelineEstimate {
  int64_t stages = 1;
  int64_t microbatches = 1;
  PipelineSchedule schedule = PipelineSchedule::kOneForwardOneBackward;
  int64_t virtual_stages = 1;
  double bubble_fraction = 0;   // (p-1)/(m v+p-1)
  int64_t transfer_bytes = 0;   // one microbatch activation, per device
  double transfer_seconds = 0;  // one stage-to-stage transfer (with its all-gather)
  // The exposed transfers: the 2(p-1) on the fill and drain path, or all 2 m v when blocking.
  double exposed_ici_seconds = 0;
  double exposed_dcn_seconds = 0;
  int64_t ici_bytes = 0;  // all 2 m v sends of the step, per device
  int64_t dcn_bytes = 0;
};

// The pipeline terms for one stage of `stage_config` (layers = the stage's layers, batch and
// seq_len the global ones) whose training-step estimate is `estimate`: sets the transfers and
// the bubble fraction, and scales estimate.memory.activation_bytes to the schedule's in-flight
// microbatches and the per-batch temporaries to one microbatch's (and estimate.fits with them),
// and adds the weights' quantize passes of the further microbatches to estimate.quantize_bytes
// and quantize_seconds ("Quantized matmuls"). No stage group: gradient accumulation over
// options.microbatches (file comment; stages = 1, the memory of one microbatch). Errors:
// kInvalidArgument when microbatches does not divide the sequences of a stage's data-parallel rank,
// or virtual stages with the GPipe schedule.
[[nodiscard]] absl::StatusOr<PipelineEstimate> EstimatePipeline(
    const nn::TransformerConfig& stage_config, const nn::RecipeShards& shards,
    const PipelineOptions& options, const CostModel& cost_model, TrainingStepEstimate& estimate);

// Adds the bubble ((p-1)/(m v) x report.compute_seconds: call after ApplyTrainingStep) and the
// exposed transfers to the step time (all schedules) and the transfer bytes to `report`.
void ApplyPipeline(const PipelineEstimate& pipeline, SimulationReport& report);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_SIM_TRAINING_STEP_H_
