// Analytic cost of one node of a partitioned (per-device, local-shape) program on a Topology:
// a roofline for local ops and alpha-beta models for collectives over the links their replica
// groups really span. No data, no processes: the simulator (mesh/sim/simulator.h) and the host
// runtime's simulated clocks both call it.
//
//   TESSEL_ASSIGN_OR_RETURN(mesh::CostModel model, mesh::CostModel::Create(topology));
//   for (const Node* node : program.program->nodes()) {
//     mesh::NodeCost c = model.Cost(*node, /*device_id=*/0);   // seconds, bytes
//   }
//
// Compute (local ops), per op class k (efficiency e_k from the device spec, default 1):
//   compute_seconds = flops / (peak_flops[dtype] * e_k)
//   memory_seconds  = bytes_accessed / (hbm_bandwidth * e_k)
//   seconds         = max(compute_seconds, memory_seconds)                       (roofline)
// Source: Williams, Waterman & Patterson 2009, "Roofline"; How to Scale Your Model (Austin et
// al. 2025), "All About Rooflines". flops as XLA's HloCostAnalysis: dot 2 * |output| *
// |contracting dims|; elementwise |output|; reduce |input|; data movement 0. bytes_accessed:
// operands + result (slice / dynamic-slice read only their window), except that a value kept on
// chip under the options' FusionMode (KeptOnChip) is neither written nor read: kXla, a fusible
// op whose users all absorb it (XLA's loop / input / producer fusion); kEager, the same without
// producer fusion into a dot (PyTorch eager with Megatron-LM's fused kernels, below); kNone,
// nothing (every op's operands and result through HBM).
// A dtype without a peak in the spec (f32 on TPU presets) uses the bf16 peak; Create records
// that in notes().
// Tile quantization (device spec `matmul_tile` t > 0, TPU MXUs): the systolic array holds a
// t x t block of one operand and streams the other's rows through it, so a dot's contracting
// size K and its rhs non-contracting size N are padded up to multiples of t:
//   compute_seconds = 2 * batch * M * ceil(K/t)*t * ceil(N/t)*t / (peak * e_dot)
// (M = lhs non-contracting size, batch = batch dims; each a product over its dims). `flops`
// stays the unpadded count. Source: How to Scale Your Model, "How to Think About TPUs" (the
// MXU is a 128x128 systolic array, 256x256 on v6e; matmuls are padded to its size). GPUs: no
// tile is set (tensor-core tile and wave quantization are not modelled).
//
// Collectives (alpha-beta; V = bytes of the full buffer: all-gather output, reduce-scatter input,
// all-reduce / all-to-all / collective-permute operand; n = group size; B = link bandwidth of
// one direction in bytes/s times the "collective" efficiency; alpha = latency per step):
// - ICI torus, group spanning physical dims D with extents k_d (ring closed iff the extent is the
//   whole dim and it has wraparound): every spanned dim's links work at once (How to Scale Your
//   Model, "All About TPUs" / collectives: bandwidth grows with the number of axes), each dim
//   contributing 2B when closed (bidirectional ring) or B when not (a line):
//     all-gather / reduce-scatter:  (n-1)/n * V / sum_d B_d   +  alpha * sum_d hops_d
//     all-reduce:                   2 * (n-1)/n * V / sum_d B_d + 2 * alpha * sum_d hops_d
//   hops_d = floor(k_d / 2) for a closed ring, k_d - 1 for a line.
//     all-to-all (bisection bound, per dim, summed): V * k_d / (8B) closed, V * k_d / (4B) line.
//     collective-permute: V / B + alpha * (torus distance to the target).
// - ICI switch (NVLink + NVSwitch): NCCL's ring, (n-1)/n * V / B (x2 for all-reduce),
//   alpha * (n-1) (x2), all-to-all (n-1)/n * V / B. Source: NCCL docs, "Performance" (bus
//   bandwidth); Thakur, Rabenseifner & Gropp 2005.
// - A group spanning m > 1 slices with n_s members per slice: hierarchical (ICI reduce-scatter,
//   DCN ring all-reduce across slices on V / n_s, ICI all-gather); DCN bandwidth per device is
//   the host's DCN bandwidth times the "dcn" efficiency, divided by its devices (all run the
//   same SPMD collective):
//     B_dcn = dcn_bandwidth * e_dcn / devices_per_host (the largest of any host: the slowest
//     member sets the pace),
//     all-reduce DCN term 2 * (m-1)/m * (V / n_s) / B_dcn + 2 * alpha_dcn * (m-1),
//     all-gather / reduce-scatter DCN term (m-1)/m * (V / n_s) / B_dcn + alpha_dcn * (m-1),
//     all-to-all (m-1)/m * V / B_dcn, collective-permute V / B_dcn + alpha_dcn.
//   Source: Thakur et al. 2005 (ring, reduce-scatter + all-gather all-reduce); Cloud TPU
//   multislice docs (DCN per host); How to Scale Your Model, "multislice".
// - XLA:TPU's reduce-scatter (FusionMode kXla on a kTorus slice: a TPU running XLA's program;
//   ReduceScatterRunsAsAllReduce): costed as the all-reduce of its whole operand V on the same
//   group. XLA:TPU emits a reduce-scatter as an all-reduce of the whole buffer and a
//   dynamic-slice of the device's shard, fused into one TensorCore kernel (MaxText's
//   benchmarks/xla_flags_library.py: "AR + DS = RS fusion"; seen for FSDP weight gradients and
//   tensor-parallel activations in XLA:TPU's compiled MaxText-style steps), and the one public
//   TPU profile of such a step spends about an all-reduce's time in it (docs/simulator.md,
//   "Reduce-scatter on TPU"). The simulator runs it on the compute stream. Not modelled: XLA's
//   collective matmuls, which fuse some gradient reductions into their dot instead. GPUs
//   (kSwitch: NCCL's reduce-scatter on its own stream) and the kEager / kNone modes keep the
//   reduce-scatter formula.
// seconds of a collective = ici_seconds + dcn_seconds (the phases run one after the other).
#ifndef TESSEL_MESH_COST_MODEL_H_
#define TESSEL_MESH_COST_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/mesh/topology/topology.h"

