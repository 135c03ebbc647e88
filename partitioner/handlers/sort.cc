// sort and topk: the sorted dim (topk: the last) must be whole on every device, so operand 0's
// tiling of the other dims is kept and the sorted dim is all-gathered first, as XLA's
// partitioner does for a sort along a sharded dim (spmd_partitioner.cc HandleSort, without its
// "sort along another dim, then reshard" rewrite). Every operand is brought to that layout; the
// result (each tuple element) has it too. Padding of the kept dims forms whole rows of its own,
// sorted independently and dropped by the layout, so it needs no masking.
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<PValue> HandleSort(Context& ctx, const Node& node,
                                  const std::vector<PValue>& operands, const Sharding& target) {
  const Shape& keys = operands[0].global_shape;
  const int64_t dim = node.opcode() == Opcode::kSort ? node.attrs().dimensions[0] : keys.rank() - 1;
  Sharding layout = operands[0].sharding;
  layout = IsPlainTiling(layout) ? PartiallyReplicate(layout, keys.rank(), {dim})
                                 : Sharding::Replicate();
  std::vector<Node*> locals;
  for (const PValue& operand : operands) {
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operand, layout));
    locals.push_back(local);
  }
  TESSEL_ASSIGN_OR_RETURN(Node * sorted, ctx.Add(node.opcode(), std::move(locals), node.attrs()));
  if (!node.shape().is_tuple()) return PValue{sorted, layout, node.shape(), {}};
  PValue tuple{nullptr, layout, node.shape(), {}};
  for (size_t i = 0; i < node.shape().tuple_shapes().size(); ++i) {
    OpAttributes element;
    element.tuple_index = static_cast<int64_t>(i);
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Add(Opcode::kGetTupleElement, {sorted}, element));
    tuple.elements.push_back(PValue{local, layout, node.shape().tuple_shapes()[i], {}});
  }
  return tuple;
}

}  // namespace tessel::partitioner::internal
