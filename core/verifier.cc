#include "tessel/core/verifier.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/shape_inference.h"

namespace tessel {
namespace {

absl::Status NodeError(const Node& node, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("%", node.name(), ": ", std::string(why)));
}

}  // namespace

absl::Status Verify(const Graph& graph) {
  // Position of each node in nodes(); also catches a node listed twice.
  absl::flat_hash_map<const Node*, int64_t> position;
  absl::flat_hash_map<std::string, const Node*> by_name;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const Node* node = graph.nodes()[i];
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("node ", i, " of the graph is null"));
    }
    if (!position.emplace(node, i).second) {
      return NodeError(*node, absl::StrCat("appears twice in the node list (positions ",
                                           position[node], " and ", i, ")"));
    }
    if (node->name().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", i, " (", OpcodeName(node->opcode()), ") has an empty name"));
    }
    auto [it, inserted] = by_name.emplace(node->name(), node);
    if (!inserted) {
      return NodeError(
          *node, absl::StrCat("name is not unique (also used by node ", position[it->second], ")"));
    }
  }

  std::vector<const Node*> parameters;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const Node& node = *graph.nodes()[i];
    std::vector<const Shape*> operand_shapes;
    for (int64_t k = 0; k < node.operand_count(); ++k) {
      const Node* operand = node.operand(k);
      if (operand == nullptr) return NodeError(node, absl::StrCat("operand ", k, " is null"));
      auto it = position.find(operand);
      if (it == position.end()) {
        return NodeError(node, absl::StrCat("operand ", k, " %", operand->name(),
                                            " is not a node of this graph"));
      }
      if (it->second >= i) {
        return NodeError(node, absl::StrCat("operand ", k, " %", operand->name(),
                                            " does not appear before its user"));
      }
      operand_shapes.push_back(&operand->shape());
    }
    if (node.opcode() == Opcode::kParameter) parameters.push_back(&node);
    // A called computation is a graph of its own: it must pass the same checks before its
    // signature (below, in shape inference) means anything.
    for (const auto& called : node.attrs().called_computations) {
      if (called == nullptr) continue;  // shape inference names the missing computation
      absl::Status status = Verify(*called);
      if (!status.ok()) {
        return NodeError(
            node, absl::StrCat("in called computation %", called->name(), ": ", status.message()));
      }
    }
    if (node.opcode() == Opcode::kConstant) {
      if (node.attrs().literal == nullptr) return NodeError(node, "constant has no literal");
      if (node.literal().shape() != node.shape()) {
        return NodeError(
            node, absl::StrCat("constant literal has shape ", node.literal().shape().ToString(),
                               " but the node has shape ", node.shape().ToString()));
      }
    }
    absl::StatusOr<Shape> inferred =
        InferShape(node.opcode(), operand_shapes, node.attrs(), node.shape());
    if (!inferred.ok()) return NodeError(node, std::string(inferred.status().message()));
    if (*inferred != node.shape()) {
      return NodeError(node, absl::StrCat("shape ", node.shape().ToString(),
                                          " differs from the inferred ", inferred->ToString()));
    }
  }

  // Parameter numbers: unique and dense 0..N-1.
  const int64_t num_parameters = static_cast<int64_t>(parameters.size());
  std::vector<const Node*> by_number(parameters.size(), nullptr);
  for (const Node* param : parameters) {
    int64_t number = param->attrs().parameter_number;
    if (number < 0 || number >= num_parameters) {
      return NodeError(
          *param, absl::StrCat("parameter number ", number, " is outside 0..", num_parameters - 1,
                               " (the graph has ", num_parameters, " parameters)"));
    }
    if (by_number[number] != nullptr) {
      return NodeError(*param, absl::StrCat("parameter number ", number, " is also used by %",
                                            by_number[number]->name()));
    }
    by_number[number] = param;
  }

  const Node* root = graph.root();
  if (root == nullptr) return absl::InvalidArgumentError("the graph has no root (no nodes)");
  if (!position.contains(root)) {
    return NodeError(*root, "the root is not a node of this graph");
  }
  return absl::OkStatus();
}

}  // namespace tessel