namespace tessel::mesh {

// The cost of one node on one device. Units: seconds, flops (operations), bytes.
struct NodeCost {
  double seconds = 0;          // what the node takes on the device's timeline
  double compute_seconds = 0;  // flops / (peak * efficiency); 0 for collectives
  double memory_seconds = 0;   // bytes_accessed / (hbm bandwidth * efficiency)
  double ici_seconds = 0;      // collective time on ICI links (latency included)
  double dcn_seconds = 0;      // collective time on DCN (latency included)
  double flops = 0;
  int64_t bytes_accessed = 0;  // HBM bytes read + written (after the fusion approximation)
  int64_t ici_bytes = 0;       // bytes this device sends over ICI
  int64_t dcn_bytes = 0;       // bytes this device sends over DCN
};

// The op classes of the cost model (DeviceSpec::efficiency keys, kEfficiencyClasses).
enum class OpClass { kNone, kDot, kElementwise, kReduce, kDataMovement, kCollective };
[[nodiscard]] OpClass ClassOf(Opcode opcode);
[[nodiscard]] const char* OpClassName(OpClass op_class);  // "dot", ...; "none" for leaves
// Ops whose producer-consumer edges XLA's fusion keeps on chip: elementwise ops, broadcast,
// reshape, iota, slice, dynamic-slice, constant.
[[nodiscard]] bool IsFusible(Opcode opcode);
// Ops that absorb fusible producers: the fusible ops (loop fusion), reduce (input fusion) and
// dot (producer fusion into the MXU / tensor-core kernel, as XLA:TPU's convolution fusions).
[[nodiscard]] bool FusesProducers(Opcode opcode);

// Which producer-consumer edges a framework keeps on chip (the kernels it launches); a property
// of the framework that ran the program, not of one configuration.
//   kXla: XLA's fusion passes (loop, input and producer fusion): a fusible op whose users all
//     absorb it (FusesProducers) never reaches HBM. Source: xla/service/instruction_fusion.cc,
//     gpu/multi_output_fusion.cc; How to Scale Your Model, "All About Rooflines".
//   kEager: PyTorch eager as Megatron-LM ran GPT in Narayanan et al. 2021 (SC '21): every
//     kernel reads its inputs from HBM and writes its result there, and the only multi-op
//     kernels are Megatron's hand-fused ones, each one kernel forward and one backward:
//     megatron/model/fused_bias_gelu.py (bias + GeLU, torch.jit.script bias_gelu /
//     bias_gelu_back), megatron/model/fused_softmax.py (scale + causal mask + softmax,
//     scaled_upper_triang_masked_softmax_forward / _backward), megatron/model/fused_layer_norm.py
//     (apex's fused layer norm, forward and backward), and bias + dropout + add
//     (bias_dropout_add_fused_train, jit-scripted, megatron/model/transformer.py). In a
//     transformer layer's graph these are the chains of fusible ops (with their reductions)
//     between matmuls (not so for the loss and the residual-gradient sums, which Megatron runs
//     as separate kernels and this costs as kXla; docs/simulator.md), so kEager keeps kXla's
//     loop and input fusion and drops producer fusion:
//     a cuBLAS GEMM (torch.matmul / baddbmm / F.linear) reads its operands from HBM, so a value
//     read by a dot or convolution is written (the layer norm output before the QKV and MLP
//     matmuls, the GeLU output, the S x S attention probabilities and their gradient).
//   kNone: no fusion at all: every op's operands and result through HBM (a bound, not a
//     framework).
enum class FusionMode { kXla, kEager, kNone };
// "xla", "eager", "none".
[[nodiscard]] std::string_view FusionModeName(FusionMode mode);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<FusionMode> ParseFusionMode(std::string_view name);

// True when `node` is fusible and every user absorbs it under `mode` (above): its value never
// reaches HBM. kNone: never.
[[nodiscard]] bool KeptOnChip(const Node& node, FusionMode mode = FusionMode::kXla);

struct CostModelOptions {
  // Which edges stay on chip (FusionMode above); kXla approximates XLA's fusion.
  FusionMode fusion = FusionMode::kXla;
  // Efficiency factors used when the device spec gives none for a class (pure roofline: 1).
  std::map<std::string, double> default_efficiency = {{"dot", 1.0},        {"elementwise", 1.0},
                                                      {"reduce", 1.0},     {"data_movement", 1.0},
                                                      {"collective", 1.0}, {"dcn", 1.0}};
  // When set, every dot is costed at this dtype's peak instead of its inputs' (a key of
  // DeviceSpec::peak_tflops: "s8", "f8e4m3fn", ...): quantized training runs the matmuls in int8
  // (MaxText quantization=int8, AQT) or fp8 (Transformer Engine) while the program keeps bf16
  // shapes, so bytes stay those of the program. Empty: each dot at its inputs' dtype.
  std::string matmul_dtype;
};

class CostModel {
 public:
  // Validates `topology` for costing. Errors: kInvalidArgument when the device spec has no
  // peak for bf16 nor f32, a zero HBM or ICI bandwidth, an efficiency outside (0, 1], or a
  // matmul_dtype without a peak in the device spec. The topology is copied (the model owns it).
  [[nodiscard]] static absl::StatusOr<CostModel> Create(const Topology& topology,
                                                        CostModelOptions options = {});

