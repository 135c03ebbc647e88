#include "partitioner/propagation.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "partitioner/internal/op_dims.h"
#include "partitioner/internal/reshape_dims.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner {

namespace {

using internal::ChangedDims;
using internal::DotSpace;
using internal::Iota;
using internal::IsDimPreserving;
using internal::MakeDotSpace;
using spmd::Sharding;

std::vector<int64_t> AllDimsExcept(int64_t rank, const std::vector<int64_t>& removed) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(removed.begin(), removed.end(), d) == removed.end()) kept.push_back(d);
  }
  return kept;
}

class Propagator {
 public:
  Propagator(const Graph& graph, int64_t num_devices) : graph_(graph), num_devices_(num_devices) {}

  absl::StatusOr<std::vector<Sharding>> Run() {
    for (const Node* node : graph_.nodes()) {
      index_[node] = static_cast<int64_t>(index_.size());
    }
    result_.assign(graph_.num_nodes(), std::nullopt);
    for (const Node* node : graph_.nodes()) {
      if (node->sharding().empty()) continue;
      TESSEL_ASSIGN_OR_RETURN(Sharding s, ParseAnnotation(*node));
      result_[index_[node]] = std::move(s);
    }
    for (int round = 0; round < 8; ++round) {
      bool changed = false;
      for (const Node* node : graph_.nodes()) changed |= Assign(node, Forward(*node));
      for (auto it = graph_.nodes().rbegin(); it != graph_.nodes().rend(); ++it) {
        changed |= Assign(*it, Backward(**it));
      }
      if (!changed) break;
    }
    std::vector<Sharding> out;
    for (const Node* node : graph_.nodes()) {
      auto& s = result_[index_[node]];
      if (s.has_value()) {
        out.push_back(*s);
      } else if (node->shape().is_tuple()) {
        std::vector<Sharding> elements;
        for (const Node* operand : node->operands()) {
          const auto& e = result_[index_[operand]];
          elements.push_back(e.value_or(Sharding::Replicate()));
        }
        out.push_back(node->opcode() == Opcode::kTuple ? Sharding::Tuple(std::move(elements))
                                                       : Sharding::Replicate());
      } else {
        out.push_back(Sharding::Replicate());
      }
    }
    return out;
  }

