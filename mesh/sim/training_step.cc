#include "tessel/mesh/sim/training_step.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tessel/core/format.h"
#include "tessel/core/status_macros.h"

namespace tessel::mesh {
namespace {

constexpr RematPolicy kPolicies[] = {
    RematPolicy::kNone,
    RematPolicy::kMinimal,
    RematPolicy::kMinimalWithContext,
    RematPolicy::kSaveDotWithContextExceptMlp,
    RematPolicy::kSaveDotExceptMlpwi,
    RematPolicy::kSaveDotExceptMlp,
    RematPolicy::kSaveQkvProj,
    RematPolicy::kSaveOutProj,
    RematPolicy::kMinimalOffloaded,
    RematPolicy::kQkvProjOffloaded,
    RematPolicy::kSelective,
    RematPolicy::kFull,
    RematPolicy::kCustom,
};

constexpr LayerValue kValues[] = {
    LayerValue::kInput,      LayerValue::kNormOut, LayerValue::kQuery,
    LayerValue::kKey,        LayerValue::kValue,   LayerValue::kAttentionResidual,
    LayerValue::kContext,    LayerValue::kOutProj, LayerValue::kResidual,
    LayerValue::kMlpNormOut, LayerValue::kMlpIn,   LayerValue::kMlpActivation,
    LayerValue::kMlpOut,
};

constexpr LayerOp kOps[] = {LayerOp::kNorm1,   LayerOp::kQkvProj,       LayerOp::kAttention,
                            LayerOp::kOutProj, LayerOp::kResidualAdd,   LayerOp::kNorm2,
                            LayerOp::kMlpIn,   LayerOp::kMlpActivation, LayerOp::kMlpOut};

// The values a policy saves (file comment of the header).
bool Saved(RematPolicy policy, LayerValue v) {
  using V = LayerValue;
  const bool qkv = v == V::kQuery || v == V::kKey || v == V::kValue;
  switch (policy) {
    case RematPolicy::kNone:
      return true;
    case RematPolicy::kMinimal:
    case RematPolicy::kMinimalOffloaded:
      return qkv || v == V::kOutProj || v == V::kMlpIn || v == V::kMlpOut;
    case RematPolicy::kMinimalWithContext:
      return qkv || v == V::kContext || v == V::kOutProj || v == V::kMlpIn || v == V::kMlpOut;
    case RematPolicy::kSaveDotWithContextExceptMlp:
      return qkv || v == V::kContext || v == V::kOutProj;
    case RematPolicy::kSaveDotExceptMlpwi:
      return qkv || v == V::kOutProj || v == V::kMlpOut;
    case RematPolicy::kSaveDotExceptMlp:
      return qkv || v == V::kOutProj;
    case RematPolicy::kSaveQkvProj:
    case RematPolicy::kQkvProjOffloaded:
      return qkv;
    case RematPolicy::kSaveOutProj:
      return v == V::kOutProj;
    case RematPolicy::kSelective:
      return v != V::kContext && v != V::kAttentionResidual;
    case RematPolicy::kFull:
    case RematPolicy::kCustom:  // PlanRemat reads CustomRemat's lists
      return false;
  }
  return false;
}

bool Contains(const std::vector<LayerValue>& values, LayerValue v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

// The policies whose saved values go to host memory (header comment, "Host offload"): all of
// them; the layer input is the scan carry and stays on device.
bool Offloads(RematPolicy policy) {
  return policy == RematPolicy::kMinimalOffloaded || policy == RematPolicy::kQkvProjOffloaded;
}

LayerOp ProducerOf(LayerValue v) {
  switch (v) {
    case LayerValue::kInput:
    case LayerValue::kNormOut:
      return LayerOp::kNorm1;
    case LayerValue::kQuery:
    case LayerValue::kKey:
    case LayerValue::kValue:
      return LayerOp::kQkvProj;
    case LayerValue::kAttentionResidual:
    case LayerValue::kContext:
      return LayerOp::kAttention;
    case LayerValue::kOutProj:
      return LayerOp::kOutProj;
    case LayerValue::kResidual:
      return LayerOp::kResidualAdd;
    case LayerValue::kMlpNormOut:
      return LayerOp::kNorm2;
    case LayerValue::kMlpIn:
      return LayerOp::kMlpIn;
    case LayerValue::kMlpActivation:
      return LayerOp::kMlpActivation;
    case LayerValue::kMlpOut:
      return LayerOp::kMlpOut;
  }
  return LayerOp::kNorm1;
}

std::vector<LayerValue> InputsOf(LayerOp op, bool parallel_block) {
  using V = LayerValue;
  switch (op) {
    case LayerOp::kNorm1:
      return {V::kInput};
    case LayerOp::kQkvProj:
      return {V::kNormOut};
    case LayerOp::kAttention:
      return {V::kQuery, V::kKey, V::kValue};
    case LayerOp::kOutProj:
      return {V::kContext};
    case LayerOp::kResidualAdd:
      return {V::kInput, V::kOutProj};
    case LayerOp::kNorm2:
      return {V::kResidual};
    case LayerOp::kMlpIn:
      return {parallel_block ? V::kNormOut : V::kMlpNormOut};
    case LayerOp::kMlpActivation:
      return {V::kMlpIn};
    case LayerOp::kMlpOut:
      return {V::kMlpActivation};
  }
  return {};
}

// The values the backward ops read (header comment).
std::vector<LayerValue> BackwardReads(bool parallel_block) {
  using V = LayerValue;
  std::vector<V> reads = {V::kInput,   V::kNormOut, V::kQuery,
                          V::kKey,     V::kValue,   V::kAttentionResidual,
                          V::kContext, V::kMlpIn,   V::kMlpActivation};
  if (!parallel_block) {
    reads.push_back(V::kResidual);
    reads.push_back(V::kMlpNormOut);
  }
  return reads;
}

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Roofline of one fused kernel, as CostModel::Cost costs a local op of class "dot", at
// `efficiency` of the peaks: the matmul_dtype peak when `quantized` (the layers' projections and
// experts), the dtype's own otherwise (attention, which quantized training leaves in bf16).
double KernelSeconds(const CostModel& model, double flops, double bytes, DType dtype,
                     double efficiency, bool quantized) {
  const double hbm_bytes_per_s = model.topology().device_spec().hbm_bandwidth_gbytes_per_s * 1e9;
  const double peak =
      quantized ? model.MatmulPeakFlopsPerSecond(dtype) : model.PeakFlopsPerSecond(dtype);
  return std::max(flops / (peak * efficiency), bytes / (hbm_bytes_per_s * efficiency));
}

// One forward pass of the attention core on one device: flops, HBM bytes, seconds.
struct AttentionPass {
  double flops = 0;
  double bytes = 0;
  double seconds = 0;
};

AttentionPass AttentionForward(const CostModel& model, const LocalLayer& layer,
                               AttentionKernel attention, DType dtype) {
  AttentionPass pass;
  pass.flops = LocalOpFlops(LayerOp::kAttention, layer);
  auto bytes = [&](LayerValue v) {
    return static_cast<double>(LocalValueBytes(v, layer, attention));
  };
  const double qkvo = bytes(LayerValue::kQuery) + bytes(LayerValue::kKey) +
                      bytes(LayerValue::kValue) + bytes(LayerValue::kContext);
  if (attention == AttentionKernel::kFlash) {
    pass.bytes = qkvo + bytes(LayerValue::kAttentionResidual);
  } else {
    // Scores written by the first dot and read by the softmax, probabilities written by it and
    // read by the second dot, all S x S (in dtype).
    const double scores =
        static_cast<double>(layer.tokens) * layer.heads * layer.seq_len * layer.dtype_bytes;
    pass.bytes = qkvo + 4 * scores;
  }
  // The seconds pad the matmuls to the matrix unit's tile (header, "Matrix-unit tiles").
  const double mxu_flops =
      LocalOpMxuFlops(LayerOp::kAttention, layer, model.topology().device_spec().matmul_tile);
  // The flash kernel at its own measured rate where the device spec has one (header,
  // "flash"); the dense path's dots are XLA's.
  const double efficiency = attention == AttentionKernel::kFlash ? model.FlashAttentionEfficiency()
                                                                 : model.Efficiency(OpClass::kDot);
  pass.seconds = KernelSeconds(model, mxu_flops, pass.bytes, dtype, efficiency, false);
  return pass;
}

// HBM bytes of one recomputed elementwise op of a layer when it runs as its own kernel (the
// unfused frameworks): its inputs read and its output written. The matmuls are costed by flops.
int64_t ElementwiseRecomputeBytes(LayerOp op, const LocalLayer& layer, AttentionKernel attention) {
  auto bytes = [&](LayerValue v) { return LocalValueBytes(v, layer, attention); };
  switch (op) {
    case LayerOp::kNorm1:
      return bytes(LayerValue::kInput) + bytes(LayerValue::kNormOut);
    case LayerOp::kResidualAdd:
      return bytes(LayerValue::kInput) + bytes(LayerValue::kOutProj) + bytes(LayerValue::kResidual);
    case LayerOp::kNorm2:
      return bytes(LayerValue::kResidual) + bytes(LayerValue::kMlpNormOut);
    case LayerOp::kMlpActivation:
      return bytes(LayerValue::kMlpIn) + bytes(LayerValue::kMlpActivation);
    case LayerOp::kMlpOut:
      // The layer's closing residual add (x1 + wo), replayed with mlp_out.
      return 3 * bytes(LayerValue::kMlpOut);
    case LayerOp::kQkvProj:
    case LayerOp::kAttention:
    case LayerOp::kOutProj:
    case LayerOp::kMlpIn:
      return 0;
  }
  return 0;
}

// Attention dropout (header comment): the dropout kernel over the [t, H, S] probabilities
// writes its output and a one-byte mask forward and reads them back in the backward, once more
// forward when the remat plan recomputes the attention. Fused away under XLA (the mask comes
// from the RNG inside the softmax fusion) and inside a flash kernel.
void EstimateAttentionDropout(const nn::TransformerConfig& config,
                              const TrainingStepOptions& options, const CostModel& cost_model,
                              const LocalLayer& layer, TrainingStepEstimate& e) {
  if (options.attention_dropout <= 0 || options.attention != AttentionKernel::kDotProduct ||
      cost_model.options().fusion == FusionMode::kXla) {
    return;
  }
  const double elements = static_cast<double>(layer.tokens) * static_cast<double>(layer.heads) *
                          static_cast<double>(layer.seq_len);
  // Forward: read the probabilities, write the output and the mask; backward: read the
  // gradient and the mask, write the gradient.
  const double pass = elements * static_cast<double>(2 * layer.dtype_bytes + 1);
  const bool recomputed = std::find(e.remat.recomputed.begin(), e.remat.recomputed.end(),
                                    LayerOp::kAttention) != e.remat.recomputed.end();
  const double bytes = static_cast<double>(config.layers) * pass * (recomputed ? 3 : 2);
  const double hbm_bytes_per_s = cost_model.topology().device_spec().hbm_bandwidth_gbytes_per_s *
                                 1e9 * cost_model.Efficiency(OpClass::kElementwise);
  e.dropout_bytes = static_cast<int64_t>(bytes);
  e.dropout_seconds = bytes / hbm_bytes_per_s;
}

// Quantized training (header comment, "Quantized matmuls"): the HBM passes that quantize the
// operands of every matmul of the layers, added to `e`.
void EstimateQuantization(const nn::TransformerConfig& config, const nn::RecipeShards& shards,
                          const CostModel& cost_model, const LocalLayer& layer,
                          TrainingStepEstimate& e) {
  const std::string& dtype = cost_model.options().matmul_dtype;
  if (dtype.empty() || dtype == "bf16" || dtype == "f16" || dtype == "f32") return;
  const double db = static_cast<double>(layer.dtype_bytes);
  // AQT int8: an abs-max reduction reads the operand, the quantize reads it again and writes
  // int8. fp8 with delayed scaling: one cast reads it and writes fp8 (the amax is taken in the
  // same pass, the scale is last steps').
  const double bytes_per_element = dtype == "s8" ? 2 * db + 1 : db + 1;
  const double t = static_cast<double>(layer.tokens), d = static_cast<double>(layer.d_model);
  const double q = static_cast<double>(layer.heads * layer.head_dim);
  const double kv = static_cast<double>(layer.kv_heads * layer.head_dim);
  const double f = static_cast<double>(layer.ffn) * (layer.gated ? 2 : 1);
  const double mlp_t = t * layer.mlp_token_factor;
  // An expert's matrices are whole on its device (split by FSDP and gathered like the rest).
  const double local_experts =
      config.experts > 0 ? static_cast<double>(Ceil(config.experts, shards.expert)) : 1;
  struct Operands {
    LayerOp op;
    double input, weight, output;  // elements on this device: X, W (gathered), Y (and dY)
  };
  const Operands matmuls[] = {
      {LayerOp::kQkvProj, t * d, d * (q + 2 * kv), t * (q + 2 * kv)},
      {LayerOp::kOutProj, t * q, q * d, t * d},
      {LayerOp::kMlpIn, mlp_t * d, local_experts * d * f, mlp_t * f},
      {LayerOp::kMlpOut, mlp_t * static_cast<double>(layer.ffn),
       local_experts * static_cast<double>(layer.ffn) * d, mlp_t * d},
  };
  double elements = 0, weight_elements = 0;
  for (const Operands& m : matmuls) {
    const bool recomputed = std::find(e.remat.recomputed.begin(), e.remat.recomputed.end(), m.op) !=
                            e.remat.recomputed.end();
    // Each forward run (and its remat recompute) quantizes X and W; the backward's dX = dY W^T
    // quantizes dY and W, its dW = X^T dY quantizes X and dY, each along its own contracting
    // dimension (AQT's use_fwd_quant false: nothing is reused across the three).
    const double forwards = recomputed ? 2 : 1;
    elements += (forwards + 1) * (m.input + m.weight) + 2 * m.output;
    weight_elements += (forwards + 1) * m.weight;
  }
  const double layers = static_cast<double>(config.layers);
  const double bytes = layers * elements * bytes_per_element;
  const double hbm_bytes_per_s = cost_model.topology().device_spec().hbm_bandwidth_gbytes_per_s *
                                 1e9 * cost_model.Efficiency(OpClass::kElementwise);
  e.quantize_bytes = static_cast<int64_t>(bytes);
  e.quantize_weight_bytes = static_cast<int64_t>(layers * weight_elements * bytes_per_element);
  e.quantize_seconds = bytes / hbm_bytes_per_s;
}

// Microbatches (gradient accumulation or pipeline) re-quantize the weights (header comment,
// "Quantized matmuls"): every microbatch's forward and backward quantize them again; the
// activations' passes were counted for the whole batch already.
void RequantizeWeightsPerMicrobatch(int64_t microbatches, TrainingStepEstimate& e) {
  if (microbatches <= 1 || e.quantize_weight_bytes <= 0) return;
  const double extra =
      static_cast<double>(microbatches - 1) * static_cast<double>(e.quantize_weight_bytes);
  const double seconds_per_byte = e.quantize_seconds / static_cast<double>(e.quantize_bytes);
  e.quantize_bytes += static_cast<int64_t>(extra);
  e.quantize_seconds += extra * seconds_per_byte;
}

// The MoE terms of the header comment, added to `e` (memory included).
void EstimateMoe(const nn::TransformerConfig& config, const nn::RecipeShards& shards,
                 const TrainingStepOptions& options, const CostModel& cost_model,
                 const LocalLayer& layer, TrainingStepEstimate& e) {
  const double layers = static_cast<double>(config.layers);
  const double t = static_cast<double>(layer.tokens), d = static_cast<double>(config.d_model);
  // The graph ran the MLP once per token (forward and the two backward matmuls: 3x); the
  // capacity-padded experts run it mlp_token_factor times.
  LocalLayer dense = layer;
  dense.mlp_token_factor = 1;
  const double mlp_forward =
      LocalOpFlops(LayerOp::kMlpIn, dense) + LocalOpFlops(LayerOp::kMlpOut, dense);
  const double router = 2 * t * d * static_cast<double>(config.experts);
  const int64_t tile = cost_model.topology().device_spec().matmul_tile;
  auto pad = [tile](double size) { return CostModel::TilePadding(size, tile); };
  const double mlp_forward_mxu = LocalOpMxuFlops(LayerOp::kMlpIn, dense, tile) +
                                 LocalOpMxuFlops(LayerOp::kMlpOut, dense, tile);
  const double router_mxu = router * pad(d) * pad(static_cast<double>(config.experts));
  double dispatch = 0, dispatch_mxu = 0;
  if (options.moe_dispatch == MoeDispatch::kEinsum) {
    // MaxText moe.py generate_masks: the capacity of one expert per sequence.
    const double per_sequence =
        std::ceil(static_cast<double>(config.seq_len) * static_cast<double>(config.top_k) /
                  static_cast<double>(config.experts));
    const double capacity =
        std::floor(std::max(per_sequence * config.capacity_factor, config.capacity_factor));
    dispatch = 2 * (2 * t * d / static_cast<double>(layer.residual_shards) *
                    static_cast<double>(config.experts) * capacity);
    // Dispatch contracts the sequence against E x C slots, combine the reverse.
    dispatch_mxu = dispatch * pad(static_cast<double>(config.seq_len)) *
                   pad(static_cast<double>(config.experts) * capacity);
  }
  e.moe_dispatch_flops = layers * 3 * dispatch;
  const double flops = 3 * ((layer.mlp_token_factor - 1) * mlp_forward + router + dispatch);
  e.moe_flops = layers * flops;
  const double mxu_flops =
      3 * ((layer.mlp_token_factor - 1) * mlp_forward_mxu + router_mxu + dispatch_mxu);
  e.moe_seconds = layers * KernelSeconds(cost_model, mxu_flops, 0, config.dtype,
                                         cost_model.Efficiency(OpClass::kDot), true);
  if (options.expert_group.size() > 1) {
    const int64_t bytes = static_cast<int64_t>(
        std::ceil(layer.mlp_token_factor * t * d * static_cast<double>(layer.dtype_bytes)));
    const NodeCost a2a = cost_model.CollectiveCost(Opcode::kAllToAll, options.expert_group, bytes,
                                                   options.expert_group[0]);
    e.moe_ici_seconds = 4 * layers * a2a.ici_seconds;
    e.moe_dcn_seconds = 4 * layers * a2a.dcn_seconds;
    e.moe_ici_bytes = 4 * config.layers * a2a.ici_bytes;
    e.moe_dcn_bytes = 4 * config.layers * a2a.dcn_bytes;
  }
  // Parameters: the graph holds one expert per layer split over tensor x fsdp; a device holds
  // E/ep experts split over tensor x (fsdp without the expert axis), and the router.
  const int64_t mlp = config.arch == nn::TransformerArch::kLlama
                          ? 3 * config.d_model * config.ffn
                          : 2 * config.d_model * config.ffn + config.ffn + config.d_model;
  const int64_t param_bytes = ByteWidth(config.param_dtype);
  const int64_t graph_expert = Ceil(mlp, shards.tensor * shards.fsdp);
  const int64_t local_experts =
      Ceil(config.experts, shards.expert) * Ceil(mlp, shards.tensor * shards.fsdp_without_expert);
  const int64_t extra = config.layers *
                        (local_experts - graph_expert + config.d_model * config.experts) *
                        param_bytes;
  e.memory.parameter_bytes += extra;
  e.memory.gradient_bytes += extra;
  e.memory.optimizer_bytes += 2 * extra;
}

// Context parallelism (header comment): K and V all-gathered over the sequence group in the
// forward (and again when the remat plan recomputes the attention), dK and dV reduce-scattered
// in the backward.
void EstimateContextParallel(const nn::TransformerConfig& config,
                             const TrainingStepOptions& options, const CostModel& cost_model,
                             const LocalLayer& layer, TrainingStepEstimate& e) {
  const std::vector<int64_t>& group = options.sequence_group;
  if (group.size() <= 1) return;
  const int64_t local = LocalValueBytes(LayerValue::kKey, layer, options.attention) +
                        LocalValueBytes(LayerValue::kValue, layer, options.attention);
  const int64_t full = local * static_cast<int64_t>(group.size());
  const NodeCost gather = cost_model.CollectiveCost(Opcode::kAllGather, group, full, group[0]);
  const NodeCost scatter = cost_model.CollectiveCost(Opcode::kReduceScatter, group, full, group[0]);
  const bool regathered = std::find(e.remat.recomputed.begin(), e.remat.recomputed.end(),
                                    LayerOp::kAttention) != e.remat.recomputed.end();
  const double gathers = regathered ? 2 : 1;
  const double layers = static_cast<double>(config.layers);
  e.cp_ici_seconds = layers * (gathers * gather.ici_seconds + scatter.ici_seconds);
  e.cp_dcn_seconds = layers * (gathers * gather.dcn_seconds + scatter.dcn_seconds);
  e.cp_ici_bytes = static_cast<int64_t>(layers * (gathers * static_cast<double>(gather.ici_bytes) +
                                                  static_cast<double>(scatter.ici_bytes)));
  e.cp_dcn_bytes = static_cast<int64_t>(layers * (gathers * static_cast<double>(gather.dcn_bytes) +
                                                  static_cast<double>(scatter.dcn_bytes)));
}

}  // namespace

std::string_view RematPolicyName(RematPolicy policy) {
  switch (policy) {
    case RematPolicy::kNone:
      return "none";
    case RematPolicy::kMinimal:
      return "minimal";
    case RematPolicy::kMinimalWithContext:
      return "minimal_with_context";
    case RematPolicy::kSaveDotWithContextExceptMlp:
      return "save_dot_with_context_except_mlp";
    case RematPolicy::kSaveDotExceptMlpwi:
      return "save_dot_except_mlpwi";
    case RematPolicy::kSaveDotExceptMlp:
      return "save_dot_except_mlp";
    case RematPolicy::kSaveQkvProj:
      return "save_qkv_proj";
    case RematPolicy::kSaveOutProj:
      return "save_out_proj";
    case RematPolicy::kMinimalOffloaded:
      return "minimal_offloaded";
    case RematPolicy::kQkvProjOffloaded:
      return "qkv_proj_offloaded";
    case RematPolicy::kSelective:
      return "selective";
    case RematPolicy::kFull:
      return "full";
    case RematPolicy::kCustom:
      return "custom";
  }
  return "?";
}

absl::StatusOr<RematPolicy> ParseRematPolicy(std::string_view name) {
  std::string names;
  for (RematPolicy p : kPolicies) {
    if (RematPolicyName(p) == name) return p;
    absl::StrAppend(&names, names.empty() ? "" : ", ", std::string(RematPolicyName(p)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown remat policy \"", std::string(name), "\"; expected one of ", names));
}

std::string_view AttentionKernelName(AttentionKernel kernel) {
  return kernel == AttentionKernel::kFlash ? "flash" : "dot_product";
}

absl::StatusOr<MoeDispatch> ParseMoeDispatch(std::string_view name) {
  if (name == "gather") return MoeDispatch::kGather;
  if (name == "einsum") return MoeDispatch::kEinsum;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown MoE dispatch \"", std::string(name), "\"; expected gather or einsum"));
}

absl::StatusOr<AttentionKernel> ParseAttentionKernel(std::string_view name) {
  if (name == "flash") return AttentionKernel::kFlash;
  if (name == "dot_product") return AttentionKernel::kDotProduct;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown attention \"", std::string(name), "\"; expected flash or dot_product"));
}

