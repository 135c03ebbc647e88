#include "tessel/core/executor.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tbb/info.h"
#include "tbb/task_arena.h"
#include "tessel/core/environment.h"
#include "tessel/core/internal/fusion.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"

namespace tessel {

namespace internal {

int64_t TotalBytes(const Literal& literal) {
  if (!literal.shape().is_tuple()) return literal.byte_size();
  int64_t bytes = 0;
  for (const Literal& e : literal.tuple_elements()) bytes += TotalBytes(e);
  return bytes;
}

}  // namespace internal

// What Executor::Prepare derives from the graph alone, for every run of it. Immutable once
// built, so runs on several threads (devices) may share one.
class PreparedProgram {
 public:
  explicit PreparedProgram(const Graph& g) : graph(g) {}

  const Graph& graph;
  bool fusion = false;  // ExecutorOptions::fusion it was planned with
  std::vector<Node*> parameters;
  std::vector<bool> reachable;  // per node id: the root depends on it
  internal::FusionPlan plan;    // empty without fusion
  // Per node id: operand uses by the nodes that run (+1 for the root), the initial
  // Slot::remaining_uses of every run.
  std::vector<int64_t> uses;
  // Per node id: a get-tuple-element that may move its element out of an owned tuple before
  // the tuple's last use: every user of the tuple is a get-tuple-element of another index (a
  // while body's parameter and the tuples of its state), so no one else reads that element.
  std::vector<bool> gte_moves;
  // The first collective or partition-id node to run, which needs a CollectiveBackend.
  const Node* first_collective = nullptr;
  // The computations of the reachable while and conditional nodes, prepared with the same
  // options; a failed one is reported when (and only if) a run calls it, as before preparing.
  // A few per graph, looked up by a linear search.
  std::vector<std::pair<const Graph*, absl::StatusOr<std::shared_ptr<const PreparedProgram>>>>
      called;

  // The prepared `comp`, or null when it is none of `called`.
  const absl::StatusOr<std::shared_ptr<const PreparedProgram>>* Called(const Graph* comp) const {
    for (const auto& [graph, program] : called) {
      if (graph == comp) return &program;
    }
    return nullptr;
  }
};

namespace {

using internal::KernelContext;
using internal::TotalBytes;

// The value of one node during a run.
struct Slot {
  std::optional<Literal> owned;       // computed values
  const Literal* borrowed = nullptr;  // arguments and constants (not copied)
  int64_t bytes = 0;                  // what this slot adds to the live bytes now
  int64_t remaining_uses = 0;         // operand uses by users not yet run (+1 for the root)
  const Literal& value() const { return borrowed != nullptr ? *borrowed : *owned; }
};

// Arguments must match the parameters one to one: numbers 0..N-1, same shapes.
absl::Status CheckArguments(const Graph& graph, absl::Span<Node* const> parameters,
                            absl::Span<const Literal* const> arguments) {
  if (parameters.size() != arguments.size()) {
    return absl::InvalidArgumentError(absl::StrCat("graph \"", graph.name(), "\" has ",
                                                   parameters.size(), " parameter(s) but ",
                                                   arguments.size(), " argument(s) were given"));
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Node& p = *parameters[i];
    if (p.attrs().parameter_number != static_cast<int64_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter %", p.name(), " has number ", p.attrs().parameter_number,
                       "; parameter numbers must be 0..", parameters.size() - 1, " without gaps"));
    }
    if (arguments[i]->shape() != p.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " has shape ", arguments[i]->shape().ToString(), " but parameter ", i,
          " (%", p.name(), ") has shape ", p.shape().ToString()));
    }
  }
  return absl::OkStatus();
}

// A donation names each argument's own literal, one entry per argument (or none).
absl::Status CheckDonation(const Graph& graph, absl::Span<const Literal* const> arguments,
                           const ExecutionDonation& donation) {
  if (donation.literals.empty()) return absl::OkStatus();
  if (donation.literals.size() != arguments.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph \"", graph.name(), "\": the donation has ", donation.literals.size(),
                     " entries for ", arguments.size(), " argument(s)"));
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (donation.literals[i] != nullptr && donation.literals[i] != arguments[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph \"", graph.name(), "\": donated literal ", i, " is not argument ", i, "'s"));
    }
  }
  return absl::OkStatus();
}

// Marks the nodes the root depends on. Nodes are in topological order, so one backward sweep
// suffices.
std::vector<bool> Reachable(const Graph& graph) {
  std::vector<bool> reachable(graph.num_nodes(), false);
  reachable[graph.root()->id()] = true;
  const std::vector<Node*>& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (!reachable[(*it)->id()]) continue;
    for (const Node* operand : (*it)->operands()) reachable[operand->id()] = true;
  }
  return reachable;
}

