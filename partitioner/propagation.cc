#include "tessel/partitioner/propagation.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/op_dims.h"
#include "tessel/partitioner/internal/reshape_dims.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner {

namespace {

using internal::ConvSpace;
using internal::DotSpace;
using internal::Iota;
using internal::IsDimPreserving;
using internal::MakeConvSpace;
using internal::MakeDotSpace;
using spmd::Sharding;

std::vector<int64_t> AllDimsExcept(int64_t rank, const std::vector<int64_t>& removed) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(removed.begin(), removed.end(), d) == removed.end()) kept.push_back(d);
  }
  return kept;
}

// A sharding of `from` carried through a reshape to `to`: the whole tiling when it survives,
// else the tiling of the groups of dims that keep theirs (a GQA head regrouping keeps the batch
// tiling), else nothing.
std::optional<Sharding> ThroughReshape(const Sharding& s, const Shape& from, const Shape& to) {
  if (std::optional<Sharding> whole = internal::ReshapeSharding(s, from, to)) return whole;
  if (auto partial = internal::PartialReshapeSharding(s, from, to)) return partial->second;
  return std::nullopt;
}

// One propagation over a graph. result_[i] is the sharding of graph_.nodes()[i] once decided;
// a slot is only ever refined into one with more tiles (Assign), and nodes are visited in a fixed
// order, which keeps the outcome identical on every host.
class Propagator {
 public:
  Propagator(const Graph& graph, int64_t num_devices) : graph_(graph), num_devices_(num_devices) {}

  // Records why each node gets its sharding into `explain` (steps indexed like graph.nodes()).
  void set_explain(ShardingExplanation* explain) { explain_ = explain; }

  // For a called computation: what its caller fixes. Parameter 0 (a tuple: per element, unknown
  // where nullopt) and the root (likewise). An array parameter or root has one element.
  void SetBoundary(std::vector<std::optional<Sharding>> parameter,
                   std::vector<std::optional<Sharding>> root) {
    parameter_ = std::move(parameter);
    root_ = std::move(root);
  }

  absl::StatusOr<std::vector<Sharding>> Run() {
    TESSEL_RETURN_IF_ERROR(RunPasses());
    return Finish();
  }

  // The passes alone: result_ holds what is known, nullopt where nothing reached.
  absl::Status RunPasses() {
    for (const Node* node : graph_.nodes()) {
      index_[node] = static_cast<int64_t>(index_.size());
    }
    result_.assign(graph_.num_nodes(), std::nullopt);
    annotated_.assign(graph_.num_nodes(), false);
    if (explain_ != nullptr) explain_->steps.assign(graph_.num_nodes(), {});
    // Annotations fill their slots before any pass runs, so no inferred sharding can take the
    // place of a user's mark_sharding (XLA's ShardingPropagation also treats them as fixed).
    for (const Node* node : graph_.nodes()) {
      if (node->sharding().empty()) continue;
      TESSEL_ASSIGN_OR_RETURN(Sharding s, ParseAnnotation(*node));
      result_[index_[node]] = std::move(s);
      annotated_[index_[node]] = true;
      Note(index_[node], ShardingStep::Rule::kAnnotation);
    }
    // A caller's fixed shardings act like annotations on an array parameter or root.
    for (const Node* node : graph_.nodes()) {
      if (node->opcode() == Opcode::kParameter && node->attrs().parameter_number == 0 &&
          !node->shape().is_tuple() && parameter_.size() == 1 && parameter_[0].has_value()) {
        result_[index_[node]] = parameter_[0];
        Note(index_[node], ShardingStep::Rule::kCaller);
      }
    }
    if (graph_.root() != nullptr && !graph_.root()->shape().is_tuple() && root_.size() == 1 &&
        root_[0].has_value() && !result_[index_[graph_.root()]].has_value()) {
      result_[index_[graph_.root()]] = root_[0];
      Note(index_[graph_.root()], ShardingStep::Rule::kCaller);
    }
    MarkManualRegions();
    // graph_.nodes() is a topological order and Assign writes result_ in place, so one forward
    // pass carries a sharding down a whole chain of operand -> user edges, and one backward pass
    // up a whole chain of user -> operand edges. More rounds are needed only where a path from
    // an annotation changes direction: in add(a, b) with %a annotated and negate(b), %b learns
    // from the add going backward and the negate from %b in the next forward pass. Each round
    // is one forward and one backward leg, so 8 rounds reach every node whose path turns at
    // most 14 times. The loop would stop by itself (a round that changes something fills a
    // slot or raises a tile count, both bounded); the bound caps the cost on deep graphs. A node
    // still unsharded after it is {replicated} below: always correct, the partitioner reshards
    // wherever shardings meet.
    //
    // Two phases, as XLA's ShardingPropagation prefers a sharded candidate over a replicated
    // one (ShardedPreferredOverReplicated): the first only assigns shardings that tile some dim,
    // so a value that one side would leave whole (a weight gradient, whose dot contracts the
    // sharded batch) waits for the other side (the optimizer update, sharded like the weight)
    // and becomes a reduce-scatter instead of an all-reduce; the second phase assigns the rest.
    for (bool sharded_only : {true, false}) {
      sharded_only_ = sharded_only;
      phase_ = sharded_only ? 1 : 2;
      TESSEL_RETURN_IF_ERROR(RunRounds());
    }
    return absl::OkStatus();
  }

