#include "tessel/partitioner/partitioner.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/while_loop_analysis.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner {

namespace {

using internal::Context;
using internal::PValue;
using spmd::Sharding;

// Dispatches one global node to its op-family rule. The result may be in any sharding (a dot's
// may be a partial sum); Partition reshards it to `target` afterwards.
absl::StatusOr<PValue> PartitionNode(Context& ctx, const Node& node,
                                     const std::vector<PValue>& operands, const Sharding& target,
                                     SpmdProgram& program, bool is_entry) {
  const Opcode op = node.opcode();
  if (IsElementwise(op)) return internal::HandleElementwise(ctx, node, operands, target);
  switch (op) {
    case Opcode::kParameter: {
      // A parameter is where the sharding becomes a contract with the caller: each device is fed
      // its padded shard (ShardedTensor::Split with `target`), so no collective is ever needed
      // here. A tuple parameter is the loop state or branch operand of a called computation
      // (PartitionCalled); the entry's tuple parameters have no rule (kUnimplemented below).
      if (node.shape().is_tuple()) {
        if (is_entry) break;
        TESSEL_ASSIGN_OR_RETURN(
            Node * local,
            ctx.local().AddParameter(node.attrs().parameter_number,
                                     internal::LocalTupleShape(node.shape(), target), node.name()));
        PValue tuple{local, target, node.shape(), {}};
        for (size_t i = 0; i < node.shape().tuple_shapes().size(); ++i) {
          OpAttributes gte;
          gte.tuple_index = static_cast<int64_t>(i);
          TESSEL_ASSIGN_OR_RETURN(Node * element, ctx.Add(Opcode::kGetTupleElement, {local}, gte));
          const Sharding e = target.IsTuple() ? target.tuple_elements()[i] : Sharding::Replicate();
          tuple.elements.push_back(PValue{element, e, node.shape().tuple_shapes()[i], {}});
        }
        return tuple;
      }
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
    case Opcode::kSort:
    case Opcode::kTopK:
      return internal::HandleSort(ctx, node, operands, target);
    case Opcode::kDot:
      return internal::HandleDot(ctx, node, operands, target);
    case Opcode::kConvolution:
      return internal::HandleConvolution(ctx, node, operands, target);
    case Opcode::kReduceWindow:
      return internal::HandleReduceWindow(ctx, node, operands, target);
    case Opcode::kSelectAndScatter:
      return internal::HandleSelectAndScatter(ctx, node, operands, target);
    case Opcode::kReverse:
      return internal::HandleReverse(ctx, node, operands, target);
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
    case Opcode::kWhile:
      return internal::HandleWhile(ctx, node, operands, target);
    case Opcode::kConditional:
      return internal::HandleConditional(ctx, node, operands, target);
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

// Whether a partial-sum result may stay unreduced into its user: its only user is a floating
// add of the same shape and target sharding (HandleElementwise's AddPartialSums then adds the
// pieces locally when the other operand is a partial sum alike, and completes it otherwise), so
// a chain of partial sums costs one reduction instead of one per term.
bool KeepUnreduced(const Node& node, const PValue& result, const std::vector<Sharding>& shardings,
                   const absl::flat_hash_map<const Node*, int64_t>& index) {
  const Sharding& s = result.sharding;
  const bool unreduced =
      s.IsUnreduced() || (s.IsTiled() && s.SubgroupDim(spmd::SubgroupType::kUnreduced) >= 0);
  if (!unreduced || node.users().size() != 1 || !IsFloating(node.shape().dtype())) return false;
  const Node* user = node.users()[0];
  return user->opcode() == Opcode::kAdd && user->shape() == node.shape() &&
         shardings[index.at(user)] == shardings[index.at(&node)];
}

// A node of a manual region: already per device, so it is copied into the local program as it
// is (shape, attributes, the user's own collectives), as XLA's partitioner passes manual
// instructions through. Operands from outside the region (a constant, an iota) are used whole:
// inside the region every device sees them as its own.
absl::StatusOr<PValue> PartitionManualNode(Context& ctx, const Node& node,
                                           const std::vector<PValue>& operands) {
  const Opcode op = node.opcode();
  if (op == Opcode::kTuple) {
    PValue tuple{nullptr, Sharding::Manual(), node.shape(), operands};
    return tuple;
  }
  if (op == Opcode::kGetTupleElement && !operands[0].elements.empty()) {
    return operands[0].elements[node.attrs().tuple_index];
  }
  if (op == Opcode::kParameter || node.shape().is_tuple()) {
    return absl::UnimplementedError(absl::StrCat("%", node.name(), ": a manual ", OpcodeName(op),
                                                 " ", node.shape().ToString(),
                                                 " is not supported"));
  }
  if (op == Opcode::kCustomCall) {
    // SPMDFullToShardShape: the operand is already in the tiling it names (its propagated
    // sharding), so each device's shard is its local buffer; no node is needed.
    const PValue& in = operands[0];
    const Shape local = LocalShape(in.global_shape, in.sharding);
    if (in.sharding.IsManual() || local != node.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("%", node.name(), ": custom-call \"", node.attrs().custom_call_target,
                       "\" returns ", node.shape().ToString(), " but its operand's sharding ",
                       in.sharding.ToString(), " gives shards of ", local.ToString(),
                       " (annotate the operand with the region's "
                       "input sharding)"));
    }
    return PValue{in.local, Sharding::Manual(), node.shape(), {}};
  }
  std::vector<Node*> locals;
  for (const PValue& operand : operands) {
    if (operand.local == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "%", node.name(), ": a tuple operand of a manual ", OpcodeName(op), " is not supported"));
    }
    if (operand.sharding.IsManual()) {
      locals.push_back(operand.local);
      continue;
    }
    TESSEL_ASSIGN_OR_RETURN(Node * whole, ctx.Reshard(operand, Sharding::Replicate()));
    locals.push_back(whole);
  }
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.local().AddNode(op, node.shape(), std::move(locals),
                                                            node.attrs(), node.name()));
  return PValue{local, Sharding::Manual(), node.shape(), {}};
}

