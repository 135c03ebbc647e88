// Elementwise ops: every operand of the result's rank is resharded to the target, scalars
// (select predicates, clamp bounds) to replicated; the op then runs on the local shards.
#include "core/status_macros.h"
#include "partitioner/internal/context.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<PValue> HandleElementwise(Context& ctx, const Node& node,
                                         const std::vector<PValue>& operands,
                                         const Sharding& target) {
  // Every full-rank operand in the target's layout makes the op purely local; the data moves
  // (if any) are the operands' reshards, planned and costed like any other.
  std::vector<Node*> locals;
  for (const PValue& operand : operands) {
    const Sharding& want =
        operand.global_shape.rank() == node.shape().rank() ? target : Sharding::Replicate();
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operand, want));
    locals.push_back(local);
  }
  // The shape is given, not inferred: convert takes its element type from the declared shape
  // (no operand carries it), and giving it also checks the local shapes of every op.
  Shape local_shape = LocalShape(node.shape(), target);
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(node.opcode(), local_shape, std::move(locals), node.attrs()));
  return PValue{result, target, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