std::string_view LayerValueName(LayerValue value) {
  switch (value) {
    case LayerValue::kInput:
      return "input";
    case LayerValue::kNormOut:
      return "norm";
    case LayerValue::kQuery:
      return "query_proj";
    case LayerValue::kKey:
      return "key_proj";
    case LayerValue::kValue:
      return "value_proj";
    case LayerValue::kAttentionResidual:
      return "attention_residual";
    case LayerValue::kContext:
      return "context";
    case LayerValue::kOutProj:
      return "out_proj";
    case LayerValue::kResidual:
      return "residual";
    case LayerValue::kMlpNormOut:
      return "mlp_norm";
    case LayerValue::kMlpIn:
      return "mlpwi";
    case LayerValue::kMlpActivation:
      return "mlp_activation";
    case LayerValue::kMlpOut:
      return "mlpwo";
  }
  return "?";
}

std::string_view LayerOpName(LayerOp op) {
  switch (op) {
    case LayerOp::kNorm1:
      return "norm1";
    case LayerOp::kQkvProj:
      return "qkv_proj";
    case LayerOp::kAttention:
      return "attention";
    case LayerOp::kOutProj:
      return "out_proj";
    case LayerOp::kResidualAdd:
      return "residual_add";
    case LayerOp::kNorm2:
      return "norm2";
    case LayerOp::kMlpIn:
      return "mlp_in";
    case LayerOp::kMlpActivation:
      return "mlp_activation";
    case LayerOp::kMlpOut:
      return "mlp_out";
  }
  return "?";
}