  // What the passes left unknown becomes {replicated}; tuple-shaped nodes get tuple shardings.
  std::vector<Sharding> Finish() {
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
        if (node->opcode() == Opcode::kTuple) {
          out.push_back(Sharding::Tuple(std::move(elements)));
        } else if (auto state = loop_state_.find(node); state != loop_state_.end()) {
          out.push_back(TupleOf(state->second));
        } else if (node->opcode() == Opcode::kParameter && node->attrs().parameter_number == 0 &&
                   !parameter_.empty()) {
          out.push_back(TupleOf(parameter_));
        } else {
          out.push_back(Sharding::Replicate());
        }
      } else {
        out.push_back(Sharding::Replicate());
        if (explain_ != nullptr) {
          ShardingStep step;
          step.rule = ShardingStep::Rule::kDefault;
          step.sharding = Sharding::Replicate();
          explain_->steps[index_[node]].push_back(std::move(step));
        }
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
      if (manual && !(slot.has_value() && slot->IsManual())) {
        slot = Sharding::Manual();
        Note(index_[node], ShardingStep::Rule::kManual);
      }
    }
  }

  // Whether no candidate can change the node's sharding any more: annotated, tuple-shaped, or
  // already tiled over every device (or a scalar with a sharding), which no merge can refine.
  // Skipping those keeps a round cheap on nodes with many users.
  bool Settled(const Node& node) {
    const int64_t i = index_[&node];
    if (annotated_[i] || node.shape().is_tuple()) return true;
    const std::optional<Sharding>& s = result_[i];
    return s.has_value() && (node.shape().rank() == 0 || s->NumTiles() >= num_devices_);
  }

  // Forward and backward legs until nothing changes (at most 8 rounds; see Run).
  absl::Status RunRounds() {
    for (int round = 0; round < 8; ++round) {
      round_ = round + 1;
      bool changed = false;
      TESSEL_ASSIGN_OR_RETURN(bool loops_changed, UpdateLoopStates());
      changed |= loops_changed;
      for (const Node* node : graph_.nodes()) changed |= Assign(node, Forward(*node), true);
      for (auto it = graph_.nodes().rbegin(); it != graph_.nodes().rend(); ++it) {
        changed |= Assign(*it, Backward(**it), false);
      }
      if (!changed) break;
    }
    return absl::OkStatus();
  }

  // Fills an empty slot, or refines an inferred one: a candidate that merges with the current
  // sharding into one with more tiles replaces it (XLA's propagation likewise only ever makes a
  // sharding more specific: a dot first tiled from its operands takes the weight's FSDP tiling
  // from its users). Tile counts only grow, so the rounds still end. `forward`: the candidate
  // came from Forward (else Backward), for the explanation.
  bool Assign(const Node* node, std::optional<Sharding> s, bool forward) {
    const int64_t i = index_[node];
    auto& slot = result_[i];
    if (annotated_[i] || !s.has_value() || node->shape().is_tuple()) return false;
    if (slot.has_value()) {
      std::optional<Sharding> merged =
          MergeShardings(*slot, *s, node->shape().rank(), num_devices_);
      if (!merged.has_value() || merged->NumTiles() <= slot->NumTiles()) return false;
      std::optional<Sharding> previous = std::move(slot);
      slot = std::move(merged);
      if (explain_ != nullptr) NoteInferred(*node, forward, std::move(previous));
      return true;
    }
    if (sharded_only_ && s->NumTiles() <= 1) return false;
    slot = std::move(s);
    if (explain_ != nullptr) NoteInferred(*node, forward, std::nullopt);
    return true;
  }

  // Appends a step of `rule` with the node's current sharding (explaining only).
  void Note(int64_t i, ShardingStep::Rule rule) {
    if (explain_ == nullptr) return;
    ShardingStep step;
    step.rule = rule;
    step.sharding = result_[i].value_or(Sharding::Replicate());
    step.phase = phase_;
    step.round = round_;
    explain_->steps[i].push_back(std::move(step));
  }

  // The step Assign just took for `node`: which operands (forward) or users (backward) offered
  // a candidate. Called right after Forward / Backward, so their inputs are still what they read;
  // only runs when explaining, and at most a few times per node (tile counts only grow).
  void NoteInferred(const Node& node, bool forward, std::optional<Sharding> previous) {
    ShardingStep step;
    step.rule = forward ? ShardingStep::Rule::kForward : ShardingStep::Rule::kBackward;
    step.previous = std::move(previous);
    step.sharding = *Of(&node);
    step.phase = phase_;
    step.round = round_;
    auto known = [&](const Node* n) { return Of(n).has_value() && !Of(n)->IsManual(); };
    if (forward) {
      for (int64_t i = 0; i < node.operand_count(); ++i) {
        const Node* operand = node.operand(i);
        if (IsElementwise(node.opcode()) && operand->shape().rank() != node.shape().rank()) {
          continue;  // the scalar predicate of select, the bounds of clamp
        }
        // get-tuple-element reads its tuple's element (a loop state has no slot of its own).
        if (known(operand) || node.opcode() == Opcode::kGetTupleElement) {
          step.from.push_back(operand);
          step.operand_index.push_back(i);
        }
      }
    } else {
      for (const Node* user : node.users()) {
        for (int64_t i = 0; i < user->operand_count(); ++i) {
          if (user->operand(i) != &node) continue;
          if (user->opcode() == Opcode::kTuple || FromUser(*user, i).has_value()) {
            step.from.push_back(user);
            step.operand_index.push_back(i);
          }
        }
      }
    }
    explain_->steps[index_[&node]].push_back(std::move(step));
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
    if (Settled(node)) return std::nullopt;
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
    if (op == Opcode::kGetTupleElement) return FromTupleSource(node);
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
        return ThroughReshape(*in, node.operand(0)->shape(), node.shape());
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
      case Opcode::kConvolution:
        return ConvolutionFromOperands(node);
      case Opcode::kGather:
        return GatherFromOperands(node);
      case Opcode::kScatter:
        return ScatterFromOperands(node);
      case Opcode::kReduceWindow:
      case Opcode::kSelectAndScatter:
        // Elementwise-like: dim d of the result is dim d of the operand (windowed or not).
        return in;
      case Opcode::kReverse:
        if (!in) return std::nullopt;
        return PartiallyReplicate(*in, rank, node.attrs().dimensions);
      default:
        break;
    }
    // slice, pad, concatenate, dynamic-slice, dynamic-update-slice: a dim whose extent changes
    // has tile boundaries at other elements on each side, so it keeps the operand's tiling only
    // where halo exchange can produce it (TilingKeptDims); the other changed dims are replicated
    // (HandleDataMovement gathers them).
    if (op == Opcode::kDynamicUpdateSlice) {
      // The update is laid out like the result on the untouched dims, so it says as much as the
      // operand: a scan writing a sharded activation into a zero-initialized stack (an unknown
      // operand) keeps the stack sharded like the activation.
      std::optional<Sharding> merged = Merge(in, Of(node.operand(1)), rank);
      if (merged) return PartiallyReplicate(*merged, rank, internal::ReplicatedChangedDims(node));
      return std::nullopt;
    }
    if (IsDimPreserving(op) && in) {
      return PartiallyReplicate(*in, rank, internal::ReplicatedChangedDims(node));
    }
    return std::nullopt;
  }

  // convolution forward, as a dot over MakeConvSpace: batch, feature (and spatial) dims pass
  // between the operands and the result; the input feature dim is contracted away. A backward
  // convolution whose kernel is not small (the weight gradient) takes no spatial tiling from
  // its lhs: its output's spatial dims index kernel positions (XLA replicates them likewise,
  // InferConvolutionShardingFromOperands).
  std::optional<Sharding> ConvolutionFromOperands(const Node& node) {
    const int64_t rank = node.shape().rank();
    ConvSpace space = MakeConvSpace(node);
    std::optional<Sharding> from_lhs, from_rhs;
    if (Of(node.operand(0))) {
      Sharding s = Embed(*Of(node.operand(0)), space.rank, space.lhs_to_space);
      from_lhs = Project(s, Iota(space.output_rank));
      if (!internal::IsConvolutionKernelSmall(node)) {
        from_lhs = PartiallyReplicate(*from_lhs, rank, space.windowed);
      }
    }
    if (Of(node.operand(1))) {
      Sharding s = Embed(*Of(node.operand(1)), space.rank, space.rhs_to_space);
      from_rhs = Project(s, Iota(space.output_rank));
    }
    return Merge(from_lhs, from_rhs, rank);
  }

  // What a convolution's result sharding implies for operand `operand_index`; for a backward
  // convolution whose kernel is not small, the output's spatial tiling says nothing about the
  // lhs's (see ConvolutionFromOperands).
  std::optional<Sharding> ConvolutionOperandFromUser(const Node& user, int64_t operand_index,
                                                     const Sharding& out) {
    ConvSpace space = MakeConvSpace(user);
    Sharding s = out;
    if (!internal::IsConvolutionKernelSmall(user)) {
      s = PartiallyReplicate(s, user.shape().rank(), space.windowed);
    }
    s = Embed(s, space.rank, Iota(space.output_rank));
    return Project(s, operand_index == 0 ? space.lhs_to_space : space.rhs_to_space);
  }

  // `s`'s tiling of its dims `from`, placed at dims `to` of a rank-`rank` value; nullopt when `s`
  // is unknown, manual or no plain tiling, or no dim passes.
  static std::optional<Sharding> MoveTiles(const std::optional<Sharding>& s,
                                           const std::vector<int64_t>& from, int64_t rank,
                                           const std::vector<int64_t>& to) {
    if (!s.has_value() || s->IsManual() || !IsPlainTiling(*s) || from.empty()) {
      return std::nullopt;
    }
    return Embed(Project(*s, from), rank, to);
  }

  static std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  // gather forward: the output's batch dims take the indices' tiling (the index-parallel
  // strategy), its offset dims the tiling of the operand's passthrough dims, and the dims of
  // explicit batching dims the operand's tiling there (HandleGather keeps all three with no
  // collective). The indices come first, as in XLA's InferShardingFromOperands.
  std::optional<Sharding> GatherFromOperands(const Node& node) {
    const int64_t rank = node.shape().rank();
    const internal::GatherPassDims p = internal::MakeGatherPassDims(
        node.operand(0)->shape(), node.operand(1)->shape(), node.attrs().gather);
    std::optional<Sharding> from_indices =
        MoveTiles(Of(node.operand(1)), p.index_batch, rank, p.index_batch_out);
    std::optional<Sharding> from_operand =
        MoveTiles(Of(node.operand(0)), Concat(p.operand_pass, p.operand_batching), rank,
                  Concat(p.operand_pass_out, p.batching_out));
    return Merge(from_indices, from_operand, rank);
  }

  // gather backward: the operand's passthrough and batching dims and the indices' batch dims take
  // the output's tiling there (XLA: GatherOperandShardingFromOutput,
  // GatherIndexShardingFromOutputIndexPassthroughDimensions).
  std::optional<Sharding> GatherOperandFromUser(const Node& user, int64_t operand_index,
                                                const Sharding& out) {
    const Shape& operand = user.operand(0)->shape();
    const Shape& indices = user.operand(1)->shape();
    const internal::GatherPassDims p =
        internal::MakeGatherPassDims(operand, indices, user.attrs().gather);
    if (operand_index == 0) {
      return MoveTiles(out, Concat(p.operand_pass_out, p.batching_out), operand.rank(),
                       Concat(p.operand_pass, p.operand_batching));
    }
    return MoveTiles(out, p.index_batch_out, indices.rank(), p.index_batch);
  }

  // scatter forward: the result is laid out like the operand; it also takes the updates' tiling
  // of the window dims that pass through (and of batching dims), and the indices' tiling of
  // their batching dims (XLA: the operand's sharding, ScatterOutputShardingFromUpdate and the
  // parallel dims of InferScatterParallelShardingFromOperands).
  std::optional<Sharding> ScatterFromOperands(const Node& node) {
    const int64_t rank = node.shape().rank();
    const Shape& operand = node.operand(0)->shape();
    const GatherDimensionNumbers g =
        ScatterAsGather(node.attrs().scatter, operand, node.operand(2)->shape());
    const internal::GatherPassDims p =
        internal::MakeGatherPassDims(operand, node.operand(1)->shape(), g);
    std::optional<Sharding> merged = Merge(Of(node.operand(0)), std::nullopt, rank);
    merged = Merge(merged,
                   MoveTiles(Of(node.operand(2)), Concat(p.operand_pass_out, p.batching_out), rank,
                             Concat(p.operand_pass, p.operand_batching)),
                   rank);
    return Merge(
        merged, MoveTiles(Of(node.operand(1)), p.indices_batching, rank, p.operand_batching), rank);
  }

  // scatter backward: the operand takes the result's sharding; the updates its tiling of the
  // passthrough and batching dims, and the indices' batch tiling; the indices the result's
  // tiling of the batching dims and the updates' batch tiling (XLA: GetShardingFromUser for
  // scatter: ScatterUpdateShardingFromOutput, ScatterIndexShardingFromUpdateIndexPassthroughDims).
  std::optional<Sharding> ScatterOperandFromUser(const Node& user, int64_t operand_index,
                                                 const Sharding& out) {
    if (operand_index == 0) return out;
    const Shape& operand = user.operand(0)->shape();
    const Shape& indices = user.operand(1)->shape();
    const Shape& updates = user.operand(2)->shape();
    const GatherDimensionNumbers g = ScatterAsGather(user.attrs().scatter, operand, updates);
    const internal::GatherPassDims p = internal::MakeGatherPassDims(operand, indices, g);
    if (operand_index == 1) {
      return Merge(MoveTiles(out, p.operand_batching, indices.rank(), p.indices_batching),
                   MoveTiles(Of(user.operand(2)), p.index_batch_out, indices.rank(), p.index_batch),
                   indices.rank());
    }
    return Merge(MoveTiles(out, Concat(p.operand_pass, p.operand_batching), updates.rank(),
                           Concat(p.operand_pass_out, p.batching_out)),
                 MoveTiles(Of(user.operand(1)), p.index_batch, updates.rank(), p.index_batch_out),
                 updates.rank());
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
        return ThroughReshape(*out, user.shape(), operand_shape);
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
      case Opcode::kConvolution:
        return ConvolutionOperandFromUser(user, operand_index, *out);
      case Opcode::kGather:
        return GatherOperandFromUser(user, operand_index, *out);
      case Opcode::kScatter:
        return ScatterOperandFromUser(user, operand_index, *out);
      case Opcode::kReduceWindow:
      case Opcode::kSelectAndScatter:
        // The operand and select-and-scatter's source; the init value stays replicated.
        if (operand_index >= user.operand_count() - 1) return std::nullopt;
        return out;
      case Opcode::kReverse:
        return PartiallyReplicate(*out, operand_shape.rank(), user.attrs().dimensions);
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
      return PartiallyReplicate(*out, operand_shape.rank(), internal::ReplicatedChangedDims(user));
    }
    return std::nullopt;
  }

  // The merge of what every user implies, in user order. users() lists a user once per use, so
  // multiply(x, x) offers its sharding more than once; merging a sharding with itself is a no-op.
  std::optional<Sharding> Backward(const Node& node) {
    if (Settled(node)) return std::nullopt;
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
            // The initial state of a loop takes the loop state's sharding.
            if (element->opcode() == Opcode::kWhile) {
              auto state = loop_state_.find(element);
              if (state != loop_state_.end()) {
                merged = Merge(merged, state->second[i], node.shape().rank());
              }
            }
          }
          // The elements of a called computation's root tuple take what the caller fixes.
          if (user == graph_.root() && root_.size() == static_cast<size_t>(user->operand_count())) {
            merged = Merge(merged, root_[i], node.shape().rank());
          }
          continue;
        }
        merged = Merge(merged, FromUser(*user, i), node.shape().rank());
      }
    }
    return merged;
  }

  static Sharding TupleOf(const std::vector<std::optional<Sharding>>& elements) {
    std::vector<Sharding> out;
    for (const auto& e : elements) out.push_back(e.value_or(Sharding::Replicate()));
    return Sharding::Tuple(std::move(out));
  }

  // get-tuple-element(t, i) forward: element i of a loop state, of a tuple(), or of a called
  // computation's tuple parameter as its caller fixed it.
  std::optional<Sharding> FromTupleSource(const Node& node) {
    const Node* tuple = node.operand(0);
    const int64_t i = node.attrs().tuple_index;
    if (auto state = loop_state_.find(tuple); state != loop_state_.end()) {
      return state->second[i];
    }
    // An inlined call returns its results as tuple -> get-tuple-element.
    if (tuple->opcode() == Opcode::kTuple && !tuple->operand(i)->shape().is_tuple()) {
      return Of(tuple->operand(i));
    }
    if (tuple->opcode() == Opcode::kParameter && tuple->attrs().parameter_number == 0 &&
        static_cast<int64_t>(parameter_.size()) > i && tuple->shape().is_tuple()) {
      return parameter_[i];
    }
    return std::nullopt;
  }

  // The loop state of every while: the sharding of each state element, a fixed point of the body
  // as GSPMD computes it. An unknown element takes, in this order, the sharding of the init
  // tuple's element; what the body (propagated with the elements known so far on its parameter
  // and root) gives its root element or its parameter's get-tuple-element users; the loop's own
  // get-tuple-element users. The producers come first: a stack that a scan fills with sharded
  // activations stays sharded even where a later consumer would read it whole. A known element
  // is refined, like any inferred sharding (Assign), when a later candidate merges with it into
  // more tiles: a scan's weights that learn their FSDP x TP tiling in a later round make the
  // body's activations head-sharded, and the stacks that save them follow instead of being
  // gathered at the end of every iteration. Tile counts only grow, so the iteration stops; the
  // body is propagated again only when the state changed since its last run. Returns whether
  // any element changed.
  absl::StatusOr<bool> UpdateLoopStates() {
    bool changed = false;
    for (const Node* node : graph_.nodes()) {
      if (node->opcode() != Opcode::kWhile) continue;
      const Node* init = node->operand(0);
      if (!init->shape().is_tuple()) continue;  // an array state has no elements to fill
      const auto& shapes = init->shape().tuple_shapes();
      const int64_t n = static_cast<int64_t>(shapes.size());
      auto& state = loop_state_[node];
      if (state.empty()) state.assign(n, std::nullopt);
      // `source`: where the element came from, for the explanation (nullptr: the body).
      auto fill = [&](int64_t i, std::optional<Sharding> s, const Node* source) {
        if (shapes[i].is_tuple() || !s.has_value() || s->IsManual()) return;
        std::optional<Sharding> previous;
        if (state[i].has_value()) {
          std::optional<Sharding> merged =
              MergeShardings(*state[i], *s, shapes[i].rank(), num_devices_);
          if (!merged.has_value() || merged->NumTiles() <= state[i]->NumTiles()) return;
          previous = std::move(state[i]);
          s = std::move(merged);
        } else if (sharded_only_ && s->NumTiles() <= 1) {
          // As in Assign: in the first phase only a sharding that tiles a dim fixes an element,
          // so a gradient accumulator that the body alone would leave {replicated} (its dot
          // contracts the sharded batch) waits for the loop's users (the optimizer update,
          // sharded like the weight) instead of being fixed whole.
          return;
        }
        state[i] = std::move(s);
        changed = true;
        if (explain_ != nullptr) {
          ShardingStep step;
          step.rule = ShardingStep::Rule::kLoopState;
          if (source != nullptr) step.from.push_back(source);
          step.operand_index.push_back(i);
          step.previous = std::move(previous);
          step.sharding = *state[i];
          step.phase = phase_;
          step.round = round_;
          explain_->steps[index_[node]].push_back(std::move(step));
        }
      };
      if (init->opcode() == Opcode::kTuple) {
        for (int64_t i = 0; i < n; ++i) fill(i, Of(init->operand(i)), init->operand(i));
      }
      auto& body_ran_with = body_state_[node];
      if (!body_ran_with.has_value() || *body_ran_with != state) {
        body_ran_with = state;
        Propagator inner(*node->attrs().called_computations[1], num_devices_);
        inner.SetBoundary(state, state);
        TESSEL_RETURN_IF_ERROR(inner.RunPasses());
        for (int64_t i = 0; i < n; ++i) fill(i, inner.KnownElement(i), nullptr);
      }
      for (const Node* user : node->users()) {
        if (user->opcode() != Opcode::kGetTupleElement) continue;
        fill(user->attrs().tuple_index, Of(user), user);
      }
    }
    return changed;
  }

  // After RunPasses of a body: what the root tuple's element i, else the parameter's
  // get-tuple-element(i) users, ended up with (nullopt if nothing reached them).
  std::optional<Sharding> KnownElement(int64_t i) {
    const Node* root = graph_.root();
    std::optional<Sharding> s;
    if (root != nullptr && root->opcode() == Opcode::kTuple && root->operand_count() > i &&
        !root->operand(i)->shape().is_tuple()) {
      s = Of(root->operand(i));
    }
    const int64_t rank =
        root != nullptr && root->shape().is_tuple() && !root->shape().tuple_shapes()[i].is_tuple()
            ? root->shape().tuple_shapes()[i].rank()
            : 0;
    for (const Node* node : graph_.nodes()) {
      if (node->opcode() != Opcode::kParameter || node->attrs().parameter_number != 0) continue;
      for (const Node* user : node->users()) {
        if (user->opcode() == Opcode::kGetTupleElement && user->attrs().tuple_index == i) {
          s = Merge(s, Of(user), rank);
        }
      }
    }
    return s;
  }

  const Graph& graph_;
  int64_t num_devices_;
  absl::flat_hash_map<const Node*, int64_t> index_;
  std::vector<std::optional<Sharding>> result_;
  // annotated_[i]: result_[i] is the user's annotation, never changed.
  std::vector<bool> annotated_;
  // Phase one of Run: only shardings that tile a dim are assigned.
  bool sharded_only_ = false;
  // Where the passes are (for the explanation): phase 1 or 2, round from 1; 0 before them.
  int phase_ = 0;
  int round_ = 0;
  // Not owned; nullptr unless explaining.
  ShardingExplanation* explain_ = nullptr;
  // Per while node: its loop state's element shardings (UpdateLoopStates).
  absl::flat_hash_map<const Node*, std::vector<std::optional<Sharding>>> loop_state_;
  // Per while node: the state its body was last propagated with (UpdateLoopStates).
  absl::flat_hash_map<const Node*, std::optional<std::vector<std::optional<Sharding>>>> body_state_;
  // SetBoundary: parameter 0's and the root's shardings, fixed by the caller.
  std::vector<std::optional<Sharding>> parameter_;
  std::vector<std::optional<Sharding>> root_;
};

}  // namespace

