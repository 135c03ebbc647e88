// slice, pad and concatenate along a tiled dim by halo exchange (partitioner/internal/halo.h):
// the result keeps the target's tiling and each device fetches only the boundary elements its
// window needs from its neighbours, instead of all-gathering the dim (HandleDataMovement's
// fallback).
//   slice:       device k's window starts at start + k * s_out * stride and is
//                (s_out - 1) * stride + 1 long; a local strided slice then keeps s_out elements.
//   pad:         window start k * s_out - low, size s_out; elements outside [0, N) are the
//                padding value (masked), so no local pad is needed along the exchanged dims.
//                Interior padding is not exchanged (fallback).
//   concatenate: each operand is windowed at k * s_out - its offset and the windows are merged
//                with select on their in-range masks; pieces move to their new owners by
//                collective-permute.
// The choice between the two paths is made in one place (UseHalo, internal/halo.h) on the bytes
// each device receives, resharding of the operands included.
#include <algorithm>
#include <optional>

#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/internal/halo.h"
#include "tessel/partitioner/internal/op_dims.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One operand to exchange: its value, the global shape the plan is made for (after any local
// pre-slice), the windows, and the plan.
struct Exchange {
  Node* local = nullptr;
  HaloPlan plan;
};

absl::StatusOr<HaloPlan> Plan(Context& ctx, const Sharding& layout, const Shape& global,
                              const std::vector<HaloWindow>& windows) {
  return PlanHalo(layout, global, windows, ctx.num_devices());
}

// Window starts of an output tiled into `tiles` tiles of ceil(out / tiles) elements, where
// output element i reads operand element first + i * stride.
std::vector<int64_t> Starts(int64_t tiles, int64_t out, int64_t first, int64_t stride) {
  const int64_t s_out = CeilDiv(out, tiles);
  std::vector<int64_t> starts;
  for (int64_t k = 0; k < tiles; ++k) starts.push_back(first + k * s_out * stride);
  return starts;
}

// The dims along which the target tiles a changed dim that halo exchange can produce.
std::vector<int64_t> ExchangedDims(const Node& node, const Sharding& target) {
  std::vector<int64_t> dims;
  const Shape& in = node.operand(0)->shape();
  for (int64_t d : ChangedDims(node)) {
    if (target.num_tiles(d) <= 1 || node.shape().dim(d) < 1 || in.dim(d) < 1) continue;
    if (node.opcode() == Opcode::kPad && node.attrs().padding[d].interior != 0) continue;
    dims.push_back(d);
  }
  return dims;
}

absl::StatusOr<std::optional<PValue>> Slice(Context& ctx, const Node& node, const PValue& operand,
                                            const Sharding& layout, const Sharding& fallback,
                                            const std::vector<int64_t>& dims) {
  const Shape& in = node.operand(0)->shape();
  const Shape& out = node.shape();
  const int64_t rank = out.rank();
  // Dims sliced but not exchanged are whole on every device: cut them first so the halo pieces
  // carry only what the result keeps.
  std::vector<int64_t> pre_dims = in.dims();
  std::vector<HaloWindow> windows;
  for (int64_t d = 0; d < rank; ++d) {
    const SliceDim& sd = node.attrs().slice[d];
    if (!Contains(dims, d)) {
      pre_dims[d] = out.dim(d);
      continue;
    }
    const int64_t tiles = layout.num_tiles(d);
    const int64_t s_out = CeilDiv(out.dim(d), tiles);
    windows.push_back(HaloWindow{d, Starts(tiles, out.dim(d), sd.start, sd.stride),
                                 (s_out - 1) * sd.stride + 1, sd.start, sd.limit});
  }
  const Shape pre(in.dtype(), pre_dims);
  TESSEL_ASSIGN_OR_RETURN(HaloPlan plan, Plan(ctx, layout, pre, windows));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_layout, ctx.ReshardBytes(operand, layout));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_fallback, ctx.ReshardBytes(operand, fallback));
  if (!UseHalo(to_layout + plan.bytes_per_device, to_fallback)) return std::nullopt;

  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operand, layout));
  OpAttributes pre_slice;
  bool cut = false;
  for (int64_t d = 0; d < rank; ++d) {
    const SliceDim& sd = node.attrs().slice[d];
    const bool whole =
        Contains(dims, d) || (sd.start == 0 && sd.limit == in.dim(d) && sd.stride == 1);
    pre_slice.slice.push_back(whole ? SliceDim{0, local->shape().dim(d), 1} : sd);
    cut = cut || !whole;
  }
  if (cut) {
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kSlice, {local}, pre_slice));
  }
  TESSEL_ASSIGN_OR_RETURN(HaloResult halo, ExchangeHalo(ctx, local, layout, plan, false));
  local = halo.local;
  // A strided slice fetched the span of its elements; keep every stride-th.
  OpAttributes strided;
  bool any_stride = false;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t stride = Contains(dims, d) ? node.attrs().slice[d].stride : 1;
    strided.slice.push_back(SliceDim{0, local->shape().dim(d), stride});
    any_stride = any_stride || stride != 1;
  }
  if (any_stride) {
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kSlice, {local}, strided));
  }
  return PValue{local, layout, out, {}};
}

