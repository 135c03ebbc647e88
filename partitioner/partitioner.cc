#include "partitioner/partitioner.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "partitioner/internal/context.h"
#include "partitioner/propagation.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner {

namespace {

using internal::Context;
using internal::PValue;
using spmd::Sharding;

// Dispatches one global node to its op-family rule. The result may be in any sharding (a dot's
// may be a partial sum); Partition reshards it to `target` afterwards.
absl::StatusOr<PValue> PartitionNode(Context& ctx, const Node& node,
                                     const std::vector<PValue>& operands, const Sharding& target,
                                     SpmdProgram& program) {
  const Opcode op = node.opcode();
  if (IsElementwise(op)) return internal::HandleElementwise(ctx, node, operands, target);
  switch (op) {
    case Opcode::kParameter: {
      // A parameter is where the sharding becomes a contract with the caller: each device is fed
      // its padded shard (ShardedTensor::Split with `target`), so no collective is ever needed
      // here. Tuple parameters have no rule (they fall through to kUnimplemented).
      if (node.shape().is_tuple()) break;
      OpAttributes attrs = node.attrs();
      TESSEL_ASSIGN_OR_RETURN(
          Node * local, ctx.local().AddParameter(attrs.parameter_number,
                                                 LocalShape(node.shape(), target), node.name()));
      // XLA's iota spelling: O(rank) text however many devices the mesh has.
      local->set_sharding(target.ToString(Sharding::DeviceListFormat::kIota));
      int64_t number = attrs.parameter_number;
      if (static_cast<int64_t>(program.parameters.size()) <= number) {
        program.parameters.resize(number + 1);
      }
      program.parameters[number] = ShardedValue{node.shape(), target};
      return PValue{local, target, node.shape(), {}};
    }
    case Opcode::kConstant:
      return internal::HandleConstant(ctx, node, operands, target);
    case Opcode::kIota:
      return internal::HandleIota(ctx, node, operands, target);
    case Opcode::kRng:
      return internal::HandleRng(ctx, node, operands, target);
    case Opcode::kBroadcast:
      return internal::HandleBroadcast(ctx, node, operands, target);
    case Opcode::kTranspose:
      return internal::HandleTranspose(ctx, node, operands, target);
    case Opcode::kReshape:
      return internal::HandleReshape(ctx, node, operands, target);
    case Opcode::kSlice:
    case Opcode::kPad:
    case Opcode::kConcatenate:
    case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice:
      return internal::HandleDataMovement(ctx, node, operands, target);
    case Opcode::kGather:
      return internal::HandleGather(ctx, node, operands, target);
    case Opcode::kScatter:
      return internal::HandleScatter(ctx, node, operands, target);
    case Opcode::kReduce:
      return internal::HandleReduce(ctx, node, operands, target);
    case Opcode::kDot:
      return internal::HandleDot(ctx, node, operands, target);
    case Opcode::kTuple: {
      // No local tuple node here: the elements travel as PValues, so get-tuple-element is free
      // and only the root tuple is materialized (at the end of Partition).
      PValue tuple;
      tuple.global_shape = node.shape();
      tuple.sharding = target;
      tuple.elements = operands;
      // An annotated tuple (a root's output shardings) gets each array element in the sharding
      // it names, as XLA's partitioner reshards a root to its sharding.
      if (target.IsTuple() && target.tuple_elements().size() == operands.size()) {
        for (size_t i = 0; i < operands.size(); ++i) {
          if (operands[i].global_shape.is_tuple()) continue;
          TESSEL_ASSIGN_OR_RETURN(tuple.elements[i],
                                  ctx.ReshardValue(operands[i], target.tuple_elements()[i]));
        }
      }
      return tuple;
    }
    case Opcode::kGetTupleElement:
      // Only tuples built by tuple() carry elements; a get-tuple-element of anything else has
      // no rule.
      if (operands[0].elements.empty()) break;
      return operands[0].elements[node.attrs().tuple_index];
    default:
      break;
  }
  return absl::UnimplementedError(absl::StrCat("%", node.name(), ": no partitioning rule for ",
                                               OpcodeName(op), " ", node.shape().ToString()));
}

}  // namespace