absl::Status AddCustomRematNames(std::string_view names, std::string_view where,
                                 std::string_view source, CustomRemat* custom) {
  using V = LayerValue;
  // Debian's abseil has its own string_view: the text is held as std::string here.
  const std::string src(source), list(names);
  if (where != "device" && where != "offload") {
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": unknown placement \"", std::string(where), "\"; expected device or offload"));
  }
  // MaxText's checkpoint_name tags (layers/llama2.py, attentions.py, linears.py).
  static constexpr std::pair<std::string_view, V> kNames[] = {
      {"decoder_layer_input", V::kInput},
      {"query_proj", V::kQuery},
      {"key_proj", V::kKey},
      {"value_proj", V::kValue},
      {"context", V::kContext},
      {"out_proj", V::kOutProj},
      {"mlpwi", V::kMlpIn},
      {"mlpwo", V::kMlpOut},
  };
  std::vector<LayerValue>& into = where == "device" ? custom->device : custom->offload;
  auto add = [&](LayerValue v, const std::string& name) -> absl::Status {
    if (Contains(custom->device, v) || Contains(custom->offload, v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": ", name, " is placed twice (the device and offload lists hold each value once)"));
    }
    into.push_back(v);
    std::sort(into.begin(), into.end());
    return absl::OkStatus();
  };
  int gate_up = 0;  // mlpwi_0, mlpwi_1: one value (kMlpIn) when both are named
  for (const std::string& entry : std::vector<std::string>(absl::StrSplit(list, ','))) {
    const std::string name(absl::StripAsciiWhitespace(entry));
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": empty name in \"", list, "\""));
    }
    if (name == "qkv_proj") {
      for (V v : {V::kQuery, V::kKey, V::kValue}) TESSEL_RETURN_IF_ERROR(add(v, name));
      continue;
    }
    if (name == "mlpwi_0" || name == "mlpwi_1") {
      gate_up |= name == "mlpwi_0" ? 1 : 2;
      continue;
    }
    const auto* it = std::find_if(std::begin(kNames), std::end(kNames),
                                  [&](const auto& known) { return known.first == name; });
    if (it == std::end(kNames)) {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": unknown name \"", name,
          "\"; expected MaxText's decoder_layer_input, query_proj, key_proj, value_proj, "
          "qkv_proj, context, out_proj, mlpwi, mlpwi_0, mlpwi_1, mlpwo"));
    }
    TESSEL_RETURN_IF_ERROR(add(it->second, name));
  }
  if (gate_up == 1 || gate_up == 2) {
    // Tessel's MLP input is the gate and up projections together: one of them kept and the
    // other recomputed is not a plan it can cost.
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": ", gate_up == 1 ? "mlpwi_0" : "mlpwi_1", " without ",
                     gate_up == 1 ? "mlpwi_1" : "mlpwi_0",
                     ": the gate and up projections are placed together (name both, or mlpwi)"));
  }
  if (gate_up == 3) TESSEL_RETURN_IF_ERROR(add(V::kMlpIn, "mlpwi_0,mlpwi_1"));
  return absl::OkStatus();
}

