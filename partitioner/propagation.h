// Sharding propagation: gives every node of a graph a sharding from the user's annotations.
//
//   // %x annotated {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}, %w1 {devices=[1,2,2]...}
//   TESSEL_RETURN_IF_ERROR(PropagateShardings(graph, /*num_devices=*/4));
//   // every node now has sharding() set, e.g. the dot gets {devices=[2,2]0,1,2,3}
//
// Algorithm (after XLA's ShardingPropagation, simplified and documented in docs/partitioner.md):
//   1. Annotated nodes keep their sharding: user annotations are never overridden.
//   2. A forward pass in program order gives each node the merge of what its operands imply
//      (elementwise: the operands' shardings; broadcast: embedded; transpose: permuted;
//      reshape: through the groups of dims that keep their tiling; reduce: the kept dims; dot:
//      batch and lhs dims from the lhs merged with rhs dims from the rhs; slice / pad /
//      concatenate / dynamic-slice / dynamic-update-slice: the operand with the changed dims
//      replicated, except the dims a slice or pad keeps at least half of and a concatenate's
//      dim, which keep their tiling for halo exchange: internal::TilingKeptDims).
//   3. A backward pass in reverse order gives each node what its users imply.
//   4. Steps 2-3 repeat until nothing changes (at most 8 rounds), in two phases: the first
//      assigns only shardings that tile some dim (XLA's ShardedPreferredOverReplicated), the
//      second the rest; what is left is {replicated}.
//   5. A while's loop state (one sharding per tuple element) is a fixed point of its body: each
//      round, unknown elements take the init element's sharding, the loop's get-tuple-element
//      users', or what the body (propagated with the state known so far on its parameter and
//      root) gives its root element or its parameter's element users; a known element is
//      refined when one of those merges with it into more tiles, and in the first phase only a
//      sharding that tiles a dim fills an element (as in step 4). get-tuple-element(while)
//      reads the state forward; the init tuple's elements learn it backward.
// Merging (MergeShardings) combines tilings of different dims when every device keeps a
// consistent position; when candidates disagree, the first one with the most tiles wins. An
// inferred sharding is refined when a later candidate merges with it into more tiles (so a
// weight gradient takes its weight's FSDP tiling from the optimizer update); tile counts only
// grow and the visiting order is fixed, so results are deterministic and identical on every host.
#ifndef TESSEL_PARTITIONER_PROPAGATION_H_
#define TESSEL_PARTITIONER_PROPAGATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner {

// One step of the rule chain that gave a node its sharding (`tessel propagate --explain`).
struct ShardingStep {
  enum class Rule {
    kAnnotation,  // the user's sharding={...} on the node (never overridden)
    kCaller,      // a called computation's parameter or root, fixed by its caller
    kManual,      // inside a manual region (shard_map): {manual}, no propagation
    kForward,     // the node's own rule applied to its operands' shardings
    kBackward,    // its users' rules asked for it
    kLoopState,   // a while's loop state element (its fixed point over the body)
    kDefault,     // nothing reached the node: {replicated}
  };
  Rule rule = Rule::kDefault;
  // kForward: the operands whose sharding was known (in operand order); kBackward: the users
  // whose rule gave a candidate; kLoopState: the node the element came from (the init tuple's
  // operand or a get-tuple-element user; empty for the body's fixed point).
  std::vector<const Node*> from;
  // kForward / kBackward: operand numbers matching `from` (the operand's index in the node, or
  // the node's index in the user). kLoopState: the state element.
  std::vector<int64_t> operand_index;
  // The sharding the node had before this step (a refinement: the merge of it and the new
  // candidate has more tiles), nullopt when the step filled an empty slot.
  std::optional<spmd::Sharding> previous;
  // The node's sharding after the step.
  spmd::Sharding sharding;
  // 1: the first phase (only shardings that tile a dim), 2: the second; round within it (from 1).
  int phase = 0;
  int round = 0;
};

// Per node (indexed like graph.nodes()), its steps in the order they happened: one for an
// annotation or a default, one or more (a fill, then refinements) for inferred shardings, one per
// state element for a while.
struct ShardingExplanation {
  std::vector<std::vector<ShardingStep>> steps;
};

// The sharding of every node of `graph`, indexed like graph.nodes(). Tuple-shaped nodes get a
// tuple sharding. With `explain`, also records why (ShardingExplanation); without it nothing is
// recorded and the propagation costs what it did before.
// Errors: kInvalidArgument naming the instruction when an annotation does not parse, does not
// fit the node's shape, or names a device outside 0..num_devices-1 or misses one (a sharding on
// the wrong mesh); kUnimplemented for manual shardings.
[[nodiscard]] absl::StatusOr<std::vector<spmd::Sharding>> ComputeShardings(
    const Graph& graph, int64_t num_devices, ShardingExplanation* explain = nullptr);

// ComputeShardings for a called computation (a while's condition or body, a conditional's
// branch) whose caller fixes the sharding of its parameter 0 (a tuple sharding for a tuple
// parameter) and of its root: they act as annotations (a tuple root's elements learn theirs, the
// partitioner reshards them to it). Source: XLA ShardingPropagation, which propagates through
// a while's body with the loop state's sharding on the body's parameter and root.
// Errors: those of ComputeShardings.
[[nodiscard]] absl::StatusOr<std::vector<spmd::Sharding>> ComputeCalledShardings(
    const Graph& computation, int64_t num_devices, const spmd::Sharding& parameter,
    const spmd::Sharding& root);

// Runs ComputeShardings and writes each result into the node's sharding() text. With `explain`,
// also records why (see ComputeShardings).
[[nodiscard]] absl::Status PropagateShardings(Graph& graph, int64_t num_devices,
                                              ShardingExplanation* explain = nullptr);

// One step of `node`'s chain as `--explain` prints it, e.g. "forward through dot from %x
// (operand 0), %w1 (operand 1): {devices=[2,2]0,1,2,3} [phase 1, round 1]"; `line_of` as in
// FormatShardingExplanation. For `tessel propagate --json --explain`.
std::string DescribeShardingStep(const Node& node, const ShardingStep& step,
                                 const absl::flat_hash_map<std::string, int>& line_of = {});

// The explanation as text, one block per node of `graph` in program order:
//
//   %h = f32[8,32] {devices=[2,2]0,1,2,3}
//     1. forward through dot from %x (operand 0), %w1 (operand 1): {devices=[2,2]0,1,2,3}
//        [phase 1, round 1]
//     chain: %h <- %x (annotation, line 7)
//     from: %x (annotation, line 7), %w1 (annotation, line 8)
//
// Each step names its rule (annotation, caller, manual, forward through the node's op from its
// operands, backward from its users through their op, loop state, default), what it read and,
// for a refinement, the sharding it refined; the chain follows each node's first step's first
// source back to where the sharding came from, and `from` lists every annotation (caller
// sharding, manual region, loop state) reached through all steps' sources. `line_of` maps
// instruction names to their line in the input text (empty: no line numbers). `shardings` and
// `explanation` are ComputeShardings' results.
std::string FormatShardingExplanation(const Graph& graph,
                                      const std::vector<spmd::Sharding>& shardings,
                                      const ShardingExplanation& explanation,
                                      const absl::flat_hash_map<std::string, int>& line_of = {});

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_PROPAGATION_H_
