// Rebuilding a per-device program node by node (internal to the partitioner): what the passes
// after partitioning (combine_collectives.cc, cse.cc) share when they copy the nodes they leave
// as they are into the new graph.
//
//   absl::flat_hash_map<const Node*, Node*> mapped;  // old node -> its value in `out`
//   for (const Node* node : program.nodes()) {
//     mapped[node] = CopyNode(*out, *node, MappedOperands(*node, mapped));
//   }
#ifndef TESSEL_PARTITIONER_INTERNAL_REWRITE_H_
#define TESSEL_PARTITIONER_INTERNAL_REWRITE_H_

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tessel/core/graph.h"

namespace tessel::partitioner::internal {

// The operands of `node` as their values in the new graph. Precondition: `mapped` holds every
// operand of `node` (the program is walked in topological order); a missing one throws
// std::out_of_range, a bug in the pass.
inline std::vector<Node*> MappedOperands(const Node& node,
                                         const absl::flat_hash_map<const Node*, Node*>& mapped) {
  std::vector<Node*> operands;
  operands.reserve(node.operands().size());
  for (const Node* operand : node.operands()) operands.push_back(mapped.at(operand));
  return operands;
}

// Adds to `out` a node that computes what `node` computes, on `operands` (values of `out`):
// the same opcode, shape, attributes, name and sharding. The shape is not re-inferred (the
// operands have the old operands' shapes).
inline Node* CopyNode(Graph& out, const Node& node, std::vector<Node*> operands) {
  Node* copy = out.AddNodeUnchecked(node.opcode(), node.shape(), std::move(operands), node.attrs(),
                                    node.name());
  copy->set_sharding(node.sharding());
  return copy;
}

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_REWRITE_H_