std::string CustomRematToString(const CustomRemat& custom) {
  auto names = [](const std::vector<LayerValue>& values) {
    std::string out;
    for (LayerValue v : values) {
      absl::StrAppend(
          &out, out.empty() ? "" : ",",
          v == LayerValue::kInput ? "decoder_layer_input" : std::string(LayerValueName(v)));
    }
    return out;
  };
  std::string out;
  if (!custom.device.empty()) absl::StrAppend(&out, "device: ", names(custom.device));
  if (!custom.offload.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", "offload: ", names(custom.offload));
  }
  return out.empty() ? "every value recomputed" : out;
}

RematPlan PlanRemat(RematPolicy policy, bool parallel_block, bool replay,
                    const CustomRemat& custom) {
  if (replay && policy == RematPolicy::kFull) {
    // torch.utils.checkpoint keeps no dead-code elimination: the backward of a checkpointed
    // layer runs its forward function again from the input, every op of it.
    RematPlan plan;
    plan.kept = {LayerValue::kInput};
    for (LayerOp op : kOps) {
      if (parallel_block && (op == LayerOp::kResidualAdd || op == LayerOp::kNorm2)) continue;
      plan.recomputed.push_back(op);
    }
    return plan;
  }
  std::set<LayerValue> kept;
  std::set<LayerOp> recomputed;
  std::vector<LayerValue> work = BackwardReads(parallel_block);
  std::set<LayerValue> seen;
  while (!work.empty()) {
    const LayerValue v = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    // The layer input is the scan carry: always there, never recomputed.
    const bool saved = policy == RematPolicy::kCustom
                           ? Contains(custom.device, v) || Contains(custom.offload, v)
                           : Saved(policy, v);
    if (v == LayerValue::kInput || saved) {
      kept.insert(v);
      continue;
    }
    const LayerOp op = ProducerOf(v);
    if (!recomputed.insert(op).second) continue;
    for (LayerValue input : InputsOf(op, parallel_block)) work.push_back(input);
  }
  RematPlan plan;
  for (LayerValue v : kValues) {
    if (!kept.contains(v)) continue;
    plan.kept.push_back(v);
    if (policy == RematPolicy::kCustom ? Contains(custom.offload, v)
                                       : Offloads(policy) && v != LayerValue::kInput) {
      plan.offloaded.push_back(v);
    }
  }
  for (LayerOp op : kOps) {
    if (recomputed.contains(op)) plan.recomputed.push_back(op);
  }
  return plan;
}

double CausalKeysPerQuery(int64_t seq_len, int64_t window) {
  if (seq_len <= 0) return 0;
  const double s = static_cast<double>(seq_len);
  if (window <= 0 || window >= seq_len) return (s + 1) / 2;
  // Queries 0..W-1 see i+1 keys (W(W+1)/2 in all), the other S-W see W each.
  const double w = static_cast<double>(window);
  return (w * (w + 1) / 2 + (s - w) * w) / s;
}