// Every node to run must satisfy its shape rule: kernels rely on it. Collectives and
// partition-id need a device and its peers: they run only in a multi-device runtime.
absl::Status CheckNode(const Node& node, const ExecutorOptions& options) {
  if (IsCollective(node.opcode()) && options.collectives == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("%", node.name(), ": ", OpcodeName(node.opcode()),
                     " needs a collective backend (ExecutorOptions::collectives); a "
                     "single-device run cannot execute it"));
  }
  // A manual region's boundary is a no-op only where the shard is the whole value (one device,
  // or a sharding that splits nothing); elsewhere it means "this device's shard", which only a
  // partitioned program (or partitioner::VerifyProgram's per-device reference) can compute.
  if (node.opcode() == Opcode::kCustomCall && node.operand_count() == 1 &&
      node.operand(0)->shape() != node.shape()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "%", node.name(), ": custom-call \"", node.attrs().custom_call_target, "\" from ",
        node.operand(0)->shape().ToString(), " to ", node.shape().ToString(),
        " has per-device semantics (a manual region); partition the module to run it"));
  }
  std::vector<const Shape*> shapes;
  for (const Node* operand : node.operands()) shapes.push_back(&operand->shape());
  absl::StatusOr<Shape> inferred = InferShape(node.opcode(), shapes, node.attrs(), node.shape());
  if (!inferred.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("%", node.name(), ": ", inferred.status().message()));
  }
  return absl::OkStatus();
}

// A prepared program runs only under the options it was planned with; its collectives need a
// backend (a program prepared by an executor with one may be run by one without).
absl::Status CheckRunnable(const PreparedProgram& prepared, const ExecutorOptions& options) {
  if (prepared.fusion != options.fusion) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph \"", prepared.graph.name(), "\" was prepared with fusion ",
                     prepared.fusion ? "on" : "off", " but this executor runs with fusion ",
                     options.fusion ? "on" : "off", "; prepare it with this executor"));
  }
  if (prepared.first_collective != nullptr) {
    return CheckNode(*prepared.first_collective, options);
  }
  return absl::OkStatus();
}

// Fills prepared.gte_moves (above): a tuple other than the root whose reachable users are all
// get-tuple-elements of distinct indices gives each its element by move.
void MarkMovableElements(const Graph& graph, PreparedProgram& prepared) {
  const std::vector<bool>& reachable = prepared.reachable;
  std::vector<bool> only_distinct_gtes(graph.num_nodes(), true);
  std::vector<std::vector<int64_t>> indices(graph.num_nodes());
  for (const Node* node : graph.nodes()) {
    if (!reachable[node->id()]) continue;
    for (const Node* operand : node->operands()) {
      const int id = operand->id();
      if (node->opcode() != Opcode::kGetTupleElement) {
        only_distinct_gtes[id] = false;
        continue;
      }
      std::vector<int64_t>& seen = indices[id];
      if (std::find(seen.begin(), seen.end(), node->attrs().tuple_index) != seen.end()) {
        only_distinct_gtes[id] = false;
      }
      seen.push_back(node->attrs().tuple_index);
    }
  }
  only_distinct_gtes[graph.root()->id()] = false;
  prepared.gte_moves.assign(graph.num_nodes(), false);
  for (const Node* node : graph.nodes()) {
    if (reachable[node->id()] && node->opcode() == Opcode::kGetTupleElement) {
      prepared.gte_moves[node->id()] = only_distinct_gtes[node->operand(0)->id()];
    }
  }
}

// Builds the prepared program of `graph`: the node checks, the fusion plan, the use counts and
// the called computations (recursively). Errors: as CheckNode, for the first bad node.
absl::StatusOr<std::shared_ptr<const PreparedProgram>> PrepareGraph(
    const Graph& graph, const ExecutorOptions& options) {
  if (graph.root() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("graph \"", graph.name(), "\" has no nodes"));
  }
  auto prepared = std::make_shared<PreparedProgram>(graph);
  prepared->fusion = options.fusion;
  prepared->parameters = graph.parameters();
  prepared->reachable = Reachable(graph);
  const std::vector<bool>& reachable = prepared->reachable;
  for (const Node* node : graph.nodes()) {
    if (!reachable[node->id()]) continue;
    TESSEL_RETURN_IF_ERROR(CheckNode(*node, options));
    if (prepared->first_collective == nullptr && IsCollective(node->opcode())) {
      prepared->first_collective = node;
    }
  }
  if (options.fusion) prepared->plan = internal::PlanFusion(graph, reachable);
  const internal::FusionPlan& plan = prepared->plan;
  // Uses are counted on the program that runs: a fusion uses each of its leaves once, and
  // nodes computed inside fusions use nothing.
  std::vector<int64_t>& uses = prepared->uses;
  uses.assign(graph.num_nodes(), 0);
  for (const Node* node : graph.nodes()) {
    const int id = node->id();
    if (!reachable[id] || (!plan.absorbed.empty() && plan.absorbed[id])) continue;
    if (!plan.fusion_of_root.empty() && plan.fusion_of_root[id] >= 0) {
      for (const Node* leaf : plan.fusions[plan.fusion_of_root[id]].leaves) ++uses[leaf->id()];
    } else if (!plan.folded_dot_of.empty() && plan.folded_dot_of[id] >= 0) {
      const internal::FoldedDot& dot = plan.folded_dots[plan.folded_dot_of[id]];
      ++uses[dot.lhs->id()];
      ++uses[dot.rhs->id()];
    } else if (!plan.dot_update_of.empty() && plan.dot_update_of[id] >= 0) {
      const internal::DotUpdate& update = plan.dot_updates[plan.dot_update_of[id]];
      for (const Node* used : {update.addend, update.scale, update.dot.lhs, update.dot.rhs}) {
        ++uses[used->id()];
      }
    } else {
      for (const Node* operand : node->operands()) ++uses[operand->id()];
    }
    if (node->opcode() == Opcode::kWhile || node->opcode() == Opcode::kConditional) {
      for (const std::shared_ptr<const Graph>& comp : node->attrs().called_computations) {
        if (prepared->Called(comp.get()) == nullptr) {
          prepared->called.emplace_back(comp.get(), PrepareGraph(*comp, options));
        }
      }
    }
  }
  ++uses[graph.root()->id()];  // the result outlives the run
  MarkMovableElements(graph, *prepared);
  return prepared;
}

