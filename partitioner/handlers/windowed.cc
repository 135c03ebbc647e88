// convolution, reduce-window, select-and-scatter, reverse.
//
// convolution follows GSPMD's convolution handler on the non-spatial dims, through the same
// iteration-space costing as the dot handler (MakeConvSpace in internal/op_dims.h): candidates
// from the target, the lhs, the rhs and their merge, each costed in bytes received; batch and
// output-feature tilings need no collective, a tiled input feature (contracting) dim gives
// partial sums that the driver all-reduces, and feature / batch groups tile with the groups
// (local group count = count / tiles) when the tiles divide the group count; spatial dims with
// a trivial window (size 1, stride 1, no padding or dilation) keep their tiling, as the batch.
//
// Spatial (windowed) dims of convolution and reduce-window: halo exchange (partitioner/internal/
// halo.h, GSPMD's ExchangeHaloAndGetValidData) when UseHalo finds it moves fewer bytes: the
// output keeps its spatial tiling, the operand (the conv's lhs) is tiled alike and each device
// fetches from its neighbours the rows its output tile's windows read (WindowedOpHalo),
// positions outside the operand are set to the padding value (zero for convolution, the init
// value for reduce-window), and the local op runs with no padding along those dims. Base (lhs)
// dilation, select-and-scatter and reverse use the fallback, PartitionSpatialDimsByReplicating
// (partitioner/internal/windowed.h): every windowed dim whole on each device before the local
// op, the result cut to the target with a local slice; correct for any window.
#include "tessel/partitioner/internal/windowed.h"

#include <algorithm>
#include <optional>

#include "tessel/core/status_macros.h"
#include "tessel/core/window.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/internal/halo.h"
#include "tessel/partitioner/internal/op_dims.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

Sharding Plain(const Sharding& s) { return IsPlainTiling(s) ? s : Sharding::Replicate(); }

// The windowed dims halo exchange serves: every window, stride, padding and window dilation;
// not base (lhs) dilation, whose holes put the operand's elements at other positions.
bool HaloServes(const WindowDim& w) { return w.base_dilation == 1; }

// The conv's local layout for a candidate space sharding: the windowed dims in `whole_windowed`
// whole (all of them: the fallback), kernel spatial and other `whole` dims whole, the group dim
// only tiled by a divisor of the group count.
Sharding ConvLayout(const ConvSpace& s, const Sharding& candidate,
                    const std::vector<int64_t>& whole_windowed) {
  Sharding space = PartitionSpatialDimsByReplicating(candidate, s.rank, whole_windowed);
  space = PartiallyReplicate(space, s.rank, s.whole);
  if (s.group_dim >= 0 && space.IsTiled() && s.group_count % space.num_tiles(s.group_dim) != 0) {
    space = PartiallyReplicate(space, s.rank, {s.group_dim});
  }
  return space;
}

// The result of the local conv under `space`: output dims tiled as in space, the tiles of the
// contracting dim (and the always-whole kernel spatial dims after it) as an unreduced subgroup
// (partial sums), the rest replicated. Same construction as the dot handler's.
Sharding PartialSumResult(const Sharding& space, const ConvSpace& s) {
  if (!space.IsTiled()) return space;
  const spmd::DeviceArray& ta = space.tile_assignment();
  std::vector<int64_t> dims = ta.dims();
  if (space.NumSubgroupDims() == 0) dims.push_back(1);
  spmd::DeviceArray full = ta.Reshape(dims);
  int64_t contracting_tiles = 1;
  for (int64_t d = s.output_rank; d < s.rank; ++d) contracting_tiles *= full.dim(d);
  std::vector<int64_t> new_dims(full.dims().begin(), full.dims().begin() + s.output_rank);
  new_dims.push_back(contracting_tiles);
  new_dims.push_back(full.dim(s.rank));
  return Sharding::Subgroup(full.Reshape(new_dims),
                            {spmd::SubgroupType::kUnreduced, spmd::SubgroupType::kReplicated});
}