double BlockCausalKeysPerQuery(int64_t seq_len, int64_t window, int64_t block) {
  return BlockCausalKeysPerQuery(seq_len, window, block, block);
}

double BlockCausalKeysPerQuery(int64_t seq_len, int64_t window, int64_t block_q, int64_t block_kv) {
  if (seq_len <= 0) return 0;
  if (block_q <= 0 || block_q > seq_len) block_q = seq_len;
  if (block_kv <= 0 || block_kv > seq_len) block_kv = seq_len;
  // Each row of tiles computes one contiguous run of key tiles, from the first holding a key the
  // row's first query still sees (key >= query - window + 1; tile 0 without a window) to the
  // one holding the row's last query's own key: O(S / block_q), so even tiles of 1 at S = 128k
  // stay cheap.
  double area = 0;
  for (int64_t qi = 0; qi < seq_len; qi += block_q) {
    const int64_t qe = std::min(seq_len, qi + block_q);
    const int64_t first_key = window > 0 ? std::max<int64_t>(0, qi - window + 1) : 0;
    const int64_t kj = first_key / block_kv * block_kv;
    const int64_t ke = std::min(seq_len, (qe + block_kv - 1) / block_kv * block_kv);
    area += static_cast<double>(qe - qi) * static_cast<double>(ke - kj);
  }
  return area / static_cast<double>(seq_len);
}

absl::StatusOr<FlashBlocks> ParseFlashBlocks(std::string_view text, std::string_view source) {
  const std::string t(text);
  std::vector<int64_t> sizes;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(t, ','))) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      sizes.clear();
      break;
    }
    sizes.push_back(v);
  }
  if (sizes.size() == 1)
    return FlashBlocks{sizes[0], sizes[0], sizes[0], sizes[0], sizes[0], sizes[0]};
  if (sizes.size() == 6) {
    return FlashBlocks{sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5]};
  }
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(source), " \"", t,
                   "\": expected one tile size B (B x B everywhere) or six positive sizes "
                   "q,kv,q_dkv,kv_dkv,q_dq,kv_dq (MaxText sa_block_q, sa_block_kv, sa_block_q_dkv, "
                   "sa_block_kv_dkv, sa_block_q_dq, sa_block_kv_dq)"));
}

LocalLayer LocalLayerOf(const nn::TransformerConfig& config, const nn::RecipeShards& shards,
                        AttentionKernel attention) {
  LocalLayer layer;
  layer.tokens = Ceil(config.batch, shards.batch) * Ceil(config.seq_len, shards.sequence);
  layer.seq_len = config.seq_len;
  layer.d_model = config.d_model;
  layer.heads = Ceil(config.heads, shards.tensor);
  layer.kv_heads = Ceil(config.num_kv_heads(), shards.tensor);
  layer.head_dim = config.head_dim();
  layer.ffn = Ceil(config.ffn, shards.tensor);
  layer.gated = config.arch == nn::TransformerArch::kLlama;
  layer.dtype_bytes = ByteWidth(config.dtype);
  if (config.experts > 0) {
    layer.mlp_token_factor = config.capacity_factor * static_cast<double>(config.top_k);
  }
  layer.keys_per_query = attention == AttentionKernel::kFlash
                             ? CausalKeysPerQuery(config.seq_len, config.sliding_window)
                             : static_cast<double>(config.seq_len);
  layer.attention_kv_tile = attention == AttentionKernel::kFlash ? 0 : config.seq_len;
  return layer;
}

int64_t LocalValueBytes(LayerValue value, const LocalLayer& l, AttentionKernel attention) {
  const int64_t t = l.tokens, db = l.dtype_bytes;
  switch (value) {
    case LayerValue::kInput:
    case LayerValue::kNormOut:
    case LayerValue::kOutProj:
    case LayerValue::kResidual:
    case LayerValue::kMlpNormOut:
    case LayerValue::kMlpOut:
      return Ceil(t, l.residual_shards) * l.d_model * db;
    case LayerValue::kQuery:
    case LayerValue::kContext:
      return t * l.heads * l.head_dim * db;
    case LayerValue::kKey:
    case LayerValue::kValue:
      return t * l.kv_heads * l.head_dim * db;
    case LayerValue::kAttentionResidual:
      return attention == AttentionKernel::kFlash ? t * l.heads * 4
                                                  : t * l.heads * l.seq_len * (4 + db);
    case LayerValue::kMlpIn:
      return static_cast<int64_t>(std::ceil(l.mlp_token_factor * t)) * l.ffn * db *
             (l.gated ? 2 : 1);
    case LayerValue::kMlpActivation:
      return static_cast<int64_t>(std::ceil(l.mlp_token_factor * t)) * l.ffn * db;
  }
  return 0;
}

double LocalOpFlops(LayerOp op, const LocalLayer& l) {
  const double t = static_cast<double>(l.tokens), d = static_cast<double>(l.d_model);
  const double dh = static_cast<double>(l.head_dim), f = static_cast<double>(l.ffn);
  switch (op) {
    case LayerOp::kQkvProj:
      return 2 * t * d * static_cast<double>(l.heads + 2 * l.kv_heads) * dh;
    case LayerOp::kAttention:
      return 4 * t * static_cast<double>(l.heads) * l.keys_per_query * dh;
    case LayerOp::kOutProj:
      return 2 * t * static_cast<double>(l.heads) * dh * d;
    case LayerOp::kMlpIn:
      return 2 * l.mlp_token_factor * t * d * f * (l.gated ? 2 : 1);
    case LayerOp::kMlpOut:
      return 2 * l.mlp_token_factor * t * f * d;
    case LayerOp::kNorm1:
    case LayerOp::kResidualAdd:
    case LayerOp::kNorm2:
    case LayerOp::kMlpActivation:
      return 0;
  }
  return 0;
}

double LocalOpMxuFlops(LayerOp op, const LocalLayer& l, int64_t tile) {
  auto pad = [tile](int64_t size) {
    return CostModel::TilePadding(static_cast<double>(size), tile);
  };
  const double flops = LocalOpFlops(op, l);
  switch (op) {
    case LayerOp::kQkvProj: {
      // Three matmuls, as the graph builds them (nn/transformer.cc): q is H*Dh wide, k and v
      // KVh*Dh each.
      const double per_column = 2 * static_cast<double>(l.tokens) * static_cast<double>(l.d_model);
      const double q = static_cast<double>(l.heads * l.head_dim);
      const double kv = static_cast<double>(l.kv_heads * l.head_dim);
      return per_column * pad(l.d_model) *
             (q * pad(l.heads * l.head_dim) + 2 * kv * pad(l.kv_heads * l.head_dim));
    }
    case LayerOp::kAttention:
      return flops * pad(l.head_dim) * pad(l.attention_kv_tile);
    case LayerOp::kOutProj:
      return flops * pad(l.heads * l.head_dim) * pad(l.d_model);
    case LayerOp::kMlpIn:
    case LayerOp::kMlpOut:
      return flops * pad(l.d_model) * pad(l.ffn);
    case LayerOp::kNorm1:
    case LayerOp::kResidualAdd:
    case LayerOp::kNorm2:
    case LayerOp::kMlpActivation:
      return flops;
  }
  return flops;
}

bool IsDenseAttentionNode(const Node& node, int64_t seq_len) {
  auto square = [&](const Shape& shape) {
    if (shape.is_tuple() || shape.rank() != 4) return false;
    const std::vector<int64_t>& dims = shape.dims();
    return dims[2] == seq_len && dims[3] == seq_len;
  };
  if (square(node.shape())) return true;
  for (const Node* operand : node.operands()) {
    if (square(operand->shape())) return true;
  }
  return false;
}

std::function<bool(const Node&)> DenseAttentionFilter(const nn::TransformerConfig& config) {
  const int64_t seq_len = config.seq_len;
  return [seq_len](const Node& node) { return IsDenseAttentionNode(node, seq_len); };
}

