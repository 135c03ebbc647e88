// convolution, reduce-window, select-and-scatter, reverse.
//
// convolution follows GSPMD's convolution handler on the non-spatial dims, through the same
// iteration-space costing as the dot handler (MakeConvSpace in internal/op_dims.h): candidates
// from the target, the lhs, the rhs and their merge, each costed in bytes received; batch and
// output-feature tilings need no collective, a tiled input feature (contracting) dim gives
// partial sums that the driver all-reduces, and feature / batch groups tile with the groups
// (local group count = count / tiles) when the tiles divide the group count.
//
// Spatial (windowed) dims: PartitionSpatialDimsByReplicating (partitioner/internal/windowed.h,
// which also says what a halo exchange needs) makes every windowed dim whole on each device before
// the local op. The result is then whole along those dims and the driver cuts it to the target with
// a local slice. This is correct for any window, stride, padding and dilation; a halo exchange
// (GSPMD's ExchangeHaloAndGetValidData) would send only the boundary rows instead.
#include "partitioner/internal/windowed.h"

#include <algorithm>

#include "core/status_macros.h"
#include "core/window.h"
#include "partitioner/internal/context.h"
#include "partitioner/internal/op_dims.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

Sharding Plain(const Sharding& s) { return IsPlainTiling(s) ? s : Sharding::Replicate(); }

// The conv's local layout for a candidate space sharding: windowed dims whole (the fallback),
// kernel spatial and other `whole` dims whole, the group dim only tiled by a divisor of the
// group count.
Sharding ConvLayout(const ConvSpace& s, const Sharding& candidate) {
  Sharding space = PartitionSpatialDimsByReplicating(candidate, s.rank, s.windowed);
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
  std::vector<Sharding> candidates;
  candidates.push_back(Embed(Plain(target), s.rank, Iota(s.output_rank)));
  const Sharding from_lhs = Embed(Plain(lhs.sharding), s.rank, s.lhs_to_space);
  const Sharding from_rhs = Embed(Plain(rhs.sharding), s.rank, s.rhs_to_space);
  candidates.push_back(from_lhs);
  candidates.push_back(from_rhs);
  if (auto merged = MergeShardings(from_lhs, from_rhs, s.rank, ctx.num_devices())) {
    candidates.push_back(*merged);
  }
  // Cheapest in bytes received per device; ties keep the earliest (the target's layout).
  int64_t best_cost = -1;
  Sharding best;
  for (const Sharding& candidate : candidates) {
    const Sharding space = ConvLayout(s, candidate);
    TESSEL_ASSIGN_OR_RETURN(int64_t lhs_bytes,
                            ctx.ReshardBytes(lhs, Project(space, s.lhs_to_space)));
    TESSEL_ASSIGN_OR_RETURN(int64_t rhs_bytes,
                            ctx.ReshardBytes(rhs, Project(space, s.rhs_to_space)));
    PValue out{nullptr, PartialSumResult(space, s), node.shape(), {}};
    TESSEL_ASSIGN_OR_RETURN(int64_t out_bytes, ctx.ReshardBytes(out, target));
    const int64_t cost = lhs_bytes + rhs_bytes + out_bytes;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = space;
    }
  }
  const Sharding lhs_layout = Project(best, s.lhs_to_space);
  const Sharding rhs_layout = Project(best, s.rhs_to_space);
  TESSEL_ASSIGN_OR_RETURN(Node * lhs_local, ctx.Reshard(lhs, lhs_layout));
  TESSEL_ASSIGN_OR_RETURN(Node * rhs_local, ctx.Reshard(rhs, rhs_layout));
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  OpAttributes attrs = node.attrs();
  if (s.group_dim < 0) {
    // Padding of an unevenly tiled input feature dim would enter the partial sums: zero it on
    // both sides (it may hold inf or NaN, and 0 * inf is NaN).
    TESSEL_ASSIGN_OR_RETURN(lhs_local, ctx.MaskPadding(lhs_local, lhs_layout, lhs.global_shape,
                                                       {d.input_feature_dimension}, 0));
    TESSEL_ASSIGN_OR_RETURN(rhs_local, ctx.MaskPadding(rhs_local, rhs_layout, rhs.global_shape,
                                                       {d.kernel_input_feature_dimension}, 0));
  } else if (best.IsTiled()) {
    const int64_t group_tiles = best.num_tiles(s.group_dim);
    if (attrs.feature_group_count > 1) attrs.feature_group_count /= group_tiles;
    if (attrs.batch_group_count > 1) attrs.batch_group_count /= group_tiles;
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kConvolution, {lhs_local, rhs_local}, attrs));
  return PValue{result, PartialSumResult(best, s), node.shape(), {}};
}

absl::StatusOr<PValue> HandleReduceWindow(Context& ctx, const Node& node,
                                          const std::vector<PValue>& operands,
                                          const Sharding& target) {
  const int64_t rank = node.shape().rank();
  const Sharding layout =
      PartitionSpatialDimsByReplicating(operands[0].sharding, rank, WindowedDims(node.attrs()));
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
