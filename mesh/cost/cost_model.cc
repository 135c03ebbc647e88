#include "tessel/mesh/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/core/status_macros.h"

namespace tessel::mesh {

// What XLA's loop fusion folds into one kernel: ops computed element by element from their
// inputs. The list is conservative: transpose, pad and concatenate, which XLA fuses only in
// some cases, are costed as HBM round trips; reduce and dot end a fusion (FusesProducers).
bool IsFusible(Opcode op) {
  if (IsElementwise(op)) return true;
  switch (op) {
    case Opcode::kBroadcast:
    case Opcode::kReshape:
    case Opcode::kIota:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
    case Opcode::kConstant:
      return true;
    default:
      return false;
  }
}

bool FusesProducers(Opcode op) {
  return IsFusible(op) || op == Opcode::kReduce || op == Opcode::kDot || op == Opcode::kConvolution;
}

// A value with no users is a program output and must reach HBM; one user that cannot absorb it
// is enough to force the write, since that user reads it from memory.
bool KeptOnChip(const Node& node, FusionMode mode) {
  if (mode == FusionMode::kNone) return false;
  if (!IsFusible(node.opcode()) || node.users().empty()) return false;
  for (const Node* user : node.users()) {
    if (!FusesProducers(user->opcode())) return false;
    // Eager: a GEMM library call reads its operands from HBM; no producer runs inside it.
    const Opcode op = user->opcode();
    if (mode == FusionMode::kEager && (op == Opcode::kDot || op == Opcode::kConvolution)) {
      return false;
    }
  }
  return true;
}

std::string_view FusionModeName(FusionMode mode) {
  switch (mode) {
    case FusionMode::kXla:
      return "xla";
    case FusionMode::kEager:
      return "eager";
    case FusionMode::kNone:
      return "none";
  }
  return "xla";
}

absl::StatusOr<FusionMode> ParseFusionMode(std::string_view name) {
  for (FusionMode mode : {FusionMode::kXla, FusionMode::kEager, FusionMode::kNone}) {
    if (name == FusionModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown fusion mode \"", std::string(name), "\"; expected xla, eager or none"));
}

namespace {

// Ops that take no device time of their own: inputs already in HBM, literals in the program,
// tuple plumbing, and partition-id (a register read).
bool FreeOp(Opcode op) {
  switch (op) {
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kTuple:
    case Opcode::kGetTupleElement:
    case Opcode::kPartitionId:
      return true;
    default:
      return false;
  }
}

}  // namespace

OpClass ClassOf(Opcode opcode) {
  if (IsCollective(opcode)) return OpClass::kCollective;
  if (FreeOp(opcode)) return OpClass::kNone;
  // A convolution runs on the MXU / tensor cores as a dot does; reduce-window and
  // select-and-scatter combine elements like a reduce.
  if (opcode == Opcode::kDot || opcode == Opcode::kConvolution) return OpClass::kDot;
  if (opcode == Opcode::kReduce || opcode == Opcode::kReduceWindow ||
      opcode == Opcode::kSelectAndScatter) {
    return OpClass::kReduce;
  }
  // rng computes every element like an elementwise op; the rest (broadcast, transpose,
  // reshape, slice, pad, concatenate, dynamic-slice, iota, ...) only moves or makes data.
  if (IsElementwise(opcode) || opcode == Opcode::kRng) return OpClass::kElementwise;
  return OpClass::kDataMovement;
}

const char* OpClassName(OpClass op_class) {
  switch (op_class) {
    case OpClass::kNone:
      return "none";
    case OpClass::kDot:
      return "dot";
    case OpClass::kElementwise:
      return "elementwise";
    case OpClass::kReduce:
      return "reduce";
    case OpClass::kDataMovement:
      return "data_movement";
    case OpClass::kCollective:
      return "collective";
  }
  return "none";
}

absl::StatusOr<CostModel> CostModel::Create(const Topology& topology, CostModelOptions options) {
  CostModel model;
  model.topology_ = topology;
  model.options_ = std::move(options);
  const DeviceSpec& spec = topology.device_spec();
  const std::string device_name = spec.name.empty() ? "the device" : spec.name;
  // The device spec's factors override the options' defaults class by class, so a topology
  // file can give a measured number for one class and leave the others at the roofline.
  for (const auto& [cls, factor] : model.options_.default_efficiency) {
    model.efficiency_[cls] = factor;
  }
  for (const auto& [cls, factor] : spec.efficiency) model.efficiency_[cls] = factor;
  for (const auto& [cls, factor] : model.efficiency_) {
    // Written as !(in range) so a NaN factor is rejected too. A factor above 1 would claim more
    // than the vendor's peak; 0 would divide by zero below.
    if (!(factor > 0 && factor <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("efficiency of \"", cls, "\" must be in (0, 1], got ", factor));
    }
  }
  std::optional<double> bf16 = spec.PeakTflops("bf16");
  std::optional<double> f32 = spec.PeakTflops("f32");
  if (!bf16 && !f32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device spec of ", device_name, " gives no peak_tflops for bf16 or f32; cannot cost"));
  }
  // Every dtype gets a peak, resolved once here so Cost() is a lookup. Only the f32 fallback is
  // noted (the case the header documents: TPU presets list no f32 peak); integer and pred ops
  // fall back silently.
  for (DType dtype : {DType::kPred, DType::kU8, DType::kS32, DType::kS64, DType::kBF16, DType::kF16,
                      DType::kF32, DType::kF64, DType::kU32, DType::kU64}) {
    std::optional<double> peak = spec.PeakTflops(DTypeName(dtype));
    if (peak) {
      model.peak_flops_[dtype] = *peak * 1e12;
    } else {
      double fallback = bf16 ? *bf16 : *f32;
      model.peak_flops_[dtype] = fallback * 1e12;
      if (dtype == DType::kF32) {
        model.notes_.push_back(absl::StrFormat(
            "%s has no peak in the device spec of %s; using the %s peak (%g TFLOP/s)",
            DTypeName(dtype), device_name, bf16 ? "bf16" : "f32", fallback));
      }
    }
  }
  model.default_peak_flops_ = model.peak_flops_[DType::kBF16];
  if (!model.options_.matmul_dtype.empty()) {
    // No fallback here: a quantized-matmul peak that the vendor does not give (v4 has no int8
    // rate of its own) must not silently become the bf16 one.
    std::optional<double> peak = spec.PeakTflops(model.options_.matmul_dtype);
    if (!peak) {
      return absl::InvalidArgumentError(absl::StrCat("the device spec of ", device_name,
                                                     " gives no peak_tflops for matmul dtype \"",
                                                     model.options_.matmul_dtype, "\""));
    }
    model.matmul_peak_flops_ = *peak * 1e12;
  }
  model.hbm_bytes_per_s_ = spec.hbm_bandwidth_gbytes_per_s * 1e9;
  // Gigabits to bytes: the topology gives link speeds in Gbps, as vendors quote them.
  model.ici_bytes_per_s_ = topology.ici().bandwidth_gbps * 1e9 / 8;
  model.ici_latency_s_ = topology.ici().latency_us * 1e-6;
  if (model.hbm_bytes_per_s_ <= 0) {
    return absl::InvalidArgumentError("device spec has no HBM bandwidth; cannot cost");
  }
  // ICI is only needed when some slice has more than one device (every slice has at least
  // one, so num_devices == num_slices means one device per slice, all traffic on DCN).
  if (model.ici_bytes_per_s_ <= 0 && topology.num_devices() > topology.num_slices()) {
    return absl::InvalidArgumentError("topology has no ICI bandwidth; cannot cost");
  }
  if (topology.dcn()) {
    // Devices of one host share its DCN interfaces. Every device runs the same SPMD collective
    // at the same time, so each gets 1/devices_per_host of the NIC bandwidth. Slices may have
    // hosts of different sizes; a collective waits for its slowest member, so the most crowded
    // host sets the per-device bandwidth.
    int64_t devices_per_host = 1;
    for (int64_t h = 0; h < topology.num_hosts(); ++h) {
      devices_per_host = std::max(devices_per_host, topology.host(h).num_devices());
    }
    auto dcn_efficiency = model.efficiency_.find("dcn");
    model.dcn_bytes_per_s_per_device_ =
        topology.dcn()->bandwidth_gbps * 1e9 / 8 *
        (dcn_efficiency == model.efficiency_.end() ? 1.0 : dcn_efficiency->second) /
        static_cast<double>(devices_per_host);
    model.dcn_latency_s_ = topology.dcn()->latency_us * 1e-6;
  }
  return model;
}

double CostModel::MatmulPeakFlopsPerSecond(DType input_dtype) const {
  return matmul_peak_flops_ > 0 ? matmul_peak_flops_ : PeakFlopsPerSecond(input_dtype);
}

double CostModel::PeakFlopsPerSecond(DType dtype) const {
  auto it = peak_flops_.find(dtype);
  return it == peak_flops_.end() ? default_peak_flops_ : it->second;
}

double CostModel::Efficiency(OpClass op_class) const {
  auto it = efficiency_.find(OpClassName(op_class));
  return it == efficiency_.end() ? 1.0 : it->second;
}

bool CostModel::ReduceScatterRunsAsAllReduce() const {
  return options_.fusion == FusionMode::kXla && topology_.ici().kind == IciKind::kTorus;
}

double CostModel::FlashAttentionEfficiency() const {
  auto it = efficiency_.find("flash_attention");
  return it == efficiency_.end() ? Efficiency(OpClass::kDot) : it->second;
}

double CostModel::TiledDotFlops(const Node& node, int64_t tile) {
  if (node.opcode() != Opcode::kDot || tile <= 0) return Flops(node);
  const Shape& lhs = node.operand(0)->shape();
  const Shape& rhs = node.operand(1)->shape();
  const DotDimensionNumbers& d = node.attrs().dot;
  double k = 1, batch = 1;
  for (int64_t i : d.lhs_contracting_dims) k *= static_cast<double>(lhs.dim(i));
  for (int64_t i : d.lhs_batch_dims) batch *= static_cast<double>(lhs.dim(i));
  if (k == 0 || batch == 0) return 0;
  const double m = static_cast<double>(lhs.num_elements()) / (k * batch);
  const double n = static_cast<double>(rhs.num_elements()) / (k * batch);
  return 2.0 * batch * m * k * n * TilePadding(k, tile) * TilePadding(n, tile);
}

double CostModel::TilePadding(double size, int64_t tile) {
  if (tile <= 0 || size <= 0) return 1.0;
  const double t = static_cast<double>(tile);
  return std::ceil(size / t) * t / size;
}

double CostModel::Flops(const Node& node) {
  const Opcode op = node.opcode();
  switch (ClassOf(op)) {
    // A multiply and an add per output element and contracting index (XLA's HloCostAnalysis,
    // and the 2 * m * n * k of the scaling book's roofline chapter).
    case OpClass::kDot: {
      if (op == Opcode::kConvolution) {
        // 2 * output elements * kernel spatial size * input features / feature_group_count
        // (the kernel's input feature dim), as XLA's HloCostAnalysis::HandleConvolution.
        const Shape& rhs = node.operand(1)->shape();
        const ConvolutionDimensionNumbers& d = node.attrs().convolution;
        double per_output = static_cast<double>(rhs.dim(d.kernel_input_feature_dimension));
        for (int64_t k : d.kernel_spatial_dimensions) per_output *= rhs.dim(k);
        return 2.0 * static_cast<double>(node.shape().num_elements()) * per_output;
      }
      double contracting = 1;
      const Shape& lhs = node.operand(0)->shape();
      for (int64_t d : node.attrs().dot.lhs_contracting_dims) {
        contracting *= static_cast<double>(lhs.dim(d));
      }
      return 2.0 * static_cast<double>(node.shape().num_elements()) * contracting;
    }
    case OpClass::kElementwise:
      return static_cast<double>(node.shape().num_elements());
    // One combine per input element; reduce-window: one per window element of each output;
    // select-and-scatter: one compare per window element of each source element, plus its
    // scatter.
    case OpClass::kReduce: {
      double window = 1;
      for (const WindowDim& w : node.attrs().window) window *= static_cast<double>(w.size);
      if (op == Opcode::kReduceWindow) {
        return static_cast<double>(node.shape().num_elements()) * window;
      }
      if (op == Opcode::kSelectAndScatter) {
        return static_cast<double>(node.operand(1)->shape().num_elements()) * (window + 1);
      }
      return static_cast<double>(node.operand(0)->shape().num_elements());
    }
    default:
      return 0;
  }
}

NodeCost CostModel::Cost(const Node& node, int64_t device_id, bool quantized) const {
  NodeCost cost;
  const Opcode op = node.opcode();
  const OpClass cls = ClassOf(op);
  if (cls == OpClass::kNone) return cost;
  if (cls == OpClass::kCollective) {
    // V of the header's formulas is the full buffer: the all-gather's output (its operand is
    // only 1/n of it), the operand for every other collective.
    const int64_t bytes =
        op == Opcode::kAllGather ? node.shape().byte_size() : node.operand(0)->shape().byte_size();
    // XLA:TPU runs a reduce-scatter as a whole-buffer all-reduce and a slice (header).
    const Opcode costed_as =
        op == Opcode::kReduceScatter && ReduceScatterRunsAsAllReduce() ? Opcode::kAllReduce : op;
    if (op == Opcode::kCollectivePermute) {
      // A device that sends is costed by its own transfer; self pairs are local copies
      // (PlanReshard emits them for tiles that stay put) and cost nothing here.
      for (const auto& [source, target] : node.attrs().source_target_pairs) {
        if (source == device_id && target != device_id) {
          return CollectiveCost(op, {device_id, target}, bytes, device_id);
        }
      }
      // A device that only receives waits for its sender's transfer (bytes sent: none).
      for (const auto& [source, target] : node.attrs().source_target_pairs) {
        if (target == device_id && source != device_id) {
          NodeCost received = CollectiveCost(op, {source, device_id}, bytes, source);
          received.ici_bytes = received.dcn_bytes = 0;
          return received;
        }
      }
      return cost;  // this device takes no part
    }
    const auto& groups = node.attrs().replica_groups;
    // XLA: empty replica_groups means a single group of every device.
    if (groups.empty()) {
      std::vector<int64_t> all(topology_.num_devices());
      for (int64_t i = 0; i < topology_.num_devices(); ++i) all[i] = i;
      return CollectiveCost(costed_as, all, bytes, device_id);
    }
    for (const std::vector<int64_t>& group : groups) {
      if (std::find(group.begin(), group.end(), device_id) != group.end()) {
        return CollectiveCost(costed_as, group, bytes, device_id);
      }
    }
    // In no group: the collective does not involve this device at all.
    return cost;
  }
  cost.flops = Flops(node);
  // HBM traffic: the result is written unless every user fuses it; an operand is read unless
  // it was kept on chip (fused into this op). slice and dynamic-slice read only the window.
  int64_t bytes = 0;
  const FusionMode fusion = options_.fusion;
  if (!KeptOnChip(node, fusion)) bytes += node.shape().byte_size();
  for (int64_t i = 0; i < node.operand_count(); ++i) {
    const Node* operand = node.operand(i);
    if (KeptOnChip(*operand, fusion)) continue;
    if (operand->shape().num_elements() <= 1) continue;  // scalars live in registers
    if ((op == Opcode::kSlice || op == Opcode::kDynamicSlice) && i == 0) {
      bytes += node.shape().byte_size();
      continue;
    }
    bytes += operand->shape().byte_size();
  }
  cost.bytes_accessed = bytes;
  const double efficiency = Efficiency(cls);
  // A dot runs at the rate of its inputs' dtype (bf16 inputs with an f32 result still use the
  // bf16 MXU / tensor-core rate). A tuple-shaped op has no dtype of its own; f32 stands in.
  DType dtype = node.shape().is_tuple() ? DType::kF32 : node.shape().dtype();
  const bool matmul = op == Opcode::kDot || op == Opcode::kConvolution;
  const double peak = matmul && quantized
                          ? MatmulPeakFlopsPerSecond(node.operand(0)->shape().dtype())
                          : PeakFlopsPerSecond(matmul ? node.operand(0)->shape().dtype() : dtype);
  const int64_t tile = topology_.device_spec().matmul_tile;
  const double mxu_flops = op == Opcode::kDot && tile > 0 ? TiledDotFlops(node, tile) : cost.flops;
  cost.compute_seconds = mxu_flops / (peak * efficiency);
  cost.memory_seconds = static_cast<double>(bytes) / (hbm_bytes_per_s_ * efficiency);
  // Roofline: compute and memory traffic overlap, so the slower of the two bounds the op.
  cost.seconds = std::max(cost.compute_seconds, cost.memory_seconds);
  return cost;
}

NodeCost CostModel::CollectiveCost(Opcode opcode, const std::vector<int64_t>& group, int64_t bytes,
                                   int64_t device_id) const {
  NodeCost cost;
  // A group of one moves nothing (a permute's group is {self, target}, judged below).
  if (group.size() <= 1 && opcode != Opcode::kCollectivePermute) return cost;
  const double v = static_cast<double>(bytes);
  const int64_t my_slice = topology_.device(device_id).slice;
  if (opcode == Opcode::kCollectivePermute) {
    const int64_t target = group.size() > 1 ? group[1] : device_id;
    if (target == device_id) return cost;
    // A point-to-point transfer: DCN when it leaves the slice (one message, one latency), else
    // over the torus or switch.
    if (topology_.device(target).slice != my_slice) {
      cost.dcn_seconds = v / dcn_bytes_per_s_per_device_ + dcn_latency_s_;
      cost.dcn_bytes = bytes;
    } else {
      NodeCost ici = IciCollective(opcode, {device_id, target}, bytes, device_id);
      cost.ici_seconds = ici.ici_seconds;
      cost.ici_bytes = ici.ici_bytes;
    }
    cost.seconds = cost.ici_seconds + cost.dcn_seconds;
    return cost;
  }
  // Members of the group in this device's slice, and the number of slices spanned.
  std::vector<int64_t> local;
  std::vector<int64_t> slices;
  slices.reserve(group.size());
  for (int64_t id : group) {
    const int64_t s = topology_.device(id).slice;
    slices.push_back(s);
    if (s == my_slice) local.push_back(id);
  }
  std::sort(slices.begin(), slices.end());
  slices.erase(std::unique(slices.begin(), slices.end()), slices.end());
  // m and n_s as in the header; the formulas assume every slice holds n_s members, which holds
  // for groups along mesh axes of a HybridMesh.
  const double m = static_cast<double>(slices.size());
  const double n_s = static_cast<double>(local.size());
  // ICI phase over the local members; the all-to-all ICI phase carries the in-slice share.
  if (local.size() > 1) {
    // Reductions and gathers run the ICI phase on the whole buffer (hierarchical: reduce-scatter
    // or gather inside the slice first); an all-to-all sends over ICI only the 1/m of its data
    // bound for this slice (members split evenly over the slices), the rest goes over DCN.
    int64_t ici_bytes = bytes;
    if (opcode == Opcode::kAllToAll) ici_bytes = static_cast<int64_t>(v / m);
    NodeCost ici = IciCollective(opcode, local, ici_bytes, device_id);
    cost.ici_seconds = ici.ici_seconds;
    cost.ici_bytes = ici.ici_bytes;
  }
  if (slices.size() > 1) {
    // The `collective` efficiency is a measured fraction of an ICI / NVLink link's bandwidth;
    // DCN runs at the host NICs' figure (docs/simulator.md, "Across slices").
    const double b = dcn_bytes_per_s_per_device_;
    const double steps = m - 1;
    double sent = 0;
    double latency = 0;
    switch (opcode) {
      // After the ICI reduce-scatter each device holds V / n_s and runs a ring all-reduce of
      // it across the m slices, in parallel with its n_s slice mates (Thakur et al. 2005).
      case Opcode::kAllReduce:
        sent = 2 * (m - 1) / m * (v / n_s);
        latency = 2 * steps * dcn_latency_s_;
        break;
      case Opcode::kAllGather:
      case Opcode::kReduceScatter:
        sent = (m - 1) / m * (v / n_s);
        latency = steps * dcn_latency_s_;
        break;
      // No reduction to shrink it: every device sends its own data for the other slices.
      case Opcode::kAllToAll:
        sent = (m - 1) / m * v;
        latency = steps * dcn_latency_s_;
        break;
      default:
        break;
    }
    cost.dcn_seconds = sent / b + latency;
    cost.dcn_bytes = static_cast<int64_t>(sent);
  }
  cost.seconds = cost.ici_seconds + cost.dcn_seconds;
  return cost;
}

NodeCost CostModel::IciCollective(Opcode opcode, const std::vector<int64_t>& members, int64_t bytes,
                                  int64_t device_id) const {
  NodeCost cost;
  const double v = static_cast<double>(bytes);
  const double n = static_cast<double>(members.size());
  const double b = ici_bytes_per_s_ * Efficiency(OpClass::kCollective);
  const double alpha = ici_latency_s_;
  if (topology_.ici().kind == IciKind::kSwitch) {
    // NCCL ring over the switch: each device's port carries (n-1)/n of the data per phase.
    // The switch is non-blocking, so which devices form the group does not matter, only n.
    double sent = 0, steps = n - 1;
    switch (opcode) {
      case Opcode::kAllReduce:
        sent = 2 * (n - 1) / n * v;
        steps *= 2;
        break;
      case Opcode::kAllGather:
      case Opcode::kReduceScatter:
      case Opcode::kAllToAll:
        sent = (n - 1) / n * v;
        break;
      case Opcode::kCollectivePermute:
        sent = v;
        steps = 1;
        break;
      default:
        break;
    }
    cost.ici_seconds = sent / b + steps * alpha;
    cost.ici_bytes = static_cast<int64_t>(sent);
    return cost;
  }
  // Torus: the physical dims the members span, their extents, and whether each closes a ring.
  const Device& me = topology_.device(device_id);
  const Slice& slice = topology_.slice(me.slice);
  const int64_t rank = static_cast<int64_t>(slice.shape.size());
  if (opcode == Opcode::kCollectivePermute) {
    const Device& target = topology_.device(members[1]);
    // Manhattan distance on the torus (the shorter way round where a dim wraps), one alpha per
    // hop; bandwidth is one link's, since the transfer is one stream.
    int64_t hops = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t delta = std::abs(target.coords[d] - me.coords[d]);
      if (slice.wraparound[d]) delta = std::min(delta, slice.shape[d] - delta);
      hops += delta;
    }
    cost.ici_seconds = v / b + static_cast<double>(std::max<int64_t>(hops, 1)) * alpha;
    cost.ici_bytes = bytes;
    return cost;
  }
  std::vector<int64_t> coords;  // one dim's coordinates at a time
  coords.reserve(members.size());
  double bandwidth = 0, hops = 0, all_to_all_seconds = 0;
  for (int64_t d = 0; d < rank; ++d) {
    coords.clear();
    for (int64_t id : members) coords.push_back(topology_.device(id).coords[d]);
    std::sort(coords.begin(), coords.end());
    const int64_t k = std::unique(coords.begin(), coords.end()) - coords.begin();
    // A dim where all members share one coordinate carries none of the traffic.
    if (k <= 1) continue;
    // A ring is closed only when the group spans the whole wrapped dim. With k == 2 the
    // wraparound would join the same two chips again; Topology::IciLinks counts one link there,
    // so it is costed as a line (B, not 2B).
    const bool closed = k == slice.shape[d] && slice.wraparound[d] && k > 2;
    // The dims' links work at once, so bandwidths add; a closed ring runs both directions (a
    // bidirectional ring); a ring over a line must come back over the same links, so it gets
    // one direction's worth. Hops add up: a latency upper bound.
    bandwidth += closed ? 2 * b : b;
    hops += closed ? static_cast<double>(k / 2) : static_cast<double>(k - 1);
    // Bisection bound: half of each device's data crosses the middle of the dim, about V * k / 2
    // bytes over both directions of the cut; a closed ring's cut has 2 links (4B), a line's 1
    // (2B), hence V * k / (8B) and V * k / (4B).
    all_to_all_seconds +=
        v * static_cast<double>(k) / ((closed ? 8 : 4) * b) +
        (closed ? static_cast<double>(k / 2) : static_cast<double>(k - 1)) * alpha;
  }
  if (bandwidth == 0) return cost;  // all members at one coordinate (cannot happen: ids unique)
  switch (opcode) {
    case Opcode::kAllReduce:
      cost.ici_seconds = 2 * (n - 1) / n * v / bandwidth + 2 * hops * alpha;
      cost.ici_bytes = static_cast<int64_t>(2 * (n - 1) / n * v);
      break;
    case Opcode::kAllGather:
    case Opcode::kReduceScatter:
      cost.ici_seconds = (n - 1) / n * v / bandwidth + hops * alpha;
      cost.ici_bytes = static_cast<int64_t>((n - 1) / n * v);
      break;
    case Opcode::kAllToAll:
      cost.ici_seconds = all_to_all_seconds;
      cost.ici_bytes = static_cast<int64_t>((n - 1) / n * v);
      break;
    default:
      break;
  }
  return cost;
}

}  // namespace tessel::mesh