 private:
  absl::StatusOr<Sharding> ParseAnnotation(const Node& node) {
    auto where = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("%", node.name(), ": sharding=", node.sharding(), ": ", why));
    };
    absl::StatusOr<Sharding> parsed = spmd::ParseSharding(node.sharding());
    if (!parsed.ok()) return where(parsed.status().message());
    if (parsed->IsManual()) {
      return absl::UnimplementedError(
          absl::StrCat("%", node.name(), ": manual shardings are not supported yet"));
    }
    absl::Status fits = parsed->Validate(node.shape(), num_devices_);
    if (!fits.ok()) return where(fits.message());
    if (parsed->IsTuple()) return *parsed;
    if (!IsPlainTiling(*parsed) && !parsed->IsMaximal()) {
      return absl::UnimplementedError(
          absl::StrCat("%", node.name(),
                       ": only tiled, partially replicated, replicated and maximal "
                       "shardings are supported as annotations, got ",
                       parsed->ToString()));
    }
    if (parsed->IsMaximal()) {
      // Every device computes the value (maximal is honoured as replicated; documented).
      return Sharding::Replicate();
    }
    if (!CoversAllDevices(*parsed, num_devices_)) {
      return where(absl::StrCat("the tile assignment must hold every device 0..", num_devices_ - 1,
                                " exactly once (a sharding on another mesh?)"));
    }
    return *parsed;
  }

  bool Assign(const Node* node, std::optional<Sharding> s) {
    auto& slot = result_[index_[node]];
    if (slot.has_value() || !s.has_value() || node->shape().is_tuple()) return false;
    slot = std::move(s);
    return true;
  }

  const std::optional<Sharding>& Of(const Node* node) { return result_[index_[node]]; }

  std::optional<Sharding> Merge(std::optional<Sharding> a, const std::optional<Sharding>& b,
                                int64_t rank) {
    if (!a.has_value()) return b;
    if (!b.has_value()) return a;
    std::optional<Sharding> merged = MergeShardings(*a, *b, rank, num_devices_);
    if (merged.has_value()) return merged;
    return a->NumTiles() >= b->NumTiles() ? a : b;
  }

  std::optional<Sharding> Forward(const Node& node) {
    if (Of(&node).has_value() || node.shape().is_tuple()) return std::nullopt;
    const int64_t rank = node.shape().rank();
    const Opcode op = node.opcode();
    if (IsElementwise(op)) {
      std::optional<Sharding> merged;
      for (const Node* operand : node.operands()) {
        if (operand->shape().rank() != rank) continue;  // scalar pred / bounds
        merged = Merge(merged, Of(operand), rank);
      }
      return merged;
    }
    if (node.operand_count() == 0) return std::nullopt;
    const std::optional<Sharding>& in = Of(node.operand(0));
    switch (op) {
      case Opcode::kBroadcast:
        if (!in) return std::nullopt;
        return Embed(*in, rank, node.attrs().dimensions);
      case Opcode::kTranspose:
        if (!in) return std::nullopt;
        return TransposeSharding(*in, node.attrs().dimensions);
      case Opcode::kReshape: {
        if (!in) return std::nullopt;
        return internal::ReshapeSharding(*in, node.operand(0)->shape(), node.shape());
      }
      case Opcode::kReduce:
        if (!in) return std::nullopt;
        return Project(*in,
                       AllDimsExcept(node.operand(0)->shape().rank(), node.attrs().dimensions));
      case Opcode::kDot: {
        DotSpace space = MakeDotSpace(node);
        std::optional<Sharding> from_lhs, from_rhs;
        if (Of(node.operand(0))) {
          Sharding s = Embed(*Of(node.operand(0)), space.rank, space.lhs_to_space);
          from_lhs = Project(s, Iota(space.output_rank));
        }
        if (Of(node.operand(1))) {
          Sharding s = Embed(*Of(node.operand(1)), space.rank, space.rhs_to_space);
          from_rhs = Project(s, Iota(space.output_rank));
        }
        return Merge(from_lhs, from_rhs, rank);
      }
      default:
        break;
    }
    if (IsDimPreserving(op) && in) return PartiallyReplicate(*in, rank, ChangedDims(node));
    return std::nullopt;
  }

  // What `user` implies for its operand `operand_index`.
  std::optional<Sharding> FromUser(const Node& user, int64_t operand_index) {
    const std::optional<Sharding>& out = Of(&user);
    if (!out.has_value() || user.shape().is_tuple()) return std::nullopt;
    const Shape& operand_shape = user.operand(operand_index)->shape();
    const Opcode op = user.opcode();
    if (IsElementwise(op)) {
      if (operand_shape.rank() != user.shape().rank()) return std::nullopt;
      return out;
    }
    switch (op) {
      case Opcode::kBroadcast:
        return Project(*out, user.attrs().dimensions);
      case Opcode::kTranspose: {
        const auto& perm = user.attrs().dimensions;
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = i;
        return TransposeSharding(*out, inverse);
      }
      case Opcode::kReshape:
        return internal::ReshapeSharding(*out, user.shape(), operand_shape);
      case Opcode::kReduce:
        if (operand_index != 0) return std::nullopt;
        return Embed(*out, operand_shape.rank(),
                     AllDimsExcept(operand_shape.rank(), user.attrs().dimensions));
      case Opcode::kDot: {
        if (operand_index > 1) return std::nullopt;
        DotSpace space = MakeDotSpace(user);
        Sharding s = Embed(*out, space.rank, Iota(space.output_rank));
        return Project(s, operand_index == 0 ? space.lhs_to_space : space.rhs_to_space);
      }
      default:
        break;
    }
    if (IsDimPreserving(op)) {
      bool data_operand = operand_index == 0 || (op == Opcode::kConcatenate) ||
                          (op == Opcode::kDynamicUpdateSlice && operand_index == 1);
      if (!data_operand) return std::nullopt;
      return PartiallyReplicate(*out, operand_shape.rank(), ChangedDims(user));
    }
    return std::nullopt;
  }

  std::optional<Sharding> Backward(const Node& node) {
    if (Of(&node).has_value() || node.shape().is_tuple()) return std::nullopt;
    std::optional<Sharding> merged;
    for (const Node* user : node.users()) {
      for (int64_t i = 0; i < user->operand_count(); ++i) {
        if (user->operand(i) == &node)
          merged = Merge(merged, FromUser(*user, i), node.shape().rank());
      }
    }
    return merged;
  }

  const Graph& graph_;
  int64_t num_devices_;
  absl::flat_hash_map<const Node*, int64_t> index_;
  std::vector<std::optional<Sharding>> result_;
};

}  // namespace

absl::StatusOr<std::vector<Sharding>> ComputeShardings(const Graph& graph, int64_t num_devices) {
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices must be >= 1, got ", num_devices));
  }
  return Propagator(graph, num_devices).Run();
}

absl::Status PropagateShardings(Graph& graph, int64_t num_devices) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Sharding> shardings, ComputeShardings(graph, num_devices));
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    graph.nodes()[i]->set_sharding(shardings[i].ToString());
  }
  return absl::OkStatus();
}

}  // namespace tessel::partitioner