absl::StatusOr<std::vector<Sharding>> ComputeShardings(const Graph& graph, int64_t num_devices,
                                                       ShardingExplanation* explain) {
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices must be >= 1, got ", num_devices));
  }
  Propagator propagator(graph, num_devices);
  propagator.set_explain(explain);
  return propagator.Run();
}

absl::StatusOr<std::vector<Sharding>> ComputeCalledShardings(const Graph& computation,
                                                             int64_t num_devices,
                                                             const Sharding& parameter,
                                                             const Sharding& root) {
  auto elements = [](const Sharding& s) {
    std::vector<std::optional<Sharding>> out;
    if (!s.IsTuple()) return std::vector<std::optional<Sharding>>{s};
    for (const Sharding& e : s.tuple_elements()) out.push_back(e);
    return out;
  };
  Propagator propagator(computation, num_devices);
  propagator.SetBoundary(elements(parameter), elements(root));
  return propagator.Run();
}

namespace {

std::string LineSuffix(const Node& node, const absl::flat_hash_map<std::string, int>& line_of) {
  auto it = line_of.find(node.name());
  return it == line_of.end() ? std::string() : absl::StrCat(", line ", it->second);
}

// "%a (operand 0), %b (operand 1)": what a forward or backward step read.
std::string Sources(const ShardingStep& step, bool users) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < step.from.size(); ++k) {
    const Node* n = step.from[k];
    parts.push_back(users ? absl::StrCat("%", n->name(), " (", OpcodeName(n->opcode()),
                                         ", operand ", step.operand_index[k], ")")
                          : absl::StrCat("%", n->name(), " (operand ", step.operand_index[k], ")"));
  }
  return parts.empty() ? std::string("nothing") : absl::StrJoin(parts, ", ");
}