namespace {

// Keys per query of each flash kernel over its tiles (FlashBlocks; flash_block: all B x B;
// neither: `ideal`, the per-element mask).
struct FlashKeys {
  double forward = 0, dkv = 0, dq = 0;
  FlashBlocks blocks;  // all 0: the per-element kernel
};
FlashKeys FlashKeysOf(const nn::TransformerConfig& config, const TrainingStepOptions& options,
                      double ideal) {
  FlashBlocks blocks = options.flash_blocks;
  if (blocks == FlashBlocks{} && options.flash_block > 0) {
    const int64_t b = options.flash_block;
    blocks = FlashBlocks{b, b, b, b, b, b};
  }
  if (options.attention != AttentionKernel::kFlash || blocks == FlashBlocks{}) {
    return {ideal, ideal, ideal, FlashBlocks{}};
  }
  const int64_t s = config.seq_len, w = config.sliding_window;
  return {BlockCausalKeysPerQuery(s, w, blocks.q, blocks.kv),
          BlockCausalKeysPerQuery(s, w, blocks.q_dkv, blocks.kv_dkv),
          BlockCausalKeysPerQuery(s, w, blocks.q_dq, blocks.kv_dq), blocks};
}

// The flash kernel's forward and backward of every layer (header comment, "flash").
void EstimateFlashKernel(const nn::TransformerConfig& config, const TrainingStepOptions& options,
                         const CostModel& cost_model, const LocalLayer& layer,
                         const FlashKeys& keys, TrainingStepEstimate& e) {
  const double layers = static_cast<double>(config.layers);
  const AttentionPass forward =
      AttentionForward(cost_model, layer, AttentionKernel::kFlash, config.dtype);
  auto bytes = [&](LayerValue v) {
    return static_cast<double>(LocalValueBytes(v, layer, AttentionKernel::kFlash));
  };
  const double qkv =
      bytes(LayerValue::kQuery) + bytes(LayerValue::kKey) + bytes(LayerValue::kValue);
  double backward_bytes =
      2 * (qkv + bytes(LayerValue::kContext)) + bytes(LayerValue::kAttentionResidual);
  // Split: the dQ kernel recomputes Q.K^T and dP itself (7 matmuls against the forward's 2)
  // and streams q, k, v, dO, the log-sum-exp and di through once more.
  const bool split = options.flash_split_backward;
  if (split) {
    backward_bytes += qkv + bytes(LayerValue::kContext) + 2 * bytes(LayerValue::kAttentionResidual);
  }
  // Per matmul of the forward (2 over its tiles): the dK/dV kernel runs 4 over its tiles, the
  // dQ kernel 3 over its; a fused backward 5 over the dK/dV tiles. Equal tiles: 3.5x and 2.5x
  // the forward.
  const double per_matmul = keys.forward > 0 ? forward.flops / 2 / keys.forward : 0;
  const double backward_flops =
      split ? per_matmul * (4 * keys.dkv + 3 * keys.dq) : per_matmul * 5 * keys.dkv;
  // On the matrix unit each matmul pads head_dim and one of its kernel's tiles (header,
  // "Matrix-unit tiles").
  const int64_t tile = cost_model.topology().device_spec().matmul_tile;
  auto pad = [tile](int64_t size) {
    return CostModel::TilePadding(static_cast<double>(size), tile);
  };
  // A tile longer than the sequence runs as the whole sequence.
  auto pad_tile = [&](int64_t block) { return pad(std::min(block, config.seq_len)); };
  const FlashBlocks& b = keys.blocks;
  const double backward_mxu_flops =
      pad(layer.head_dim) * per_matmul *
      (split ? keys.dkv * (2 * pad_tile(b.kv_dkv) + 2 * pad_tile(b.q_dkv)) +
                   keys.dq * 3 * pad_tile(b.kv_dq)
             : keys.dkv * (3 * pad_tile(b.kv_dkv) + 2 * pad_tile(b.q_dkv)));
  e.attention_flops = layers * (forward.flops + backward_flops);
  e.attention_bytes = static_cast<int64_t>(layers * (forward.bytes + backward_bytes));
  e.attention_seconds =
      layers *
      (forward.seconds + KernelSeconds(cost_model, backward_mxu_flops, backward_bytes, config.dtype,
                                       cost_model.FlashAttentionEfficiency(), false));
}

}  // namespace

