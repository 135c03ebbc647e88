// Elementwise ops: every operand of the result's rank is resharded to the target, scalars
// (select predicates, clamp bounds) to replicated; the op then runs on the local shards.
#include "core/status_macros.h"
#include "partitioner/internal/context.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<PValue> HandleElementwise(Context& ctx, const Node& node,
                                         const std::vector<PValue>& operands,
                                         const Sharding& target) {
  std::vector<Node*> locals;
  for (const PValue& operand : operands) {
    const Sharding& want =
        operand.global_shape.rank() == node.shape().rank() ? target : Sharding::Replicate();
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operand, want));
    locals.push_back(local);
  }
  Shape local_shape = LocalShape(node.shape(), target);
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(node.opcode(), local_shape, std::move(locals), node.attrs()));
  return PValue{result, target, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