std::string DescribeStep(const Node& node, const ShardingStep& step,
                         const absl::flat_hash_map<std::string, int>& line_of) {
  using Rule = ShardingStep::Rule;
  std::string what;
  switch (step.rule) {
    case Rule::kAnnotation:
      what = absl::StrCat("annotation sharding=", node.sharding(), LineSuffix(node, line_of));
      break;
    case Rule::kCaller:
      what = "fixed by the caller (parameter or root of a called computation)";
      break;
    case Rule::kManual:
      what = "manual region (shard_map): no propagation";
      break;
    case Rule::kForward:
      what = absl::StrCat("forward through ", OpcodeName(node.opcode()), " from ",
                          Sources(step, false));
      break;
    case Rule::kBackward:
      what = absl::StrCat("backward from ", Sources(step, true));
      break;
    case Rule::kLoopState: {
      const int64_t element = step.operand_index.empty() ? -1 : step.operand_index[0];
      if (step.from.empty()) {
        what = absl::StrCat("loop state element ", element, " from the body's fixed point");
      } else if (step.from[0]->opcode() == Opcode::kGetTupleElement &&
                 step.from[0]->operand(0) == &node) {
        what =
            absl::StrCat("loop state element ", element, " from its user %", step.from[0]->name());
      } else {
        what = absl::StrCat("loop state element ", element, " from the init tuple's %",
                            step.from[0]->name());
      }
      if (step.previous.has_value()) {
        absl::StrAppend(&what, "; merged with ", step.previous->ToString(), " into");
      } else {
        absl::StrAppend(&what, ":");
      }
      return absl::StrCat(what, " ", step.sharding.ToString(), " [phase ", step.phase, ", round ",
                          step.round, "]");
    }
    case Rule::kDefault:
      return "nothing reached it: {replicated}";
  }
  if (step.rule == Rule::kForward || step.rule == Rule::kBackward) {
    if (step.previous.has_value()) {
      absl::StrAppend(&what, "; merged with ", step.previous->ToString(), " into ",
                      step.sharding.ToString());
    } else {
      absl::StrAppend(&what, ": ", step.sharding.ToString());
    }
    absl::StrAppend(&what, " [phase ", step.phase, ", round ", step.round, "]");
  }
  return what;
}