absl::StatusOr<TrainingStepEstimate> EstimateTrainingStep(
    const nn::TransformerConfig& config, const nn::RecipeShards& shards,
    const TrainingStepOptions& options, const CostModel& cost_model,
    const partitioner::SpmdProgram& program, const std::vector<int64_t>& weight_parameters,
    const std::vector<int64_t>& moment_parameters) {
  if (options.attention == AttentionKernel::kFlash && config.head_dim() == config.seq_len) {
    return absl::UnimplementedError(absl::StrCat(
        "flash attention with head_dim == seq_len (", config.seq_len,
        "): the dense attention tensors [.., S, S] cannot be told from [.., S, head_dim]"));
  }
  TrainingStepEstimate e;
  const std::vector<Node*> parameters = program.program->parameters();
  auto local_bytes = [&](const std::vector<int64_t>& numbers) -> absl::StatusOr<int64_t> {
    int64_t bytes = 0;
    for (int64_t i : numbers) {
      if (i < 0 || i >= static_cast<int64_t>(parameters.size())) {
        return absl::InvalidArgumentError(absl::StrCat("parameter number ", i,
                                                       " is outside the program's ",
                                                       parameters.size(), " parameters"));
      }
      bytes += parameters[i]->shape().byte_size();
    }
    return bytes;
  };
  TrainingMemory& m = e.memory;
  TESSEL_ASSIGN_OR_RETURN(m.parameter_bytes, local_bytes(weight_parameters));
  m.gradient_bytes = m.parameter_bytes;
  TESSEL_ASSIGN_OR_RETURN(m.optimizer_bytes, local_bytes(moment_parameters));

  LocalLayer layer = LocalLayerOf(config, shards, options.attention);
  if (options.sequence_parallel) layer.residual_shards = shards.tensor;
  // The forward's tiles set keys_per_query (the forward and its remat recompute); the backward
  // kernels' scale the backward (EstimateFlashKernel).
  const FlashKeys keys = FlashKeysOf(config, options, layer.keys_per_query);
  layer.keys_per_query = keys.forward;
  if (options.attention == AttentionKernel::kFlash) {
    layer.attention_kv_tile = std::min(keys.blocks.kv, config.seq_len);
  }
  const double layers = static_cast<double>(config.layers);
  e.remat =
      PlanRemat(options.remat, config.parallel_block, options.remat_replay, options.custom_remat);
  int64_t kept_bytes = 0;
  for (LayerValue v : e.remat.kept) kept_bytes += LocalValueBytes(v, layer, options.attention);
  int64_t offloaded_bytes = 0;
  for (LayerValue v : e.remat.offloaded) {
    offloaded_bytes += LocalValueBytes(v, layer, options.attention);
  }
  m.activation_bytes = config.layers * (kept_bytes - offloaded_bytes);
  m.host_offloaded_bytes = config.layers * offloaded_bytes;
  if (offloaded_bytes > 0) {
    const double host_bandwidth =
        cost_model.topology().device_spec().host_bandwidth_gbytes_per_s * 1e9;
    if (host_bandwidth <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "remat policy ", std::string(RematPolicyName(options.remat)),
          " offloads activations to host memory, but the device spec of ",
          cost_model.topology().name(), " gives no host_bandwidth_gbytes_per_s (the device's ",
          "link to its host, per direction)"));
    }
    // Every microbatch copies its own: the whole batch's, whatever the schedule keeps live.
    e.offload_bytes = m.host_offloaded_bytes;
    e.offload_seconds = static_cast<double>(e.offload_bytes) / host_bandwidth;
  }

  // Temporaries (header comment).
  const int64_t dq = config.heads * config.head_dim();
  const int64_t dkv = config.num_kv_heads() * config.head_dim();
  const int64_t layer_weights = config.d_model * (dq + 2 * dkv) + dq * config.d_model +
                                (layer.gated ? 3 : 2) * config.d_model * config.ffn;
  // XLA's buffer assignment keeps one layer's gathered weights at the peak (its compiled peak
  // for GPT-3-wide layers on v6e-256, with and without the recipes' collective-fusion flags:
  // docs/simulator.md, "Memory"); eager FSDP keeps two all-gather outputs alive, the current
  // unit's and the prefetched next one's (PyTorch FSDP notes, "FSDP Prefetch Nuances"; FSDP2's
  // default, pytorch/pytorch#128884).
  const int64_t gathered_layers = cost_model.options().fusion == FusionMode::kXla ? 1 : 2;
  const int64_t gathered =
      shards.fsdp > 1 ? gathered_layers * Ceil(layer_weights, shards.tensor) * layer.dtype_bytes
                      : 0;
  // The gradients of the layer's values (as large as the values the backward reads), and the
  // values the plan recomputes; the kept ones are in activation_bytes already.
  int64_t no_remat_layer = 0, recomputed_values = 0;
  for (LayerValue v : BackwardReads(config.parallel_block)) {
    const int64_t bytes = LocalValueBytes(v, layer, options.attention);
    no_remat_layer += bytes;
    if (std::find(e.remat.kept.begin(), e.remat.kept.end(), v) == e.remat.kept.end()) {
      recomputed_values += bytes;
    }
  }
  // Host offload: the layer's offloaded values are back in HBM for its backward.
  const int64_t working = no_remat_layer + recomputed_values + offloaded_bytes;
  // XLA fuses the f32 cast, the log-softmax and its gradient into the reductions and the two
  // backward dots, so one [t, V/tensor] buffer in dtype is live (XLA:TPU's compiled peak for a
  // 128256-word vocabulary agrees: docs/simulator.md, "Memory"); eager frameworks materialize
  // the f32 log-softmax and its gradient too.
  const int64_t loss_bytes_per_logit =
      cost_model.options().fusion == FusionMode::kXla ? layer.dtype_bytes : layer.dtype_bytes + 8;
  const int64_t loss = layer.tokens * Ceil(config.vocab, shards.tensor) * loss_bytes_per_logit;
  e.gathered_weight_bytes = gathered;
  m.temporary_bytes = gathered + std::max(working, loss);

  // Recompute: the plan's ops once more per layer.
  for (LayerOp op : e.remat.recomputed) {
    if (op == LayerOp::kAttention) {
      const AttentionPass pass =
          AttentionForward(cost_model, layer, options.attention, config.dtype);
      e.recompute_flops += layers * pass.flops;
      e.recompute_seconds += layers * pass.seconds;
      continue;
    }
    const double flops = LocalOpFlops(op, layer);
    e.recompute_flops += layers * flops;
    e.recompute_seconds +=
        layers *
        KernelSeconds(cost_model,
                      LocalOpMxuFlops(op, layer, cost_model.topology().device_spec().matmul_tile),
                      0, config.dtype, cost_model.Efficiency(OpClass::kDot), true);
    // Fused into their neighbours under XLA (memory-bound and small); their own kernels, each
    // through HBM, in the unfused frameworks.
    if (cost_model.options().fusion != FusionMode::kXla) {
      const int64_t bytes = ElementwiseRecomputeBytes(op, layer, options.attention);
      const double hbm_bytes_per_s =
          cost_model.topology().device_spec().hbm_bandwidth_gbytes_per_s * 1e9 *
          cost_model.Efficiency(OpClass::kElementwise);
      e.recompute_bytes += config.layers * bytes;
      e.recompute_seconds += layers * static_cast<double>(bytes) / hbm_bytes_per_s;
    }
  }
  // Flash: the kernel's forward and backward replace the graph's dense attention.
  if (options.attention == AttentionKernel::kFlash) {
    EstimateFlashKernel(config, options, cost_model, layer, keys, e);
  }
  EstimateAttentionDropout(config, options, cost_model, layer, e);
  EstimateQuantization(config, shards, cost_model, layer, e);
  if (config.experts > 0) EstimateMoe(config, shards, options, cost_model, layer, e);
  EstimateContextParallel(config, options, cost_model, layer, e);
  e.hbm_bytes = cost_model.topology().device_spec().hbm_bytes;
  e.fits = m.total_bytes() <= e.hbm_bytes;
  return e;
}

double HostOffloadExposedSeconds(const TrainingStepEstimate& e, double compute_seconds,
                                 bool overlap) {
  if (e.offload_seconds <= 0) return 0;
  if (!overlap) return 2 * e.offload_seconds;
  // Device -> host copies under the forward, host -> device under the backward (which also
  // runs the recompute).
  const double forward = std::max(0.0, compute_seconds - e.recompute_seconds) / 3;
  const double backward = compute_seconds - forward;
  return std::max(0.0, e.offload_seconds - forward) + std::max(0.0, e.offload_seconds - backward);
}

void ApplyTrainingStep(const TrainingStepEstimate& e, SimulationReport& r) {
  const double compute = e.recompute_seconds + e.attention_seconds + e.moe_seconds +
                         e.dropout_seconds + e.quantize_seconds;
  const double ici = e.moe_ici_seconds + e.cp_ici_seconds;
  const double dcn = e.moe_dcn_seconds + e.cp_dcn_seconds;
  const int64_t ici_bytes = e.moe_ici_bytes + e.cp_ici_bytes;
  const int64_t dcn_bytes = e.moe_dcn_bytes + e.cp_dcn_bytes;
  const double extra = compute + ici + dcn;
  r.step_seconds += extra;
  r.in_order_seconds += extra;
  r.overlapped_seconds += extra;
  r.compute_seconds += compute;
  const double offload_in_order = HostOffloadExposedSeconds(e, r.compute_seconds, false);
  const double offload_overlapped = HostOffloadExposedSeconds(e, r.compute_seconds, true);
  r.in_order_seconds += offload_in_order;
  r.overlapped_seconds += offload_overlapped;
  r.step_seconds += r.overlap ? offload_overlapped : offload_in_order;
  r.ici_seconds += ici;
  r.dcn_seconds += dcn;
  r.exposed_comm_seconds += ici + dcn;
  r.ici_bytes_per_device += ici_bytes;
  r.dcn_bytes_per_device += dcn_bytes;
  r.ici_bytes_total += ici_bytes * r.num_devices;
  r.dcn_bytes_total += dcn_bytes * r.num_devices;
  r.flops_per_device += e.recompute_flops + e.attention_flops + e.moe_flops;
  r.peak_memory_bytes = e.memory.total_bytes();
  r.exceeds_hbm = !e.fits;
  std::erase_if(r.warnings,
                [](const std::string& w) { return w.rfind("error: peak memory", 0) == 0; });
  if (!e.fits) {
    r.warnings.push_back(absl::StrFormat(
        "warning: the step does not fit: %s per device (parameters %s, gradients %s, optimizer "
        "%s, activations %s, temporaries %s) exceeds the HBM of %s (%s)",
        FormatBytes(static_cast<double>(e.memory.total_bytes())),
        FormatBytes(static_cast<double>(e.memory.parameter_bytes)),
        FormatBytes(static_cast<double>(e.memory.gradient_bytes)),
        FormatBytes(static_cast<double>(e.memory.optimizer_bytes)),
        FormatBytes(static_cast<double>(e.memory.activation_bytes)),
        FormatBytes(static_cast<double>(e.memory.temporary_bytes)),
        r.device_name.empty() ? "the device" : r.device_name,
        FormatBytes(static_cast<double>(e.hbm_bytes))));
  }
}