absl::StatusOr<SpmdProgram> Partition(const Graph& graph, int64_t num_devices) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Sharding> shardings, ComputeShardings(graph, num_devices));
  SpmdProgram program;
  program.num_devices = num_devices;
  program.program = std::make_unique<Graph>(graph.name() + ".spmd");
  Context ctx(*program.program, num_devices);
  absl::flat_hash_map<const Node*, PValue> values;
  // Program order is topological, so every operand's PValue exists when its user is visited.
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const Node* node = graph.nodes()[i];
    // Collectives and partition-id only exist in per-device programs: their shapes are local
    // and their replica groups already global ids, so partitioning them again would be wrong.
    if (IsCollective(node->opcode()) || node->opcode() == Opcode::kPartitionId) {
      return absl::InvalidArgumentError(absl::StrCat("%", node->name(),
                                                     ": the graph is already partitioned (",
                                                     OpcodeName(node->opcode()), ")"));
    }
    std::vector<PValue> operands;
    for (const Node* operand : node->operands()) operands.push_back(values.at(operand));
    const Sharding& target = shardings[i];
    absl::StatusOr<PValue> result = PartitionNode(ctx, *node, operands, target, program);
    if (!result.ok()) {
      // Rules that already name an instruction ("%x: ...") are passed on as they are; the others
      // get this node's name, so every error says where it happened.
      if (absl::StrContains(result.status().message(), "%")) return result.status();
      return absl::Status(result.status().code(),
                          absl::StrCat("%", node->name(), ": ", result.status().message()));
    }
    if (node->shape().is_tuple()) {
      values[node] = *std::move(result);
      continue;
    }
    // Every non-tuple value leaves in its propagated sharding, which is always a plain tiling or
    // {replicated} (ComputeShardings), so a dot's partial sums are completed right here and
    // users never see an unreduced operand from another node.
    absl::StatusOr<PValue> moved = ctx.ReshardValue(*result, target);
    if (!moved.ok()) {
      return absl::Status(moved.status().code(),
                          absl::StrCat("%", node->name(), ": ", moved.status().message()));
    }
    values[node] = *std::move(moved);
  }
  const Node* root = graph.root();
  if (root == nullptr) return absl::InvalidArgumentError("the graph has no root");
  const PValue& out = values.at(root);
  if (root->shape().is_tuple()) {
    std::vector<Node*> elements;
    for (const PValue& e : out.elements) {
      if (e.local == nullptr) {
        return absl::UnimplementedError("nested tuple outputs are not supported");
      }
      elements.push_back(e.local);
      program.outputs.push_back(ShardedValue{e.global_shape, e.sharding});
    }
    TESSEL_ASSIGN_OR_RETURN(Node * tuple, ctx.Add(Opcode::kTuple, std::move(elements)));
    program.program->set_root(tuple);
  } else {
    program.program->set_root(out.local);
    program.outputs.push_back(ShardedValue{out.global_shape, out.sharding});
  }
  return program;
}

// A std::map, so `tessel partition --stats` lists the kinds in a stable (sorted) order.
int64_t InferNumPartitions(const Graph& graph) {
  int64_t n = 1;
  for (const Node* node : graph.nodes()) {
    if (node->sharding().empty()) continue;
    absl::StatusOr<spmd::Sharding> s = spmd::ParseSharding(node->sharding());
    if (!s.ok()) continue;
    for (int64_t id : s->device_list()) n = std::max(n, id + 1);
    if (s->unique_device()) n = std::max(n, *s->unique_device() + 1);
  }
  return n;
}

std::map<std::string, CollectiveCount> CountCollectives(const Graph& program) {
  std::map<std::string, CollectiveCount> counts;
  for (const Node* node : program.nodes()) {
    if (!IsCollective(node->opcode())) continue;
    CollectiveCount& c = counts[OpcodeName(node->opcode())];
    ++c.count;
    c.result_bytes += node->shape().byte_size();
  }
  return counts;
}

}  // namespace tessel::partitioner