// "%h <- %x (annotation, line 7)": each node's first step's first source, back to where the
// sharding entered (an annotation, a caller, a manual region, the loop state) or a node already
// on the chain.
std::string Chain(const Node* node, const ShardingExplanation& explanation,
                  const absl::flat_hash_map<const Node*, int64_t>& index,
                  const absl::flat_hash_map<std::string, int>& line_of) {
  std::string out = absl::StrCat("%", node->name());
  absl::flat_hash_map<const Node*, bool> seen;
  while (true) {
    seen[node] = true;
    const std::vector<ShardingStep>& steps = explanation.steps[index.at(node)];
    if (steps.empty()) return out;
    const ShardingStep& first = steps.front();
    switch (first.rule) {
      case ShardingStep::Rule::kAnnotation:
        return absl::StrCat(out, " (annotation", LineSuffix(*node, line_of), ")");
      case ShardingStep::Rule::kCaller:
        return absl::StrCat(out, " (caller)");
      case ShardingStep::Rule::kManual:
        return absl::StrCat(out, " (manual)");
      case ShardingStep::Rule::kDefault:
        return absl::StrCat(out, " (default)");
      default:
        break;
    }
    if (first.from.empty()) return absl::StrCat(out, " (loop body)");
    const Node* next = first.from[0];
    if (!index.contains(next) || seen.contains(next)) return out;
    absl::StrAppend(&out, " <- %", next->name());
    node = next;
  }
}

