// constant, iota and rng.
//   constant: kept whole (replicated); the driver cuts it to the target locally.
//   iota: generated at local size; along a sharded iota dim the device adds its tile offset, so
//     every element holds its global index.
//   rng: generated whole on every device and cut locally (documented fallback: the values are
//     exactly the unsharded ones because the generator is keyed on (seed, global index); it
//     costs the full tensor's compute on every device).
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

// Every device holds the same literal in its program text; cutting it is a local
// dynamic-slice, so a sharded constant costs no communication.
absl::StatusOr<PValue> HandleConstant(Context& ctx, const Node& node, const std::vector<PValue>&,
                                      const Sharding&) {
  Node* local = ctx.local().AddConstant(node.literal());
  return PValue{local, Sharding::Replicate(), node.shape(), {}};
}

absl::StatusOr<PValue> HandleIota(Context& ctx, const Node& node, const std::vector<PValue>&,
                                  const Sharding& target) {
  Shape local_shape = LocalShape(node.shape(), target);
  const int64_t dim = node.attrs().iota_dimension;
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Add(Opcode::kIota, local_shape, {}, node.attrs()));
  // Only the iota dim needs the offset: along the other dims every element holds the same
  // value whatever tile it is in. Padding elements get values >= the dim size; they are masked
  // wherever padding could matter, like any other padding.
  if (target.num_tiles(dim) > 1) {
    TESSEL_ASSIGN_OR_RETURN(Node * offset, ctx.TileOffset(target, node.shape(), dim));
    // The offset table is s32; a floating or s64 iota adds it in its own type.
    if (local_shape.dtype() != DType::kS32) {
      TESSEL_ASSIGN_OR_RETURN(offset,
                              ctx.Add(Opcode::kConvert, Shape(local_shape.dtype(), {}), {offset}));
    }
    TESSEL_ASSIGN_OR_RETURN(Node * offsets, ctx.Add(Opcode::kBroadcast, local_shape, {offset}));
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kAdd, {local, offsets}));
  }
  return PValue{local, target, node.shape(), {}};
}

absl::StatusOr<PValue> HandleRng(Context& ctx, const Node& node,
                                 const std::vector<PValue>& operands, const Sharding&) {
  // The distribution parameters are scalars; replicated, every device draws the same whole
  // tensor, which is what makes the local cut equal to the unsharded value.
  TESSEL_ASSIGN_OR_RETURN(Node * a, ctx.Reshard(operands[0], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * b, ctx.Reshard(operands[1], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Add(Opcode::kRng, node.shape(), {a, b}, node.attrs()));
  return PValue{local, Sharding::Replicate(), node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