// Dims of a reduce-window / select-and-scatter whose window is not trivial.
std::vector<int64_t> WindowedDims(const OpAttributes& attrs) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < attrs.window.size(); ++d) {
    if (!IsTrivialWindowDim(attrs.window[d])) dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

// reduce-window with its windowed dims tiled like the target: each device fetches the rows its
// output tile's windows cover from its neighbours (WindowedOpHalo), sets the positions outside
// the operand to the init value (XLA pads reduce-window with it), and reduces with no padding
// along those dims. nullopt when the target tiles no such dim or UseHalo prefers `fallback`
// (the operand with the windowed dims whole, then its result cut to the target).
absl::StatusOr<std::optional<PValue>> ReduceWindowWithHalo(Context& ctx, const Node& node,
                                                           const std::vector<PValue>& operands,
                                                           const Sharding& target,
                                                           const Sharding& fallback) {
  const Sharding plain = Plain(target);
  if (!plain.IsTiled()) return std::nullopt;
  const int64_t rank = node.shape().rank();
  const Shape& in = operands[0].global_shape;
  const Shape& out = node.shape();
  std::vector<HaloWindow> windows;
  std::vector<int64_t> whole;
  for (int64_t d : WindowedDims(node.attrs())) {
    const WindowDim& w = node.attrs().window[d];
    if (plain.num_tiles(d) > 1 && HaloServes(w) && in.dim(d) > 0 && out.dim(d) > 0) {
      windows.push_back(WindowedOpHalo(d, plain.num_tiles(d), in.dim(d), out.dim(d), w.size,
                                       w.stride, w.padding_low, w.window_dilation));
    } else {
      whole.push_back(d);
    }
  }
  if (windows.empty()) return std::nullopt;
  const Sharding layout = PartiallyReplicate(plain, rank, whole);
  TESSEL_ASSIGN_OR_RETURN(HaloPlan plan, PlanHalo(layout, in, windows, ctx.num_devices()));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_layout, ctx.ReshardBytes(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_fallback, ctx.ReshardBytes(operands[0], fallback));
  TESSEL_ASSIGN_OR_RETURN(int64_t fallback_out,
                          ctx.ReshardBytes(PValue{nullptr, fallback, out, {}}, target));
  if (!UseHalo(to_layout + plan.bytes_per_device, to_fallback + fallback_out)) {
    return std::nullopt;
  }
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[1], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(HaloResult halo, ExchangeHalo(ctx, local, layout, plan, true));
  local = halo.local;
  if (halo.in_range != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(Node * fill, ctx.Add(Opcode::kBroadcast, local->shape(), {init}));
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kSelect, {halo.in_range, local, fill}));
  }
  OpAttributes attrs = node.attrs();
  for (const HaloWindow& w : windows) {
    attrs.window[w.dim].padding_low = 0;
    attrs.window[w.dim].padding_high = 0;
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReduceWindow, {local, init}, attrs));
  return PValue{result, layout, out, {}};
}

// A convolution's chosen layout: the iteration-space sharding and, when its output spatial dims
// stay tiled, the halo exchange of the lhs that goes with it.
struct ConvChoice {
  Sharding space;
  std::optional<HaloPlan> plan;
};

// The halo variant of `candidate`: its tiled output spatial dims that halo exchange serves stay
// tiled (the lhs is then tiled alike along its spatial dims and fetches the rows each output
// tile's windows read, WindowedOpHalo); the other windowed dims whole. nullopt when no spatial
// dim stays tiled.
absl::StatusOr<std::optional<ConvChoice>> ConvHaloChoice(Context& ctx, const Node& node,
                                                         const ConvSpace& s,
                                                         const Sharding& candidate,
                                                         const Shape& lhs_shape) {
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  const std::vector<WindowDim>& window = node.attrs().window;
  // Window dim k is spatial dim k of the lhs and the output; trivial ones are not in
  // s.windowed (they keep their tiling with no halo, as the batch does).
  auto windowed = [&](size_t k) {
    return std::find(s.windowed.begin(), s.windowed.end(), d.output_spatial_dimensions[k]) !=
           s.windowed.end();
  };
  std::vector<int64_t> whole_windowed;
  for (size_t k = 0; k < window.size(); ++k) {
    if (windowed(k) && !HaloServes(window[k])) {
      whole_windowed.push_back(d.output_spatial_dimensions[k]);
    }
  }
  ConvChoice choice{ConvLayout(s, Plain(candidate), whole_windowed), std::nullopt};
  if (!choice.space.IsTiled()) return std::nullopt;
  const Sharding lhs_layout = Project(choice.space, s.lhs_to_space);
  std::vector<HaloWindow> windows;
  for (size_t k = 0; k < d.input_spatial_dimensions.size(); ++k) {
    const int64_t dim = d.input_spatial_dimensions[k];
    const int64_t out = node.shape().dim(d.output_spatial_dimensions[k]);
    const int64_t tiles = lhs_layout.num_tiles(dim);
    if (!windowed(k) || tiles <= 1 || lhs_shape.dim(dim) < 1 || out < 1) continue;
    const WindowDim& w = window[k];
    windows.push_back(WindowedOpHalo(dim, tiles, lhs_shape.dim(dim), out, w.size, w.stride,
                                     w.padding_low, w.window_dilation));
  }
  if (windows.empty()) return std::nullopt;
  TESSEL_ASSIGN_OR_RETURN(choice.plan, PlanHalo(lhs_layout, lhs_shape, windows, ctx.num_devices()));
  return choice;
}