  // Cost of one node of a partitioned (local-shape) program executed by device `device_id`;
  // collectives are costed from their replica_groups / source_target_pairs (global ids; an
  // empty replica_groups means one group of every device, as XLA). A device outside every
  // group costs nothing; a device that only receives in a collective-permute takes its
  // sender's transfer time (and sends no bytes). `quantized` false costs a dot or convolution
  // at its inputs' peak even when the options set a matmul_dtype (the matmuls that quantized
  // training leaves in bf16: attention's). Precondition: 0 <= device_id <
  // topology.num_devices().
  NodeCost Cost(const Node& node, int64_t device_id, bool quantized = true) const;

  // The collective part alone, for a group given explicitly: `opcode` one of the collective
  // opcodes, `group` the participating global ids (device_id among them), `bytes` = V above.
  // For collective-permute, `group` is {device_id, target}.
  NodeCost CollectiveCost(Opcode opcode, const std::vector<int64_t>& group, int64_t bytes,
                          int64_t device_id) const;

  // flops of a local op as defined above (0 for collectives and leaves).
  [[nodiscard]] static double Flops(const Node& node);
  // The flops a dot occupies the matrix unit for with `tile` quantization (above): Flops(node)
  // with K and N padded to multiples of `tile`. Convolutions and tile <= 0: Flops(node).
  [[nodiscard]] static double TiledDotFlops(const Node& node, int64_t tile);
  // How much larger a matrix dimension of `size` elements is on a `tile` x `tile` matrix unit:
  // ceil(size / tile) * tile / size (the padding of TiledDotFlops, one dimension); 1 when
  // tile <= 0 or size <= 0. For analytic matmul terms that have sizes but no Node.
  [[nodiscard]] static double TilePadding(double size, int64_t tile);
  // Peak of `dtype` in op/s (10^12 * peak_tflops), with the bf16 fallback.
  [[nodiscard]] double PeakFlopsPerSecond(DType dtype) const;
  // The peak a matmul with `input_dtype` inputs runs at: the options' matmul_dtype peak when it
  // is set, else PeakFlopsPerSecond(input_dtype).
  [[nodiscard]] double MatmulPeakFlopsPerSecond(DType input_dtype) const;
  // The efficiency factor of an op class.
  [[nodiscard]] double Efficiency(OpClass op_class) const;
  // True when a reduce-scatter runs as XLA:TPU runs it (the header's last collective rule): the
  // options' fusion is kXla and the slices are a kTorus. Cost then gives a reduce-scatter the
  // seconds and bytes of an all-reduce of its operand on the same group, and the simulator
  // holds the compute stream for it (mesh/sim/simulator.h).
  [[nodiscard]] bool ReduceScatterRunsAsAllReduce() const;
  // The fraction of the matrix unit's peak a fused attention kernel reaches on its tile-padded
  // matmul flops: the device spec's "flash_attention" factor, else Efficiency(OpClass::kDot)
  // (the kernel's matmuls at the rate of XLA's). In (0, 1].
  [[nodiscard]] double FlashAttentionEfficiency() const;

  const Topology& topology() const { return topology_; }
  const CostModelOptions& options() const { return options_; }
  // Human-readable assumptions made while costing (e.g. "f32 has no peak in the device spec
  // of TPU v5p; using the bf16 peak (459 TFLOP/s)").
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  CostModel() = default;
  NodeCost IciCollective(Opcode opcode, const std::vector<int64_t>& members, int64_t bytes,
                         int64_t device_id) const;

  Topology topology_;
  CostModelOptions options_;
  std::map<std::string, double> efficiency_;
  std::map<DType, double> peak_flops_;  // op/s per dtype, fallbacks resolved
  double default_peak_flops_ = 0;
  double matmul_peak_flops_ = 0;  // options_.matmul_dtype's peak; 0 when unset
  double hbm_bytes_per_s_ = 0;
  double ici_bytes_per_s_ = 0;  // one link (torus) or one port (switch), one direction
  double ici_latency_s_ = 0;
  double dcn_bytes_per_s_per_device_ = 0;
  double dcn_latency_s_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_COST_MODEL_H_