// Runs a collective through the device's backend, or partition-id.
absl::StatusOr<Literal> EvaluateSpmd(const ExecutorOptions& options, const Node& node,
                                     const Literal& input) {
  const OpAttributes& attrs = node.attrs();
  CollectiveBackend& backend = *options.collectives;
  const int64_t device = options.device_id;
  switch (node.opcode()) {
    case Opcode::kAllReduce:
      return backend.AllReduce(device, input, attrs.replica_groups, attrs.reduce_kind);
    case Opcode::kAllGather:
      return backend.AllGather(device, input, attrs.replica_groups, attrs.dimensions[0]);
    case Opcode::kReduceScatter:
      return backend.ReduceScatter(device, input, attrs.replica_groups, attrs.dimensions[0],
                                   attrs.reduce_kind);
    case Opcode::kAllToAll:
      return backend.AllToAll(device, input, attrs.replica_groups, attrs.dimensions[0]);
    case Opcode::kCollectivePermute:
      return backend.CollectivePermute(device, input, attrs.source_target_pairs);
    default:
      break;
  }
  return absl::InternalError(absl::StrCat("executor: no collective ", OpcodeName(node.opcode())));
}

// Runs one node other than parameter, constant, tuple and get-tuple-element.
absl::StatusOr<Literal> Evaluate(const KernelContext& ctx, const Node& node,
                                 absl::Span<const Literal* const> operands) {
  const OpAttributes& attrs = node.attrs();
  const Shape& shape = node.shape();
  switch (node.opcode()) {
    case Opcode::kIota:
      return internal::Iota(ctx, shape, attrs.iota_dimension);
    case Opcode::kRng:
      return internal::Rng(ctx, *operands[0], *operands[1], attrs.rng_distribution, attrs.rng_seed,
                           shape);
    case Opcode::kAbs:
    case Opcode::kNegate:
    case Opcode::kExp:
    case Opcode::kLog:
    case Opcode::kTanh:
    case Opcode::kLogistic:
    case Opcode::kSqrt:
    case Opcode::kRsqrt:
    case Opcode::kSine:
    case Opcode::kCosine:
    case Opcode::kErf:
    case Opcode::kIsFinite:
    case Opcode::kPopcnt:
    case Opcode::kNot:
    case Opcode::kCopy:
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
      return internal::Unary(ctx, node.opcode(), *operands[0], shape);
    case Opcode::kReducePrecision:
      return internal::ReducePrecision(ctx, *operands[0], attrs.exponent_bits, attrs.mantissa_bits);
    case Opcode::kCustomCall:
      // CheckNode let only the identity case through (the shard is the whole value).
      return internal::Unary(ctx, Opcode::kCopy, *operands[0], shape);
    case Opcode::kAdd:
    case Opcode::kSubtract:
    case Opcode::kMultiply:
    case Opcode::kDivide:
    case Opcode::kMaximum:
    case Opcode::kMinimum:
    case Opcode::kPower:
    case Opcode::kAnd:
    case Opcode::kOr:
    case Opcode::kXor:
    case Opcode::kShiftLeft:
    case Opcode::kShiftRightLogical:
    case Opcode::kShiftRightArithmetic:
    case Opcode::kRemainder:
    case Opcode::kAtan2:
    case Opcode::kCompare:
      return internal::Binary(ctx, node.opcode(), attrs.comparison_direction, *operands[0],
                              *operands[1], shape);
    case Opcode::kSelect:
      return internal::Select(ctx, *operands[0], *operands[1], *operands[2], shape);
    case Opcode::kClamp:
      return internal::Clamp(ctx, *operands[0], *operands[1], *operands[2], shape);
    case Opcode::kBroadcast:
      return internal::Broadcast(ctx, *operands[0], attrs.dimensions, shape);
    case Opcode::kReshape:
      return internal::Reshape(*operands[0], shape);
    case Opcode::kTranspose:
      return internal::Transpose(ctx, *operands[0], attrs.dimensions);
    case Opcode::kSlice:
      return internal::Slice(ctx, *operands[0], attrs.slice, shape);
    case Opcode::kPad:
      return internal::Pad(ctx, *operands[0], *operands[1], attrs.padding, shape);
    case Opcode::kConcatenate:
      return internal::Concatenate(ctx, operands, attrs.dimensions[0], shape);
    case Opcode::kDynamicSlice:
      return internal::DynamicSlice(ctx, *operands[0], operands.subspan(1),
                                    attrs.dynamic_slice_sizes, shape);
    case Opcode::kDynamicUpdateSlice:
      return internal::DynamicUpdateSlice(ctx, *operands[0], *operands[1], operands.subspan(2));
    case Opcode::kGather:
      return internal::Gather(ctx, *operands[0], *operands[1], attrs.gather, shape);
    case Opcode::kScatter:
      return internal::Scatter(ctx, *operands[0], *operands[1], *operands[2], attrs.scatter,
                               attrs.reduce_kind, attrs.scatter_overwrite);
    case Opcode::kReduce:
      return internal::Reduce(ctx, *operands[0], *operands[1], attrs.dimensions, attrs.reduce_kind,
                              shape);
    case Opcode::kDot:
      return internal::Dot(ctx, *operands[0], *operands[1], attrs.dot, shape);
    case Opcode::kReverse:
      return internal::Reverse(ctx, *operands[0], attrs.dimensions);
    case Opcode::kConvolution:
      return internal::Convolution(ctx, *operands[0], *operands[1], attrs, shape);
    case Opcode::kReduceWindow:
      return internal::ReduceWindow(ctx, *operands[0], *operands[1], attrs.window,
                                    attrs.reduce_kind, shape);
    case Opcode::kSelectAndScatter:
      return internal::SelectAndScatter(ctx, *operands[0], *operands[1], *operands[2], attrs.window,
                                        attrs.comparison_direction, attrs.reduce_kind);
    case Opcode::kSort:
      return internal::Sort(operands, attrs.dimensions[0], attrs.sort_descending);
    case Opcode::kTopK:
      return internal::TopK(*operands[0], attrs.topk_k, attrs.topk_largest);
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kTuple:
    case Opcode::kGetTupleElement:
    case Opcode::kWhile:
    case Opcode::kConditional:
    case Opcode::kPartitionId:
    case Opcode::kAllReduce:
    case Opcode::kAllGather:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll:
    case Opcode::kCollectivePermute:
      break;
  }
  return absl::InternalError(absl::StrCat("executor: no kernel for ", OpcodeName(node.opcode())));
}