// Candidate iteration-space shardings of a convolution, each costed in bytes received per
// device with its spatial dims whole (the fallback) and, where the candidate tiles output
// spatial dims that halo exchange serves, with them kept tiled and the lhs halos exchanged;
// UseHalo decides between the two per candidate, then the cheapest candidate wins (ties keep
// the earliest: the target's layout).
absl::StatusOr<ConvChoice> ChooseConvLayout(Context& ctx, const Node& node, const ConvSpace& s,
                                            const PValue& lhs, const PValue& rhs,
                                            const Sharding& target) {
  std::vector<Sharding> candidates;
  candidates.push_back(Embed(Plain(target), s.rank, Iota(s.output_rank)));
  const Sharding from_lhs = Embed(Plain(lhs.sharding), s.rank, s.lhs_to_space);
  const Sharding from_rhs = Embed(Plain(rhs.sharding), s.rank, s.rhs_to_space);
  candidates.push_back(from_lhs);
  candidates.push_back(from_rhs);
  if (auto merged = MergeShardings(from_lhs, from_rhs, s.rank, ctx.num_devices())) {
    candidates.push_back(*merged);
  }
  auto cost_of = [&](const Sharding& space) -> absl::StatusOr<int64_t> {
    TESSEL_ASSIGN_OR_RETURN(int64_t lhs_bytes,
                            ctx.ReshardBytes(lhs, Project(space, s.lhs_to_space)));
    TESSEL_ASSIGN_OR_RETURN(int64_t rhs_bytes,
                            ctx.ReshardBytes(rhs, Project(space, s.rhs_to_space)));
    PValue out{nullptr, PartialSumResult(space, s), node.shape(), {}};
    TESSEL_ASSIGN_OR_RETURN(int64_t out_bytes, ctx.ReshardBytes(out, target));
    return lhs_bytes + rhs_bytes + out_bytes;
  };
  int64_t best_cost = -1;
  ConvChoice best;
  for (const Sharding& candidate : candidates) {
    ConvChoice choice{ConvLayout(s, candidate, s.windowed), std::nullopt};
    TESSEL_ASSIGN_OR_RETURN(int64_t cost, cost_of(choice.space));
    TESSEL_ASSIGN_OR_RETURN(std::optional<ConvChoice> halo,
                            ConvHaloChoice(ctx, node, s, candidate, lhs.global_shape));
    if (halo.has_value()) {
      TESSEL_ASSIGN_OR_RETURN(int64_t halo_cost, cost_of(halo->space));
      halo_cost += halo->plan->bytes_per_device;
      if (UseHalo(halo_cost, cost)) {
        choice = *std::move(halo);
        cost = halo_cost;
      }
    }
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = std::move(choice);
    }
  }
  return best;
}

}  // namespace

Sharding PartitionSpatialDimsByReplicating(const Sharding& sharding, int64_t rank,
                                           const std::vector<int64_t>& windowed_dims) {
  return PartiallyReplicate(Plain(sharding), rank, windowed_dims);
}