// SPMDShardToFullShape: each device's manual value is its shard of the global result under the
// node's own sharding (XLA's rule), so the local buffer is passed on with that sharding.
absl::StatusOr<PValue> PartitionShardToFull(const Node& node, const PValue& in,
                                            const Sharding& target) {
  const Shape local = LocalShape(node.shape(), target);
  if (!in.sharding.IsManual() || local != in.global_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "%", node.name(), ": custom-call \"", node.attrs().custom_call_target, "\" takes ",
        in.global_shape.ToString(), " from ", in.sharding.ToString(), " but its sharding ",
        target.ToString(), " has shards of ", local.ToString(), " (a manual value is expected)"));
  }
  return PValue{in.local, target, node.shape(), {}};
}

// Partitions every node of `graph` (shardings from ComputeShardings, indexed like its nodes)
// into ctx.local(); returns the root's partitioned value.
absl::StatusOr<PValue> PartitionNodes(Context& ctx, const Graph& graph,
                                      const std::vector<Sharding>& shardings, SpmdProgram& program,
                                      bool is_entry) {
  absl::flat_hash_map<const Node*, PValue> values;
  absl::flat_hash_map<const Node*, int64_t> index;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) index[graph.nodes()[i]] = i;
  // Program order is topological, so every operand's PValue exists when its user is visited.
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const Node* node = graph.nodes()[i];
    const Sharding& target = shardings[i];
    ctx.set_current(node);
    std::vector<PValue> operands;
    for (const Node* operand : node->operands()) operands.push_back(values.at(operand));
    if (target.IsManual()) {
      absl::StatusOr<PValue> local = PartitionManualNode(ctx, *node, operands);
      if (!local.ok()) return local.status();
      values[node] = *std::move(local);
      continue;
    }
    // Collectives and partition-id outside a manual region only exist in per-device programs:
    // their shapes are local and their replica groups already global ids, so partitioning them
    // again would be wrong.
    if (IsCollective(node->opcode()) || node->opcode() == Opcode::kPartitionId) {
      return absl::InvalidArgumentError(absl::StrCat("%", node->name(),
                                                     ": the graph is already partitioned (",
                                                     OpcodeName(node->opcode()), ")"));
    }
    absl::StatusOr<PValue> result =
        node->opcode() == Opcode::kCustomCall
            ? PartitionShardToFull(*node, operands[0], target)
            : PartitionNode(ctx, *node, operands, target, program, is_entry);
    if (!result.ok()) {
      // Rules that already name an instruction ("%x: ...") are passed on as they are; the others
      // get this node's name, so every error says where it happened.
      if (absl::StrContains(result.status().message(), "%")) return result.status();
      return absl::Status(result.status().code(),
                          absl::StrCat("%", node->name(), ": ", result.status().message()));
    }
    ctx.set_origin(result->local, node);
    if (node->shape().is_tuple() || KeepUnreduced(*node, *result, shardings, index)) {
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
    ctx.set_origin(moved->local, node);
    values[node] = *std::move(moved);
  }
  const Node* root = graph.root();
  if (root == nullptr) return absl::InvalidArgumentError("the graph has no root");
  return values.at(root);
}

}  // namespace