// One run of a prepared program: the slots of its nodes and the live-byte accounting.
class Execution {
 public:
  Execution(const PreparedProgram& prepared, absl::Span<const Literal* const> arguments,
            const ExecutorOptions& options)
      : prepared_(prepared),
        graph_(prepared.graph),
        arguments_(arguments),
        options_(options),
        slots_(graph_.num_nodes()),
        reachable_(prepared.reachable),
        plan_(prepared.plan) {
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].remaining_uses = prepared.uses[i];
    for (const Literal* argument : arguments_) live_bytes_ += TotalBytes(*argument);
    peak_bytes_ = live_bytes_;
  }

  absl::Status Execute(const KernelContext& ctx) {
    std::vector<const Literal*> operands;
    for (const Node* node : graph_.nodes()) {
      if (!reachable_[node->id()]) continue;
      if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed)) {
        return absl::CancelledError(absl::StrCat("the run was cancelled before %", node->name()));
      }
      if (Absorbed(*node)) {
        ++nodes_executed_;  // computed inside the fusion of one of its users
        continue;
      }
      if (const internal::Fusion* fusion = FusionOf(*node)) {
        TESSEL_RETURN_IF_ERROR(ExecuteFusion(ctx, *fusion));
        continue;
      }
      if (const internal::FoldedDot* dot = FoldedDotOf(*node)) {
        ExecuteFoldedDot(ctx, *node, *dot);
        continue;
      }
      if (const internal::DotUpdate* update = DotUpdateOf(*node)) {
        ExecuteDotUpdate(ctx, *node, *update);
        continue;
      }
      Slot& slot = slots_[node->id()];
      operands.clear();
      for (const Node* operand : node->operands()) {
        operands.push_back(&slots_[operand->id()].value());
      }
      int64_t new_bytes = 0;
      switch (node->opcode()) {
        case Opcode::kParameter: {
          // Arguments are counted as live from the start (the constructor); a donated one is owned
          // like an intermediate, so it is freed or reused at its last use.
          const int64_t number = node->attrs().parameter_number;
          if (number < static_cast<int64_t>(donated_.size()) && donated_[number].has_value()) {
            slot.bytes = TotalBytes(*donated_[number]);
            slot.owned = std::move(donated_[number]);
            donated_[number].reset();
          } else {
            slot.borrowed = arguments_[number];
          }
          break;
        }
        case Opcode::kConstant:
          slot.borrowed = &node->literal();
          slot.bytes = new_bytes = TotalBytes(node->literal());
          break;
        case Opcode::kTuple:
          new_bytes = MakeTuple(*node, slot);
          break;
        case Opcode::kGetTupleElement:
          new_bytes = GetTupleElement(*node, slot);
          break;
        case Opcode::kWhile:
        case Opcode::kConditional: {
          absl::StatusOr<Literal> value = node->opcode() == Opcode::kWhile
                                              ? RunWhile(ctx, *node, *operands[0])
                                              : RunConditional(ctx, *node, operands);
          if (!value.ok()) return value.status();
          slot.bytes = new_bytes = TotalBytes(*value);
          slot.owned = *std::move(value);
          break;
        }
        case Opcode::kPartitionId:
          slot.owned = Literal::Scalar<int32_t>(static_cast<int32_t>(options_.device_id));
          slot.bytes = new_bytes = TotalBytes(*slot.owned);
          break;
        case Opcode::kAllReduce:
        case Opcode::kAllGather:
        case Opcode::kReduceScatter:
        case Opcode::kAllToAll:
        case Opcode::kCollectivePermute: {
          absl::StatusOr<Literal> value = EvaluateSpmd(options_, *node, *operands[0]);
          if (!value.ok()) {
            return absl::Status(value.status().code(),
                                absl::StrCat("%", node->name(), ": ", value.status().message()));
          }
          slot.bytes = new_bytes = TotalBytes(*value);
          slot.owned = *std::move(value);
          break;
        }
        default: {
          TESSEL_ASSIGN_OR_RETURN(Literal value, Evaluate(ctx, *node, operands));
          slot.bytes = new_bytes = TotalBytes(value);
          slot.owned = std::move(value);
          ++kernels_;
          break;
        }
      }
      if (IsCollective(node->opcode()) || node->opcode() == Opcode::kPartitionId) ++kernels_;
      live_bytes_ += new_bytes;
      peak_bytes_ = std::max(peak_bytes_, live_bytes_);
      ++nodes_executed_;
      for (const Node* operand : node->operands()) Release(slots_[operand->id()]);
    }
    return absl::OkStatus();
  }

  // The root's value (a tuple stays one literal).
  Literal TakeResult() {
    Slot& root = slots_[graph_.root()->id()];
    // Not a conditional expression: with a const lvalue on one side its result is a prvalue
    // that clang copy-initializes, which copied the computed (perhaps donated) buffer.
    if (root.owned.has_value()) return std::move(*root.owned);
    return *root.borrowed;  // an argument or constant is the root: copied
  }

  std::vector<Literal> TakeOutputs() {
    Literal result = TakeResult();
    std::vector<Literal> outputs;
    if (result.shape().is_tuple()) {
      outputs = std::move(result.tuple_elements());
    } else {
      outputs.push_back(std::move(result));
    }
    return outputs;
  }

  // Takes the donated array arguments' buffers (after the checks: a run that fails in them leaves
  // them untouched). Precondition: donation.literals is empty or has one entry per argument,
  // each null or the literal its argument points to.
  void TakeDonations(ExecutionDonation& donation) {
    if (donation.literals.empty()) return;
    donated_.resize(donation.literals.size());
    for (size_t i = 0; i < donation.literals.size(); ++i) {
      Literal* literal = donation.literals[i];
      if (literal == nullptr || literal->shape().is_tuple()) continue;
      donated_[i] = std::move(*literal);
      ++donated_arguments_;
    }
    donation.taken = true;
  }

  // Takes the value of the run's one parameter (counted live already, from its pointer).
  void TakeArgument(Literal value) {
    donated_.resize(1);
    donated_[0] = std::move(value);
  }

  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t donated_arguments() const { return donated_arguments_; }
  int64_t donated_in_place() const { return donated_in_place_; }
  int64_t nodes_executed() const { return nodes_executed_; }
  int64_t kernels() const { return kernels_; }
  int64_t fusions() const { return fusions_; }
  int64_t in_place() const { return in_place_; }
  int64_t extra_outputs() const { return extra_outputs_; }

 private:
  bool Absorbed(const Node& node) const {
    return !plan_.absorbed.empty() && plan_.absorbed[node.id()];
  }
  const internal::Fusion* FusionOf(const Node& node) const {
    if (plan_.fusion_of_root.empty()) return nullptr;
    const int f = plan_.fusion_of_root[node.id()];
    return f < 0 ? nullptr : &plan_.fusions[f];
  }
  const internal::FoldedDot* FoldedDotOf(const Node& node) const {
    if (plan_.folded_dot_of.empty()) return nullptr;
    const int f = plan_.folded_dot_of[node.id()];
    return f < 0 ? nullptr : &plan_.folded_dots[f];
  }

  const internal::DotUpdate* DotUpdateOf(const Node& node) const {
    if (plan_.dot_update_of.empty()) return nullptr;
    const int u = plan_.dot_update_of[node.id()];
    return u < 0 ? nullptr : &plan_.dot_updates[u];
  }

  // Runs subtract `node` as its dot update: the addend (its buffer when this is its last use
  // and it is an intermediate, else a copy) minus scale * dot, in the dot's GEMM.
  void ExecuteDotUpdate(const KernelContext& ctx, const Node& node,
                        const internal::DotUpdate& update) {
    Slot& addend = slots_[update.addend->id()];
    Slot& scale = slots_[update.scale->id()];
    Slot& lhs = slots_[update.dot.lhs->id()];
    Slot& rhs = slots_[update.dot.rhs->id()];
    Slot& slot = slots_[node.id()];
    const bool in_place = addend.owned.has_value() && addend.remaining_uses == 1 &&
                          update.addend != update.dot.lhs && update.addend != update.dot.rhs;
    int64_t new_bytes = 0;
    const Literal* copy_from = nullptr;  // the GEMM's threads copy the addend block by block
    if (in_place) {
      slot.owned = std::move(*addend.owned);
      slot.bytes = addend.bytes;
      addend.bytes = 0;
      ++in_place_;
      if (update.addend->opcode() == Opcode::kParameter) ++donated_in_place_;
    } else {
      slot.owned = Literal::Uninitialized(node.shape());
      slot.bytes = new_bytes = TotalBytes(*slot.owned);
      copy_from = &addend.value();
    }
    const float alpha = -scale.value().data<float>()[0];
    internal::DotAccumulate(ctx, lhs.value(), rhs.value(), update.dot.dnums, alpha, copy_from,
                            *slot.owned);
    live_bytes_ += new_bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    ++nodes_executed_;
    ++kernels_;
    for (Slot* used : {&addend, &scale, &lhs, &rhs}) Release(*used);
  }

  // Runs `node` (a dot, or a transpose of one) as the dot `dot` of transpose folding.
  void ExecuteFoldedDot(const KernelContext& ctx, const Node& node,
                        const internal::FoldedDot& dot) {
    Slot& lhs = slots_[dot.lhs->id()];
    Slot& rhs = slots_[dot.rhs->id()];
    Slot& slot = slots_[node.id()];
    slot.owned = internal::Dot(ctx, lhs.value(), rhs.value(), dot.dnums, node.shape());
    slot.bytes = TotalBytes(*slot.owned);
    live_bytes_ += slot.bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    ++nodes_executed_;
    ++kernels_;
    Release(lhs);
    Release(rhs);
  }

  // Per output of `fusion` (0 the root, 1 + e extra output e): the index of the leaf whose
  // buffer it is written into, or -1 for a new buffer. A leaf qualifies when it is read only
  // elementwise, its value dies here (an owned intermediate, or a donated argument), it has the
  // output's shape and the loop's order allows it (internal::MayWriteInto); each leaf serves
  // one output. Extra outputs choose first (only leaves read no later than their instruction
  // qualify, while the root may take any), and donated arguments before intermediates, so a
  // parameter's new value keeps its buffer (the lazy runtime's tensors keep their storage).
  absl::InlinedVector<int, 4> ChooseDonorLeaves(const internal::Fusion& fusion) {
    const size_t outputs = 1 + fusion.extra_outputs.size();
    absl::InlinedVector<int, 4> donor_leaf(outputs, -1);
    for (const bool arguments_only : {true, false}) {
      for (size_t n = 1; n <= outputs; ++n) {
        const size_t k = n % outputs;
        const Shape& shape = internal::FusionOutput(fusion, static_cast<int>(k)).shape();
        for (size_t l = 0; l < fusion.leaves.size() && donor_leaf[k] < 0; ++l) {
          const Slot& leaf = slots_[fusion.leaves[l]->id()];
          if ((arguments_only && fusion.leaves[l]->opcode() != Opcode::kParameter) ||
              !leaf.owned.has_value() || leaf.remaining_uses != 1 || leaf.owned->shape() != shape ||
              std::find(donor_leaf.begin(), donor_leaf.end(), static_cast<int>(l)) !=
                  donor_leaf.end() ||
              !internal::MayWriteInto(fusion, static_cast<int>(k), static_cast<int>(l))) {
            continue;
          }
          donor_leaf[k] = static_cast<int>(l);
        }
      }
    }
    return donor_leaf;
  }

  // Runs one loop fusion and fills the slots of its root and of its further outputs, each
  // written into a dead leaf's buffer where ChooseDonorLeaves finds one (the Adam update of a
  // donated parameter writes the parameter and both moments in place).
  absl::Status ExecuteFusion(const KernelContext& ctx, const internal::Fusion& fusion) {
    std::vector<const Literal*> leaves;
    for (const Node* leaf : fusion.leaves) leaves.push_back(&slots_[leaf->id()].value());
    const absl::InlinedVector<int, 4> donor_leaf = ChooseDonorLeaves(fusion);
    absl::InlinedVector<Literal*, 4> donated;
    for (int l : donor_leaf) {
      donated.push_back(l < 0 ? nullptr : &*slots_[fusion.leaves[l]->id()].owned);
    }
    TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> values,
                            internal::RunFusion(ctx, fusion, leaves, donated));
    for (int l : donor_leaf) {
      if (l < 0) continue;
      // The buffer changed owner: its bytes are the output's now, not the leaf's.
      Slot& donor = slots_[fusion.leaves[l]->id()];
      live_bytes_ -= donor.bytes;
      donor.bytes = 0;
      ++in_place_;
      // An owned parameter is a donated argument (ExecutionDonation).
      if (fusion.leaves[l]->opcode() == Opcode::kParameter) ++donated_in_place_;
    }
    // The root, then the further outputs (computed in the loop, read after it).
    for (size_t v = 0; v < values.size(); ++v) {
      const Node& node = internal::FusionOutput(fusion, static_cast<int>(v));
      Slot& slot = slots_[node.id()];
      slot.bytes = TotalBytes(values[v]);
      slot.owned = std::move(values[v]);
      live_bytes_ += slot.bytes;
    }
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    ++nodes_executed_;
    ++kernels_;
    ++fusions_;
    extra_outputs_ += static_cast<int64_t>(fusion.extra_outputs.size());
    for (const Node* leaf : fusion.leaves) Release(slots_[leaf->id()]);
    return absl::OkStatus();
  }

  // Called once per operand use after the user ran; frees the value after its last use.
  void Release(Slot& slot) {
    if (--slot.remaining_uses > 0) return;
    live_bytes_ -= slot.bytes;
    slot.bytes = 0;
    slot.owned.reset();
    slot.borrowed = nullptr;
  }

  // True when `node` holds every remaining use of `operand`'s value, so the value may be moved.
  bool CanSteal(const Node& node, const Node& operand) const {
    const Slot& slot = slots_[operand.id()];
    if (!slot.owned.has_value()) return false;
    int64_t uses = std::count(node.operands().begin(), node.operands().end(), &operand);
    return slot.remaining_uses == uses;
  }

  // A tuple takes over operand buffers at their last use (no new bytes) and copies the rest.
  // Returns the bytes newly allocated.
  int64_t MakeTuple(const Node& node, Slot& slot) {
    std::vector<Literal> elements;
    int64_t new_bytes = 0;
    const std::vector<Node*>& ops = node.operands();
    for (size_t i = 0; i < ops.size(); ++i) {
      Slot& operand = slots_[ops[i]->id()];
      // Move only at the operand's last occurrence in this tuple.
      bool last_occurrence = std::find(ops.begin() + i + 1, ops.end(), ops[i]) == ops.end();
      if (last_occurrence && CanSteal(node, *ops[i])) {
        elements.push_back(std::move(*operand.owned));
        int64_t moved = TotalBytes(elements.back());
        operand.bytes -= moved;
      } else {
        elements.push_back(operand.value());
        new_bytes += TotalBytes(elements.back());
      }
    }
    slot.owned = Literal::Tuple(std::move(elements));
    slot.bytes = TotalBytes(*slot.owned);
    return new_bytes;
  }

  // Runs called computation `comp` of `caller` on `argument` with this run's options (the same
  // device and collective backend: a partitioned loop body's collectives run on every device in
  // the same order). The called run's peak counts on top of what is live here.
  // `owned`, if not null, is `argument` given up to the called run (a while body's state): its
  // parameter then owns the value, and the elements move out of it instead of being copied.
  absl::StatusOr<Literal> RunCalled(const KernelContext& ctx, const Node& caller, const Graph& comp,
                                    const Literal& argument, Literal* owned = nullptr) {
    const Literal* args[] = {&argument};
    absl::Status status = absl::OkStatus();
    const PreparedProgram* called = nullptr;
    if (const auto* program = prepared_.Called(&comp); program == nullptr) {
      status = absl::InternalError("executor: called computation was not prepared");
    } else if (!program->ok()) {
      status = program->status();
    } else {
      called = (*program)->get();
      status = CheckRunnable(*called, options_);
    }
    std::optional<Execution> run;
    if (status.ok()) {
      run.emplace(*called, args, options_);
      if (owned != nullptr) run->TakeArgument(std::move(*owned));
      status = run->Execute(ctx);
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("%", caller.name(), ": in %", comp.name(),
                                                      ": ", status.message()));
    }
    peak_bytes_ = std::max(peak_bytes_, live_bytes_ + run->peak_bytes());
    nodes_executed_ += run->nodes_executed();
    kernels_ += run->kernels();
    fusions_ += run->fusions();
    in_place_ += run->in_place();
    extra_outputs_ += run->extra_outputs();
    return run->TakeResult();
  }

  // XLA while: state = init; while condition(state): state = body(state).
  absl::StatusOr<Literal> RunWhile(const KernelContext& ctx, const Node& node,
                                   const Literal& init) {
    const Graph& condition = *node.attrs().called_computations[0];
    const Graph& body = *node.attrs().called_computations[1];
    Literal state = init;
    for (int64_t iterations = 0;; ++iterations) {
      if (options_.deadline != absl::InfiniteFuture() && absl::Now() > options_.deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("%", node.name(), ": the run reached its deadline after ", iterations,
                         " iterations of this while loop (does its condition ever turn false?)"));
      }
      TESSEL_ASSIGN_OR_RETURN(Literal go, RunCalled(ctx, node, condition, state));
      if (go.data<bool>()[0] == false) return state;
      TESSEL_ASSIGN_OR_RETURN(state, RunCalled(ctx, node, body, state, &state));
    }
  }

  // XLA conditional: a pred selects branch 0 (true) or 1 (false); an s32 index selects that
  // branch, and an index outside 0..N-1 the last one. Branch k runs on operand k+1.
  absl::StatusOr<Literal> RunConditional(const KernelContext& ctx, const Node& node,
                                         const std::vector<const Literal*>& operands) {
    const auto& branches = node.attrs().called_computations;
    const Literal& selector = *operands[0];
    const int64_t n = static_cast<int64_t>(branches.size());
    int64_t k = n - 1;
    if (selector.shape().dtype() == DType::kPred) {
      k = selector.data<bool>()[0] ? 0 : 1;
    } else {
      const int64_t index = selector.data<int32_t>()[0];
      if (index >= 0 && index < n) k = index;
    }
    return RunCalled(ctx, node, *branches[k], *operands[k + 1]);
  }

  int64_t GetTupleElement(const Node& node, Slot& slot) {
    const Node& tuple = *node.operand(0);
    Slot& operand = slots_[tuple.id()];
    const int64_t index = node.attrs().tuple_index;
    if (CanSteal(node, tuple) || (operand.owned.has_value() && prepared_.gte_moves[node.id()])) {
      slot.owned = std::move(operand.owned->tuple_elements()[index]);
      slot.bytes = TotalBytes(*slot.owned);
      operand.bytes -= slot.bytes;
      return 0;
    }
    slot.owned = operand.value().tuple_elements()[index];
    slot.bytes = TotalBytes(*slot.owned);
    return slot.bytes;
  }

  const PreparedProgram& prepared_;
  const Graph& graph_;
  absl::Span<const Literal* const> arguments_;
  const ExecutorOptions& options_;
  std::vector<Slot> slots_;
  const std::vector<bool>& reachable_;
  const internal::FusionPlan& plan_;  // empty without ExecutorOptions::fusion
  // The donated arguments' literals, by parameter number, until their parameter node runs.
  std::vector<std::optional<Literal>> donated_;
  int64_t donated_arguments_ = 0;
  int64_t donated_in_place_ = 0;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t nodes_executed_ = 0;
  int64_t kernels_ = 0;
  int64_t fusions_ = 0;
  int64_t in_place_ = 0;
  int64_t extra_outputs_ = 0;
};

}  // namespace

