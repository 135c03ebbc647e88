#include "tessel/partitioner/cse.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/partitioner/internal/rewrite.h"

namespace tessel::partitioner {
namespace {

// A key equal for nodes that compute the same value, or "" for nodes never merged. Operands
// are named by their merged node's id in the new graph.
std::string KeyOf(const Node& node, const std::vector<Node*>& operands) {
  const std::string head =
      absl::StrCat(OpcodeName(node.opcode()), "|", node.shape().ToString(), "|", node.sharding());
  switch (node.opcode()) {
    case Opcode::kConstant: {
      const Literal& value = node.literal();
      return absl::StrCat(head, "|",
                          absl::string_view(reinterpret_cast<const char*>(value.raw_data()),
                                            static_cast<size_t>(value.byte_size())));
    }
    case Opcode::kIota:
      return absl::StrCat(head, "|", node.attrs().iota_dimension);
    case Opcode::kBroadcast:
      return absl::StrCat(head, "|", operands[0]->id(), "|",
                          absl::StrJoin(node.attrs().dimensions, ","));
    default:
      return "";
  }
}

}  // namespace

std::unique_ptr<Graph> CseConstantsAndBroadcasts(const Graph& program, int64_t* removed) {
  auto out = std::make_unique<Graph>(program.name());
  absl::flat_hash_map<const Node*, Node*> mapped;
  absl::flat_hash_map<std::string, Node*> first_of;
  int64_t count = 0;
  for (const Node* node : program.nodes()) {
    std::vector<Node*> operands = internal::MappedOperands(*node, mapped);
    // A tuple-shaped constant is never merged (its literal is not one flat buffer).
    const std::string key = node->shape().is_tuple() ? "" : KeyOf(*node, operands);
    if (!key.empty()) {
      if (auto it = first_of.find(key); it != first_of.end()) {
        mapped[node] = it->second;
        ++count;
        continue;
      }
    }
    Node* copy = internal::CopyNode(*out, *node, std::move(operands));
    mapped[node] = copy;
    if (!key.empty()) first_of.emplace(key, copy);
  }
  out->set_root(mapped.at(program.root()));
  if (removed != nullptr) *removed = count;
  return out;
}

}  // namespace tessel::partitioner