absl::StatusOr<PValue> HandleConvolution(Context& ctx, const Node& node,
                                         const std::vector<PValue>& operands,
                                         const Sharding& target) {
  const ConvSpace s = MakeConvSpace(node);
  const PValue& lhs = operands[0];
  const PValue& rhs = operands[1];
  TESSEL_ASSIGN_OR_RETURN(ConvChoice best, ChooseConvLayout(ctx, node, s, lhs, rhs, target));
  const Sharding lhs_layout = Project(best.space, s.lhs_to_space);
  const Sharding rhs_layout = Project(best.space, s.rhs_to_space);
  TESSEL_ASSIGN_OR_RETURN(Node * lhs_local, ctx.Reshard(lhs, lhs_layout));
  TESSEL_ASSIGN_OR_RETURN(Node * rhs_local, ctx.Reshard(rhs, rhs_layout));
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  OpAttributes attrs = node.attrs();
  if (attrs.feature_group_count == 1) {
    // The input feature dim is the contracting one (also under batch groups): the padding of an
    // unevenly tiled one would enter the partial sums, so it is zeroed on both sides (it may
    // hold inf or NaN, and 0 * inf is NaN).
    TESSEL_ASSIGN_OR_RETURN(lhs_local, ctx.MaskPadding(lhs_local, lhs_layout, lhs.global_shape,
                                                       {d.input_feature_dimension}, 0));
    TESSEL_ASSIGN_OR_RETURN(rhs_local, ctx.MaskPadding(rhs_local, rhs_layout, rhs.global_shape,
                                                       {d.kernel_input_feature_dimension}, 0));
  }
  if (s.group_dim >= 0 && best.space.IsTiled()) {
    const int64_t group_tiles = best.space.num_tiles(s.group_dim);
    if (attrs.feature_group_count > 1) attrs.feature_group_count /= group_tiles;
    if (attrs.batch_group_count > 1) attrs.batch_group_count /= group_tiles;
  }
  if (best.plan.has_value()) {
    // The lhs rows each device's output tile reads, from its neighbours; positions outside the
    // lhs are the conv's zero padding, so the local conv pads nothing along those dims.
    TESSEL_ASSIGN_OR_RETURN(HaloResult halo,
                            ExchangeHalo(ctx, lhs_local, lhs_layout, *best.plan, true));
    lhs_local = halo.local;
    if (halo.in_range != nullptr) {
      TESSEL_ASSIGN_OR_RETURN(Node * zeros,
                              ctx.Add(Opcode::kBroadcast, lhs_local->shape(),
                                      {ctx.ScalarConstant(lhs_local->shape().dtype(), 0)}));
      TESSEL_ASSIGN_OR_RETURN(lhs_local,
                              ctx.Add(Opcode::kSelect, {halo.in_range, lhs_local, zeros}));
    }
    for (const HaloDimPlan& dim : best.plan->dims) {
      const auto& spatial = d.input_spatial_dimensions;
      const size_t k = std::find(spatial.begin(), spatial.end(), dim.window.dim) - spatial.begin();
      attrs.window[k].padding_low = 0;
      attrs.window[k].padding_high = 0;
    }
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kConvolution, {lhs_local, rhs_local}, attrs));
  return PValue{result, PartialSumResult(best.space, s), node.shape(), {}};
}

absl::StatusOr<PValue> HandleReduceWindow(Context& ctx, const Node& node,
                                          const std::vector<PValue>& operands,
                                          const Sharding& target) {
  const int64_t rank = node.shape().rank();
  const Sharding layout =
      PartitionSpatialDimsByReplicating(operands[0].sharding, rank, WindowedDims(node.attrs()));
  TESSEL_ASSIGN_OR_RETURN(std::optional<PValue> halo,
                          ReduceWindowWithHalo(ctx, node, operands, target, layout));
  if (halo.has_value()) return *std::move(halo);
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[1], Sharding::Replicate()));
  // Trivial window dims (size 1, stride 1, no padding or dilation) map element to element, so
  // the global attributes hold for the local shard; windowed dims are whole.
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kReduceWindow, {local, init}, node.attrs()));
  (void)target;
  return PValue{result, layout, node.shape(), {}};
}

absl::StatusOr<PValue> HandleSelectAndScatter(Context& ctx, const Node& node,
                                              const std::vector<PValue>& operands,
                                              const Sharding& target) {
  const int64_t rank = node.shape().rank();
  const Sharding layout =
      PartitionSpatialDimsByReplicating(operands[0].sharding, rank, WindowedDims(node.attrs()));
  // The source is laid out like the operand: on trivial dims its elements are the operand's.
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * source, ctx.Reshard(operands[1], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[2], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kSelectAndScatter, {local, source, init}, node.attrs()));
  (void)target;
  return PValue{result, layout, node.shape(), {}};
}

absl::StatusOr<PValue> HandleReverse(Context& ctx, const Node& node,
                                     const std::vector<PValue>& operands, const Sharding& target) {
  // A reversed dim's tile k holds global tile n-1-k's data (and padding moves to the front):
  // those dims are made whole, the others keep the target's tiling.
  const Sharding layout =
      PartiallyReplicate(Plain(target), node.shape().rank(), node.attrs().dimensions);
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReverse, {local}, node.attrs()));
  return PValue{result, layout, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