// "%x (annotation, line 7), %w1 (annotation, line 8)": every place the node's sharding came
// from, following every step's sources (not only the first) until an annotation, a caller's
// sharding, a manual region or a loop state, in program order.
std::string Origins(const Graph& graph, const Node* node, const ShardingExplanation& explanation,
                    const absl::flat_hash_map<const Node*, int64_t>& index,
                    const absl::flat_hash_map<std::string, int>& line_of) {
  std::vector<bool> seen(graph.num_nodes(), false);
  std::vector<bool> origin(graph.num_nodes(), false);
  std::vector<const Node*> stack = {node};
  seen[index.at(node)] = true;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const ShardingStep& step : explanation.steps[index.at(n)]) {
      if (step.rule != ShardingStep::Rule::kForward && step.rule != ShardingStep::Rule::kBackward) {
        if (step.rule != ShardingStep::Rule::kDefault) origin[index.at(n)] = true;
        continue;
      }
      for (const Node* from : step.from) {
        auto it = index.find(from);
        if (it == index.end() || seen[it->second]) continue;
        seen[it->second] = true;
        stack.push_back(from);
      }
    }
  }
  std::vector<std::string> parts;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    if (!origin[i]) continue;
    const Node* n = graph.nodes()[i];
    const auto rule = explanation.steps[i].front().rule;
    const char* what = rule == ShardingStep::Rule::kAnnotation ? "annotation"
                       : rule == ShardingStep::Rule::kCaller   ? "caller"
                       : rule == ShardingStep::Rule::kManual   ? "manual"
                                                               : "loop state";
    parts.push_back(absl::StrCat("%", n->name(), " (", what, LineSuffix(*n, line_of), ")"));
  }
  return parts.empty() ? std::string("none") : absl::StrJoin(parts, ", ");
}

}  // namespace