Executor::Executor(ExecutorOptions options) : options_(options) {
  absl::StatusOr<std::optional<bool>> fusion = GetBoolEnv("TESSEL_EXECUTOR_FUSION");
  if (!fusion.ok()) {
    env_status_ = fusion.status();
  } else if (fusion->has_value() && !**fusion) {
    options_.fusion = false;
  }
}

absl::StatusOr<std::vector<Literal>> Executor::Run(const Graph& graph,
                                                   absl::Span<const Literal> arguments,
                                                   ExecutionStats* stats) const {
  std::vector<const Literal*> pointers;
  pointers.reserve(arguments.size());
  for (const Literal& argument : arguments) pointers.push_back(&argument);
  return RunBorrowed(graph, pointers, stats);
}

absl::StatusOr<std::shared_ptr<const PreparedProgram>> Executor::Prepare(const Graph& graph) const {
  if (graph.root() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("graph \"", graph.name(), "\" has no nodes"));
  }
  TESSEL_RETURN_IF_ERROR(env_status_);
  return PrepareGraph(graph, options_);
}

absl::StatusOr<std::vector<Literal>> Executor::RunBorrowed(
    const Graph& graph, absl::Span<const Literal* const> arguments, ExecutionStats* stats,
    ExecutionDonation* donation) const {
  // The checks of the arguments come before those of the nodes, as they always did.
  if (graph.root() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("graph \"", graph.name(), "\" has no nodes"));
  }
  TESSEL_RETURN_IF_ERROR(env_status_);
  TESSEL_RETURN_IF_ERROR(CheckArguments(graph, graph.parameters(), arguments));
  if (donation != nullptr) {
    donation->taken = false;
    TESSEL_RETURN_IF_ERROR(CheckDonation(graph, arguments, *donation));
  }
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedProgram> prepared,
                          PrepareGraph(graph, options_));
  return RunBorrowed(*prepared, arguments, stats, donation);
}