namespace internal {

absl::StatusOr<std::shared_ptr<const Graph>> PartitionCalled(
    const Graph& computation, int64_t num_devices, const Sharding& parameter, const Sharding& root,
    const mesh::CostModel* cost, PartitionExplanation* explain) {
  auto where = [&](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat("in computation %", computation.name(), ": ",
                                                    status.message()));
  };
  absl::StatusOr<std::vector<Sharding>> shardings =
      ComputeCalledShardings(computation, num_devices, parameter, root);
  if (!shardings.ok()) return where(shardings.status());
  auto local = std::make_shared<Graph>(computation.name() + ".spmd");
  Context ctx(*local, num_devices);
  ctx.set_cost_model(cost);
  ctx.set_explain(explain, computation.name());
  SpmdProgram unused;  // a called computation's parameters are not the program's
  absl::StatusOr<PValue> out = PartitionNodes(ctx, computation, *shardings, unused, false);
  if (!out.ok()) return where(out.status());
  ctx.set_current(computation.root());
  // The root leaves in the sharding the caller fixed: the loop state's, or the conditional's.
  Node* result = nullptr;
  if (computation.root()->shape().is_tuple()) {
    const std::vector<Sharding>& elements = root.tuple_elements();
    if (out->elements.size() != elements.size()) {
      TESSEL_ASSIGN_OR_RETURN(result, Materialize(ctx, *out));
    } else {
      std::vector<Node*> locals;
      for (size_t i = 0; i < elements.size(); ++i) {
        absl::StatusOr<Node*> moved = ctx.Reshard(out->elements[i], elements[i]);
        if (!moved.ok()) return where(moved.status());
        locals.push_back(*moved);
      }
      TESSEL_ASSIGN_OR_RETURN(result, ctx.Add(Opcode::kTuple, std::move(locals)));
    }
  } else {
    absl::StatusOr<Node*> moved = ctx.Reshard(*out, root);
    if (!moved.ok()) return where(moved.status());
    result = *moved;
  }
  local->set_root(result);
  return std::shared_ptr<const Graph>(std::move(local));
}

}  // namespace internal

