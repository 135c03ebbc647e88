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

// One propagation over a graph. result_[i] is the sharding of graph_.nodes()[i] once decided;
// a slot is written once and never revised (Assign), which is what makes the outcome independent
// of how many rounds run after it was set and keeps it identical on every host.
class Propagator {
 public:
  Propagator(const Graph& graph, int64_t num_devices) : graph_(graph), num_devices_(num_devices) {}

  absl::StatusOr<std::vector<Sharding>> Run() {
    for (const Node* node : graph_.nodes()) {
      index_[node] = static_cast<int64_t>(index_.size());
    }
    result_.assign(graph_.num_nodes(), std::nullopt);
    // Annotations fill their slots before any pass runs, so no inferred sharding can take the
    // place of a user's mark_sharding (XLA's ShardingPropagation also treats them as fixed).
    for (const Node* node : graph_.nodes()) {
      if (node->sharding().empty()) continue;
      TESSEL_ASSIGN_OR_RETURN(Sharding s, ParseAnnotation(*node));
      result_[index_[node]] = std::move(s);
    }
    MarkManualRegions();
    // graph_.nodes() is a topological order and Assign writes result_ in place, so one forward
    // pass carries a sharding down a whole chain of operand -> user edges, and one backward pass
    // up a whole chain of user -> operand edges. More rounds are needed only where a path from
    // an annotation changes direction: in add(a, b) with %a annotated and negate(b), %b learns
    // from the add going backward and the negate from %b in the next forward pass. Each round
    // is one forward and one backward leg, so 8 rounds reach every node whose path turns at
    // most 14 times. The loop would stop by itself (a round that changes something fills at
    // least one slot); the bound caps the cost on deep graphs. A node still unsharded after it
    // is {replicated} below: always correct, the partitioner reshards wherever shardings meet.
    for (int round = 0; round < 8; ++round) {
      bool changed = false;
      for (const Node* node : graph_.nodes()) changed |= Assign(node, Forward(*node));
      for (auto it = graph_.nodes().rbegin(); it != graph_.nodes().rend(); ++it) {
        changed |= Assign(*it, Backward(**it));
      }
      if (!changed) break;
    }
    // Tuple-shaped nodes never get a slot from the passes (Assign refuses them): a tuple()
    // takes its elements' shardings here, after they are final; any other tuple-shaped node
    // (a tuple parameter, which Partition rejects anyway) is {replicated}.
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
    // {manual}: a value of a manual region, already per device (its shape is local); it
    // needs no fitting to the mesh.
    if (parsed->IsManual()) return *parsed;
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
    // A tile assignment that misses a device would leave that device without a role in the
    // SPMD program (every device runs the same program over the same devices).
    if (!CoversAllDevices(*parsed, num_devices_)) {
      return where(absl::StrCat("the tile assignment must hold every device 0..", num_devices_ - 1,
                                " exactly once (a sharding on another mesh?)"));
    }
    return *parsed;
  }

  // The values of manual regions (JAX shard_map, torch_xla enable_manual_sharding) are {manual}
  // and take no part in propagation, as in XLA's ShardingPropagation: a region starts at an
  // SPMDFullToShardShape (or a {manual} annotation, or partition-id, which only has a meaning
  // per device) and holds everything computed from manual values, up to the
  // SPMDShardToFullShape that leaves it (whose own annotation is the global layout).
  void MarkManualRegions() {
    for (const Node* node : graph_.nodes()) {
      auto& slot = result_[index_[node]];
      bool manual = (slot.has_value() && slot->IsManual()) ||
                    node->opcode() == Opcode::kPartitionId ||
                    (node->opcode() == Opcode::kCustomCall &&
                     node->attrs().custom_call_target == kFullToShardShapeTarget);
      const bool leaves = node->opcode() == Opcode::kCustomCall &&
                          node->attrs().custom_call_target == kShardToFullShapeTarget;
      if (!leaves) {
        for (const Node* operand : node->operands()) {
          const auto& s = result_[index_[operand]];
          manual |= s.has_value() && s->IsManual();
        }
      }
      if (manual) slot = Sharding::Manual();
    }
  }

  bool Assign(const Node* node, std::optional<Sharding> s) {
    auto& slot = result_[index_[node]];
    if (slot.has_value() || !s.has_value() || node->shape().is_tuple()) return false;
    slot = std::move(s);
    return true;
  }

  const std::optional<Sharding>& Of(const Node* node) { return result_[index_[node]]; }