absl::StatusOr<std::vector<Literal>> Executor::Run(const PreparedProgram& prepared,
                                                   absl::Span<const Literal> arguments,
                                                   ExecutionStats* stats) const {
  std::vector<const Literal*> pointers;
  pointers.reserve(arguments.size());
  for (const Literal& argument : arguments) pointers.push_back(&argument);
  return RunBorrowed(prepared, pointers, stats);
}

absl::StatusOr<std::vector<Literal>> Executor::RunBorrowed(
    const PreparedProgram& prepared, absl::Span<const Literal* const> arguments,
    ExecutionStats* stats, ExecutionDonation* donation) const {
  const Graph& graph = prepared.graph;
  TESSEL_RETURN_IF_ERROR(env_status_);
  TESSEL_RETURN_IF_ERROR(CheckRunnable(prepared, options_));
  TESSEL_RETURN_IF_ERROR(CheckArguments(graph, prepared.parameters, arguments));
  if (donation != nullptr) {
    donation->taken = false;
    TESSEL_RETURN_IF_ERROR(CheckDonation(graph, arguments, *donation));
  }
  Execution run(prepared, arguments, options_);
  if (donation != nullptr) run.TakeDonations(*donation);
  absl::Status status;
  try {
    if (options_.num_threads == 1) {
      status = run.Execute(KernelContext{1});
    } else {
      // More threads than cores would only wait for workers TBB never starts.
      const int cores = tbb::info::default_concurrency();
      tbb::task_arena arena(options_.num_threads > 0 ? std::min(options_.num_threads, cores)
                                                     : cores);
      arena.execute([&] { status = run.Execute(KernelContext{arena.max_concurrency()}); });
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory running graph \"", graph.name(), "\""));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("running graph \"", graph.name(), "\" failed: ", e.what()));
  }
  TESSEL_RETURN_IF_ERROR(status);
  if (stats != nullptr) {
    stats->peak_live_bytes = run.peak_bytes();
    stats->nodes_executed = run.nodes_executed();
    stats->kernels = run.kernels();
    stats->fusions = run.fusions();
    stats->in_place = run.in_place();
    stats->fusion_extra_outputs = run.extra_outputs();
    stats->donated_arguments = run.donated_arguments();
    stats->donated_in_place = run.donated_in_place();
  }
  return run.TakeOutputs();
}

absl::StatusOr<bool> ReusePreparedPrograms() {
  TESSEL_ASSIGN_OR_RETURN(std::optional<bool> reuse, GetBoolEnv("TESSEL_EXECUTOR_PREPARED"));
  return reuse.value_or(true);
}

}  // namespace tessel