std::string DescribeShardingStep(const Node& node, const ShardingStep& step,
                                 const absl::flat_hash_map<std::string, int>& line_of) {
  return DescribeStep(node, step, line_of);
}

std::string FormatShardingExplanation(const Graph& graph, const std::vector<Sharding>& shardings,
                                      const ShardingExplanation& explanation,
                                      const absl::flat_hash_map<std::string, int>& line_of) {
  absl::flat_hash_map<const Node*, int64_t> index;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) index[graph.nodes()[i]] = i;
  std::string out;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const Node* node = graph.nodes()[i];
    absl::StrAppend(&out, "%", node->name(), " = ", node->shape().ToString(), " ",
                    i < static_cast<int64_t>(shardings.size()) ? shardings[i].ToString() : "?",
                    "\n");
    const std::vector<ShardingStep>* steps =
        i < static_cast<int64_t>(explanation.steps.size()) ? &explanation.steps[i] : nullptr;
    if (steps == nullptr || steps->empty()) {
      absl::StrAppend(
          &out, "  ",
          node->shape().is_tuple() ? "a tuple: its elements' shardings" : "no step recorded", "\n");
      continue;
    }
    for (size_t k = 0; k < steps->size(); ++k) {
      absl::StrAppend(&out, "  ", k + 1, ". ", DescribeStep(*node, (*steps)[k], line_of), "\n");
    }
    const ShardingStep::Rule first = steps->front().rule;
    if (first == ShardingStep::Rule::kForward || first == ShardingStep::Rule::kBackward) {
      absl::StrAppend(&out, "  chain: ", Chain(node, explanation, index, line_of), "\n");
      absl::StrAppend(&out, "  from: ", Origins(graph, node, explanation, index, line_of), "\n");
    }
  }
  return out;
}

absl::Status PropagateShardings(Graph& graph, int64_t num_devices, ShardingExplanation* explain) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Sharding> shardings,
                          ComputeShardings(graph, num_devices, explain));
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    graph.nodes()[i]->set_sharding(shardings[i].ToString());
  }
  return absl::OkStatus();
}

}  // namespace tessel::partitioner
