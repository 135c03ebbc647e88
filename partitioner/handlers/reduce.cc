// reduce: each device reduces its shard (padding along sharded reduced dims replaced by the
// reduction's identity), then one all-reduce with the same computation combines the devices
// along the sharded reduced dims. The result keeps the operand's tiling of the kept dims.
#include <algorithm>
#include <limits>

#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

// The value padding is replaced with before the local reduce. Integers get the double extremes,
// which Literal::SetFromDouble saturates to the dtype's min / max.
double Identity(ReduceKind kind, DType dtype) {
  switch (kind) {
    case ReduceKind::kAdd:
    case ReduceKind::kOr:
      return 0;
    case ReduceKind::kMultiply:
    case ReduceKind::kAnd:
      return 1;
    case ReduceKind::kMaximum:
      return IsFloating(dtype) ? -std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::lowest();
    case ReduceKind::kMinimum:
      return IsFloating(dtype) ? std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::max();
  }
  return 0;
}

// The local sums of an add-reduce over sharded dims as an unreduced value: the kept dims tiled
// as in `layout`, the tiles of the reduced dims an unreduced subgroup, the rest replicated. The
// driver then completes it into the node's target: a reduce-scatter when the target tiles a kept
// dim along the reduced groups (a bias or position-embedding gradient under FSDP, which XLA's
// ReduceScatterCreator makes of all-reduce + dynamic-slice), else an all-reduce.
Sharding UnreducedResult(const Sharding& layout, const std::vector<int64_t>& kept,
                         const std::vector<int64_t>& reduced) {
  const spmd::DeviceArray& ta = layout.tile_assignment();
  const int64_t rank = layout.TiledDataRank();
  std::vector<int64_t> dims = ta.dims();
  if (layout.NumSubgroupDims() == 0) dims.push_back(1);
  spmd::DeviceArray full = ta.Reshape(dims);
  std::vector<int64_t> perm = kept;
  perm.insert(perm.end(), reduced.begin(), reduced.end());
  perm.push_back(rank);
  spmd::DeviceArray moved = full.Transpose(perm);
  std::vector<int64_t> new_dims;
  int64_t reduced_tiles = 1;
  for (int64_t d : kept) new_dims.push_back(full.dim(d));
  for (int64_t d : reduced) reduced_tiles *= full.dim(d);
  new_dims.push_back(reduced_tiles);
  new_dims.push_back(full.dim(rank));
  return Sharding::Subgroup(moved.Reshape(new_dims),
                            {spmd::SubgroupType::kUnreduced, spmd::SubgroupType::kReplicated});
}

}  // namespace

absl::StatusOr<PValue> HandleReduce(Context& ctx, const Node& node,
                                    const std::vector<PValue>& operands, const Sharding& target) {
  const PValue& x = operands[0];
  const Shape& in = x.global_shape;
  const std::vector<int64_t>& reduced = node.attrs().dimensions;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  // Reduce in the layout the operand already has (no data moves before the local reduce);
  // a partial-sum operand is completed first.
  Sharding layout = x.sharding;
  if (!IsPlainTiling(layout)) layout = Sharding::Replicate();
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(x, layout));
  std::vector<int64_t> sharded_reduced;
  for (int64_t d : reduced) {
    if (layout.num_tiles(d) > 1) sharded_reduced.push_back(d);
  }
  const ReduceKind kind = node.attrs().reduce_kind;
  TESSEL_ASSIGN_OR_RETURN(
      local, ctx.MaskPadding(local, layout, in, sharded_reduced, Identity(kind, in.dtype())));
  // The init value enters every device's local reduce, so the all-reduce combines it once per
  // device: right only when it is the computation's identity, as XLA's (and JAX's lax.reduce)
  // semantics require of reduce anyway.
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[1], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReduce, {local, init}, node.attrs()));
  if (!sharded_reduced.empty() && kind == ReduceKind::kAdd && layout.IsTiled()) {
    return PValue{result, UnreducedResult(layout, kept, reduced), node.shape(), {}};
  }
  // One all-reduce over all sharded reduced dims together (their tiles form one group per
  // position of the kept dims and the replication dim), not one per dim.
  if (!sharded_reduced.empty()) {
    TESSEL_ASSIGN_OR_RETURN(result,
                            ctx.AllReduce(result, ctx.GroupsAlong(layout, sharded_reduced), kind));
  }
  return PValue{result, Project(layout, kept), node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