absl::StatusOr<std::optional<PValue>> Pad(Context& ctx, const Node& node,
                                          const std::vector<PValue>& operands,
                                          const Sharding& layout, const Sharding& fallback,
                                          const std::vector<int64_t>& dims) {
  const Shape& in = node.operand(0)->shape();
  const Shape& out = node.shape();
  std::vector<HaloWindow> windows;
  for (int64_t d : dims) {
    const int64_t tiles = layout.num_tiles(d);
    windows.push_back(HaloWindow{d, Starts(tiles, out.dim(d), -node.attrs().padding[d].low, 1),
                                 CeilDiv(out.dim(d), tiles), 0, in.dim(d)});
  }
  TESSEL_ASSIGN_OR_RETURN(HaloPlan plan, Plan(ctx, layout, in, windows));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_layout, ctx.ReshardBytes(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_fallback, ctx.ReshardBytes(operands[0], fallback));
  if (!UseHalo(to_layout + plan.bytes_per_device, to_fallback)) return std::nullopt;

  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * value, ctx.Reshard(operands[1], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(HaloResult halo, ExchangeHalo(ctx, local, layout, plan, true));
  local = halo.local;
  // Window elements outside the operand are exactly the low and high padding.
  if (halo.in_range != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(Node * fill, ctx.Add(Opcode::kBroadcast, local->shape(), {value}));
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kSelect, {halo.in_range, local, fill}));
  }
  // Dims padded but not exchanged are whole: pad them locally.
  OpAttributes rest;
  bool any = false;
  for (int64_t d = 0; d < out.rank(); ++d) {
    PadDim p = Contains(dims, d) ? PadDim{} : node.attrs().padding[d];
    any = any || p.low != 0 || p.high != 0 || p.interior != 0;
    rest.padding.push_back(p);
  }
  if (any) {
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kPad, {local, value}, rest));
  }
  return PValue{local, layout, out, {}};
}

absl::StatusOr<std::optional<PValue>> Concatenate(Context& ctx, const Node& node,
                                                  const std::vector<PValue>& operands,
                                                  const Sharding& layout, const Sharding& fallback,
                                                  int64_t dim) {
  const Shape& out = node.shape();
  const int64_t tiles = layout.num_tiles(dim);
  const int64_t s_out = CeilDiv(out.dim(dim), tiles);
  int64_t halo_bytes = 0, gather_bytes = 0, offset = 0;
  std::vector<std::optional<HaloPlan>> plans;
  for (const PValue& operand : operands) {
    const int64_t n = operand.global_shape.dim(dim);
    std::optional<HaloPlan> plan;
    // An empty operand contributes nothing and has nothing to exchange.
    if (n > 0) {
      HaloWindow w{dim, Starts(tiles, out.dim(dim), -offset, 1), s_out, 0, n};
      TESSEL_ASSIGN_OR_RETURN(plan, Plan(ctx, layout, operand.global_shape, {w}));
      TESSEL_ASSIGN_OR_RETURN(int64_t to_layout, ctx.ReshardBytes(operand, layout));
      halo_bytes += to_layout + plan->bytes_per_device;
    }
    TESSEL_ASSIGN_OR_RETURN(int64_t to_fallback, ctx.ReshardBytes(operand, fallback));
    gather_bytes += to_fallback;
    plans.push_back(std::move(plan));
    offset += n;
  }
  if (!UseHalo(halo_bytes, gather_bytes)) return std::nullopt;

  // Later operands overwrite earlier ones where their windows are in range: every output
  // element inside the result is in range of exactly one operand, and the rest is the result's
  // own padding.
  Node* result = nullptr;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!plans[i].has_value()) continue;
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[i], layout));
    const bool first = result == nullptr;
    TESSEL_ASSIGN_OR_RETURN(HaloResult halo,
                            ExchangeHalo(ctx, local, layout, *plans[i], /*want_mask=*/!first));
    if (first || halo.in_range == nullptr) {
      result = halo.local;
    } else {
      TESSEL_ASSIGN_OR_RETURN(result,
                              ctx.Add(Opcode::kSelect, {halo.in_range, halo.local, result}));
    }
  }
  return PValue{result, layout, out, {}};
}

}  // namespace

absl::StatusOr<std::optional<PValue>> PartitionWithHalo(Context& ctx, const Node& node,
                                                        const std::vector<PValue>& operands,
                                                        const Sharding& target) {
  const Opcode op = node.opcode();
  if (op != Opcode::kSlice && op != Opcode::kPad && op != Opcode::kConcatenate) {
    return std::nullopt;
  }
  if (!target.IsTiled() || !IsPlainTiling(target)) return std::nullopt;
  const int64_t rank = node.shape().rank();
  const std::vector<int64_t> changed = ChangedDims(node);
  const std::vector<int64_t> dims = ExchangedDims(node, target);
  if (dims.empty()) return std::nullopt;
  // Tiled dims that cannot be exchanged (interior padding) are gathered, as in the fallback.
  std::vector<int64_t> gathered;
  for (int64_t d : changed) {
    if (!Contains(dims, d)) gathered.push_back(d);
  }
  const Sharding layout = PartiallyReplicate(target, rank, gathered);
  const Sharding fallback = PartiallyReplicate(target, rank, changed);
  switch (op) {
    case Opcode::kSlice:
      return Slice(ctx, node, operands[0], layout, fallback, dims);
    case Opcode::kPad:
      return Pad(ctx, node, operands, layout, fallback, dims);
    default:
      return Concatenate(ctx, node, operands, layout, fallback, dims[0]);
  }
}

}  // namespace tessel::partitioner::internal