std::string_view PipelineScheduleName(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(std::string_view name) {
  if (name == "gpipe") return PipelineSchedule::kGpipe;
  if (name == "1f1b") return PipelineSchedule::kOneForwardOneBackward;
  return absl::InvalidArgumentError(absl::StrCat("unknown pipeline schedule \"", std::string(name),
                                                 "\"; expected gpipe or 1f1b"));
}

namespace {

// The memory of one microbatch of `microbatches`: the kept activations and the per-batch
// temporaries (a layer's backward working set, the loss's logits; not the gathered weights).
void ScaleToOneMicrobatch(int64_t microbatches, TrainingStepEstimate& e) {
  e.memory.activation_bytes /= microbatches;
  e.memory.host_offloaded_bytes /= microbatches;
  const int64_t per_batch = e.memory.temporary_bytes - e.gathered_weight_bytes;
  e.memory.temporary_bytes = e.gathered_weight_bytes + per_batch / microbatches;
  e.fits = e.memory.total_bytes() <= e.hbm_bytes;
}

}  // namespace

double PipelineBubbleFraction(int64_t stages, int64_t microbatches) {
  if (stages <= 1 || microbatches <= 0) return 0;
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

absl::StatusOr<PipelineEstimate> EstimatePipeline(const nn::TransformerConfig& stage_config,
                                                  const nn::RecipeShards& shards,
                                                  const PipelineOptions& options,
                                                  const CostModel& cost_model,
                                                  TrainingStepEstimate& e) {
  PipelineEstimate p;
  p.stages = static_cast<int64_t>(options.stage_group.size());
  p.microbatches = options.microbatches;
  p.schedule = options.schedule;
  const int64_t local_sequences = Ceil(stage_config.batch, shards.batch);
  if (p.microbatches > 1 && local_sequences % p.microbatches != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches ", p.microbatches, " must divide the ", local_sequences,
                     " sequences each data-parallel rank of a stage runs (batch ",
                     stage_config.batch, " over ", shards.batch, " batch shards)"));
  }
  if (p.stages <= 1) {
    p.stages = 1;
    // Gradient accumulation (header comment): the microbatches run one after another, each
    // forward then backward, so one microbatch's activations and working set are live.
    if (p.microbatches > 1) ScaleToOneMicrobatch(p.microbatches, e);
    RequantizeWeightsPerMicrobatch(p.microbatches, e);
    return p;
  }
  if (p.microbatches <= 0 || local_sequences % p.microbatches != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches ", p.microbatches, " must divide the ", local_sequences,
                     " sequences each data-parallel rank of a stage runs (batch ",
                     stage_config.batch, " over ", shards.batch, " batch shards)"));
  }
  p.virtual_stages = std::max<int64_t>(1, options.virtual_stages);
  const int64_t v = p.virtual_stages;
  if (v > 1 && p.schedule != PipelineSchedule::kOneForwardOneBackward) {
    return absl::InvalidArgumentError(
        "virtual pipeline stages (interleaving) need the 1f1b schedule");
  }
  p.bubble_fraction = PipelineBubbleFraction(p.stages, p.microbatches * v);
  // One microbatch's activation [b/m, S/sequence, D] crosses each stage boundary forward, and
  // its gradient backward; each device sends its own copy (the residual stream is whole on every
  // tensor rank), or with scatter-gather its 1/t slice, all-gathered over the tensor group.
  const int64_t tokens =
      local_sequences / p.microbatches * Ceil(stage_config.seq_len, shards.sequence);
  p.transfer_bytes = tokens * stage_config.d_model * ByteWidth(stage_config.dtype);
  const int64_t t = static_cast<int64_t>(options.tensor_group.size());
  const bool scatter = options.scatter_gather && t > 1;
  NodeCost send = cost_model.CollectiveCost(
      Opcode::kCollectivePermute, {options.stage_group[0], options.stage_group[1]},
      scatter ? Ceil(p.transfer_bytes, t) : p.transfer_bytes, options.stage_group[0]);
  if (scatter) {
    const NodeCost gather = cost_model.CollectiveCost(Opcode::kAllGather, options.tensor_group,
                                                      p.transfer_bytes, options.tensor_group[0]);
    send.seconds += gather.seconds;
    send.ici_seconds += gather.ici_seconds;
    send.dcn_seconds += gather.dcn_seconds;
    send.ici_bytes += gather.ici_bytes;
    send.dcn_bytes += gather.dcn_bytes;
  }
  p.transfer_seconds = send.seconds;
  // A chunk boundary is crossed by every microbatch forward and backward: 2 m v sends. Only the
  // 2 (p - 1) on the fill and drain path wait when transfers overlap the next microbatch's
  // compute; all of them when each waits on the compute stream.
  const int64_t sends = 2 * p.microbatches * v;
  const double exposed = options.blocking_transfers ? static_cast<double>(sends)
                                                    : 2.0 * static_cast<double>(p.stages - 1);
  p.exposed_ici_seconds = exposed * send.ici_seconds;
  p.exposed_dcn_seconds = exposed * send.dcn_seconds;
  p.ici_bytes = sends * send.ici_bytes;
  p.dcn_bytes = sends * send.dcn_bytes;
  // The first stage holds the activations of every microbatch it has run forward and not yet
  // backward: all m with GPipe, at most p with 1F1B; interleaved, the 2 (p - 1) + (v - 1) p + 1
  // chunk-microbatches of Megatron-LM's warm-up (schedules.py), each 1/v of a stage's layers.
  if (v > 1) {
    const int64_t chunks =
        std::min(p.microbatches * v, 2 * (p.stages - 1) + (v - 1) * p.stages + 1);
    e.memory.activation_bytes = e.memory.activation_bytes / (p.microbatches * v) * chunks;
    e.memory.host_offloaded_bytes = e.memory.host_offloaded_bytes / (p.microbatches * v) * chunks;
  } else if (p.schedule == PipelineSchedule::kOneForwardOneBackward && p.stages < p.microbatches) {
    e.memory.activation_bytes = e.memory.activation_bytes / p.microbatches * p.stages;
    e.memory.host_offloaded_bytes = e.memory.host_offloaded_bytes / p.microbatches * p.stages;
  }
  // A layer's backward working set and the loss's logits are one microbatch's.
  const int64_t per_batch = e.memory.temporary_bytes - e.gathered_weight_bytes;
  e.memory.temporary_bytes = e.gathered_weight_bytes + per_batch / p.microbatches;
  e.fits = e.memory.total_bytes() <= e.hbm_bytes;
  RequantizeWeightsPerMicrobatch(p.microbatches, e);
  return p;
}

void ApplyPipeline(const PipelineEstimate& p, SimulationReport& r) {
  if (p.stages <= 1) return;
  // The stage's forward and backward compute for all m microbatches is r.compute_seconds; the
  // pipeline adds (p - 1) idle slots of one chunk-microbatch: (p - 1) / (m v) of it.
  const double bubble = r.compute_seconds * static_cast<double>(p.stages - 1) /
                        static_cast<double>(p.microbatches * p.virtual_stages);
  const double comm = p.exposed_ici_seconds + p.exposed_dcn_seconds;
  const double extra = bubble + comm;
  r.step_seconds += extra;
  r.in_order_seconds += extra;
  r.overlapped_seconds += extra;
  r.ici_seconds += p.exposed_ici_seconds;
  r.dcn_seconds += p.exposed_dcn_seconds;
  r.exposed_comm_seconds += comm;
  r.ici_bytes_per_device += p.ici_bytes;
  r.dcn_bytes_per_device += p.dcn_bytes;
  r.ici_bytes_total += p.ici_bytes * r.num_devices;
  r.dcn_bytes_total += p.dcn_bytes * r.num_devices;
}

}  // namespace tessel::mesh