namespace {

// The replica groups and source-target pairs the module itself writes (collectives of manual
// regions) must name devices of this partitioning, each device in exactly one group: a device
// in no group, or one past the device count, would wait for peers that never come (verify then
// timed out after a minute). The message names the collective, not the groups, which can hold
// millions of ids. Precondition: 1 <= num_devices <= mesh::kMaxDevices.
absl::Status CheckWrittenCollectives(const Graph& graph, int64_t num_devices,
                                     absl::flat_hash_map<const Graph*, bool>& checked) {
  if (!checked.emplace(&graph, true).second) return absl::OkStatus();
  for (const Node* node : graph.nodes()) {
    for (const auto& called : node->attrs().called_computations) {
      TESSEL_RETURN_IF_ERROR(CheckWrittenCollectives(*called, num_devices, checked));
    }
    if (!IsCollective(node->opcode())) continue;
    const std::string where = absl::StrCat("%", node->name(), ": ", OpcodeName(node->opcode()),
                                           " on ", num_devices, " devices");
    if (node->opcode() == Opcode::kCollectivePermute) {
      for (const auto& [source, target] : node->attrs().source_target_pairs) {
        if (source < 0 || source >= num_devices || target < 0 || target >= num_devices) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": source_target_pairs name {",
                                                         source, ",", target, "}, outside 0..",
                                                         num_devices - 1));
        }
      }
      continue;
    }
    const CollectiveDeviceList& groups = node->attrs().replica_groups;
    if (groups.empty()) continue;  // all devices
    std::vector<char> seen(static_cast<size_t>(num_devices), 0);
    int64_t listed = 0;
    for (const std::vector<int64_t>& group : groups) {
      for (int64_t id : group) {
        if (id < 0 || id >= num_devices) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": replica_groups name device ", id,
                                                         ", outside 0..", num_devices - 1));
        }
        if (seen[static_cast<size_t>(id)]++ > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": replica_groups name device ", id, " twice"));
        }
        ++listed;
      }
    }
    if (listed != num_devices) {
      const int64_t missing = std::find(seen.begin(), seen.end(), 0) - seen.begin();
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": replica_groups leave device ", missing,
                       " in no group (each device must be in exactly one)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<mesh::CostModel> DefaultCostModel(int64_t num_devices) {
  if (num_devices < 1 || num_devices > mesh::kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_devices must be in 1..", mesh::kMaxDevices, ", got ", num_devices));
  }
  const std::string n = absl::StrCat(num_devices);
  const std::string json =
      absl::StrCat(R"({"name": "default ring of )", n, R"( TPU v5p",
        "device_spec": {"name": "TPU v5p", "peak_tflops": {"bf16": 459},
                        "hbm_bytes": 102005473280, "hbm_bandwidth_gbytes_per_s": 2765},
        "ici": {"kind": "torus", "bandwidth_gbps": 800, "latency_us": 1.0},
        "slices": [{"shape": [)",
                   n, R"(], "wraparound": [true], "hosts": 1, "devices_per_host": )", n,
                   R"(, "host_shape": [)", n, R"(]}]})");
  TESSEL_ASSIGN_OR_RETURN(mesh::Topology topology,
                          mesh::ParseTopology(json, "<partitioner default>"));
  return mesh::CostModel::Create(topology);
}

absl::StatusOr<SpmdProgram> Partition(const Graph& graph, int64_t num_devices,
                                      const PartitionOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(
      std::vector<Sharding> shardings,
      ComputeShardings(graph, num_devices,
                       options.explain != nullptr ? &options.explain->propagation : nullptr));
  if (options.shardings != nullptr) *options.shardings = shardings;
  std::optional<mesh::CostModel> default_cost;
  const mesh::CostModel* cost = options.cost_model;
  if (cost == nullptr) {
    TESSEL_ASSIGN_OR_RETURN(default_cost, DefaultCostModel(num_devices));
    cost = &*default_cost;
  } else if (cost->topology().num_devices() != num_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cost model's topology \"", cost->topology().name(), "\" has ",
                     cost->topology().num_devices(), " devices; partitioning for ", num_devices));
  }
  {
    absl::flat_hash_map<const Graph*, bool> checked;
    TESSEL_RETURN_IF_ERROR(CheckWrittenCollectives(graph, num_devices, checked));
  }
  SpmdProgram program;
  program.num_devices = num_devices;
  program.program = std::make_unique<Graph>(graph.name() + ".spmd");
  Context ctx(*program.program, num_devices);
  ctx.set_cost_model(cost);
  ctx.set_explain(options.explain, graph.name());
  TESSEL_ASSIGN_OR_RETURN(PValue out, PartitionNodes(ctx, graph, shardings, program, true));
  const Node* root = graph.root();
  if (root->shape().is_tuple()) {
    // A tuple-shaped root that is not a tuple instruction (a tuple constant) arrives as one
    // value with no elements; the loop below would return an empty tuple and lose the outputs.
    if (out.elements.size() != root->shape().tuple_shapes().size()) {
      return absl::UnimplementedError(absl::StrCat(
          "%", root->name(), ": a tuple-shaped result that is not a tuple instruction (",
          OpcodeName(root->opcode()), ") is not supported; return tuple(...) of its elements"));
    }
    std::vector<Node*> elements;
    for (const PValue& e : out.elements) {
      if (e.sharding.IsManual()) {
        return absl::UnimplementedError(
            "an output of the module is a manual value (leave the manual region with "
            "SPMDShardToFullShape before returning it)");
      }
      if (e.local == nullptr) {
        return absl::UnimplementedError("nested tuple outputs are not supported");
      }
      elements.push_back(e.local);
      program.outputs.push_back(ShardedValue{e.global_shape, e.sharding});
    }
    TESSEL_ASSIGN_OR_RETURN(Node * tuple, ctx.Add(Opcode::kTuple, std::move(elements)));
    program.program->set_root(tuple);
  } else {
    if (out.sharding.IsManual()) {
      return absl::UnimplementedError(
          "the module's result is a manual value (leave the manual region with "
          "SPMDShardToFullShape before returning it)");
    }
    program.program->set_root(out.local);
    program.outputs.push_back(ShardedValue{out.global_shape, out.sharding});
  }
  return program;
}