  // The merge of two candidate shardings for one node. When they conflict, the one with more
  // tiles wins (more parallelism, smaller local buffers) and `a` wins ties; callers pass
  // candidates in operand (forward) or user (backward) order, so the first one wins.
  std::optional<Sharding> Merge(std::optional<Sharding> a, const std::optional<Sharding>& b,
                                int64_t rank) {
    // A manual value says nothing about the global values around its region.
    if (a.has_value() && a->IsManual()) a.reset();
    if (b.has_value() && b->IsManual()) return a;
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
      // Operands of another rank are the scalar predicate of select or the bounds of clamp;
      // their (replicated) sharding says nothing about the result's dims.
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
      case Opcode::kSort:
        // A one-operand sort (an array result; tuple results take shardings from their
        // get-tuple-element users): the sorted dim is whole on every device.
        if (!in) return std::nullopt;
        return PartiallyReplicate(*in, rank, node.attrs().dimensions);
      case Opcode::kReduce:
        // Tiles of the reduced dims become replication: after the all-reduce every device of
        // such a group holds the same result.
        if (!in) return std::nullopt;
        return Project(*in,
                       AllDimsExcept(node.operand(0)->shape().rank(), node.attrs().dimensions));
      case Opcode::kDot: {
        // Each operand is lifted into the iteration space and projected onto the output dims:
        // batch and lhs free dims come from the lhs, batch and rhs free dims from the rhs, and
        // a tiled contracting dim turns into replication of the result (its partial sums are
        // all-reduced by the partitioner, so the result itself is not split along it).
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
    // slice, pad, concatenate, dynamic-slice, dynamic-update-slice: a dim whose extent changes
    // has tile boundaries at other elements on each side, so only the untouched dims keep the
    // operand's tiling (HandleDataMovement gathers the changed dims for the same reason).
    if (IsDimPreserving(op) && in) return PartiallyReplicate(*in, rank, ChangedDims(node));
    return std::nullopt;
  }

  // What `user` implies for its operand `operand_index`.
  std::optional<Sharding> FromUser(const Node& user, int64_t operand_index) {
    const std::optional<Sharding>& out = Of(&user);
    if (!out.has_value() || user.shape().is_tuple() || out->IsManual()) return std::nullopt;
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
      case Opcode::kSort:
        return PartiallyReplicate(*out, operand_shape.rank(), user.attrs().dimensions);
      case Opcode::kReduce:
        // Operand 1 is the scalar init value: nothing to infer.
        if (operand_index != 0) return std::nullopt;
        return Embed(*out, operand_shape.rank(),
                     AllDimsExcept(operand_shape.rank(), user.attrs().dimensions));
      case Opcode::kDot: {
        // The output never tiles contracting dims, so the operand gets them whole: a dot's
        // result alone never asks for a sharded contraction (and its partial sums).
        if (operand_index > 1) return std::nullopt;
        DotSpace space = MakeDotSpace(user);
        Sharding s = Embed(*out, space.rank, Iota(space.output_rank));
        return Project(s, operand_index == 0 ? space.lhs_to_space : space.rhs_to_space);
      }
      default:
        break;
    }
    if (IsDimPreserving(op)) {
      // Only operands laid out like the result learn from it: operand 0, every operand of a
      // concatenate and the update of a dynamic-update-slice. Pad values and start indices are
      // scalars and stay {replicated}.
      bool data_operand = operand_index == 0 || (op == Opcode::kConcatenate) ||
                          (op == Opcode::kDynamicUpdateSlice && operand_index == 1);
      if (!data_operand) return std::nullopt;
      return PartiallyReplicate(*out, operand_shape.rank(), ChangedDims(user));
    }
    return std::nullopt;
  }

  // The merge of what every user implies, in user order. users() lists a user once per use, so
  // multiply(x, x) offers its sharding more than once; merging a sharding with itself is a no-op.
  std::optional<Sharding> Backward(const Node& node) {
    if (Of(&node).has_value() || node.shape().is_tuple()) return std::nullopt;
    std::optional<Sharding> merged;
    for (const Node* user : node.users()) {
      for (int64_t i = 0; i < user->operand_count(); ++i) {
        if (user->operand(i) != &node) continue;
        if (user->opcode() == Opcode::kTuple) {
          // A tuple only carries its elements: element i learns from the tuple's own annotation
          // (`sharding={{...}, {...}}` on a root tuple) and from the get-tuple-element(i) users
          // of the tuple (JAX returns results as tuple -> get-tuple-element, with the output
          // sharding on the get-tuple-element).
          const std::optional<Sharding>& whole = Of(user);
          if (whole.has_value() && whole->IsTuple() &&
              static_cast<int64_t>(whole->tuple_elements().size()) == user->operand_count()) {
            merged = Merge(merged, whole->tuple_elements()[i], node.shape().rank());
          }
          for (const Node* element : user->users()) {
            if (element->opcode() == Opcode::kGetTupleElement &&
                element->attrs().tuple_index == i) {
              merged = Merge(merged, Of(element), node.shape().rank());
            }
          }
          continue;
        }
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