namespace {

void Accumulate(const std::map<std::string, CollectiveCount>& from, int64_t times,
                std::map<std::string, CollectiveCount>& into) {
  for (const auto& [kind, c] : from) {
    into[kind].count += c.count * times;
    into[kind].result_bytes += c.result_bytes * times;
  }
}

int64_t TotalBytes(const std::map<std::string, CollectiveCount>& counts) {
  int64_t bytes = 0;
  for (const auto& [kind, c] : counts) bytes += c.result_bytes;
  return bytes;
}

}  // namespace

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
    for (const auto& called : node->attrs().called_computations) {
      Accumulate(CountCollectives(*called), 1, counts);
    }
    if (!IsCollective(node->opcode())) continue;
    CollectiveCount& c = counts[OpcodeName(node->opcode())];
    ++c.count;
    c.result_bytes += node->shape().byte_size();
  }
  return counts;
}

ExecutedCollectives CountExecutedCollectives(const Graph& program) {
  ExecutedCollectives out;
  for (const Node* node : program.nodes()) {
    const auto& called = node->attrs().called_computations;
    if (node->opcode() == Opcode::kWhile) {
      std::optional<int64_t> trips = ComputeWhileLoopTripCount(*node);
      out.unknown_trip_count |= !trips.has_value();
      for (const auto& comp : called) {
        ExecutedCollectives inner = CountExecutedCollectives(*comp);
        out.unknown_trip_count |= inner.unknown_trip_count;
        Accumulate(inner.counts, trips.value_or(1), out.counts);
      }
    } else if (node->opcode() == Opcode::kConditional) {
      std::optional<ExecutedCollectives> worst;
      for (const auto& comp : called) {
        ExecutedCollectives inner = CountExecutedCollectives(*comp);
        if (!worst.has_value() || TotalBytes(inner.counts) > TotalBytes(worst->counts)) {
          worst = std::move(inner);
        }
      }
      if (worst.has_value()) {
        out.unknown_trip_count |= worst->unknown_trip_count;
        Accumulate(worst->counts, 1, out.counts);
      }
    } else if (IsCollective(node->opcode())) {
      CollectiveCount& c = out.counts[OpcodeName(node->opcode())];
      ++c.count;
      c.result_bytes += node->shape().byte_size();
    }
  }
  return out;
}

namespace {

void ListLoops(const Graph& graph, const std::string& prefix, std::vector<LoopCollectives>& out) {
  for (const Node* node : graph.nodes()) {
    const auto& called = node->attrs().called_computations;
    const std::string name = prefix + node->name();
    if (node->opcode() == Opcode::kWhile) {
      LoopCollectives loop;
      loop.loop = name;
      loop.trip_count = ComputeWhileLoopTripCount(*node);
      for (const auto& comp : called) {
        Accumulate(CountExecutedCollectives(*comp).counts, 1, loop.per_iteration);
      }
      out.push_back(std::move(loop));
    }
    for (const auto& comp : called) ListLoops(*comp, name + "/", out);
  }
}

}  // namespace

std::vector<LoopCollectives> ListLoopCollectives(const Graph& program) {
  std::vector<LoopCollectives> out;
  ListLoops(program, "", out);
  return out;
}

}  // namespace tessel::partitioner
