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
//      root) gives its root element or its parameter's element users. get-tuple-element(while)
//      reads the state forward; the init tuple's elements learn it backward.
// Merging (MergeShardings) combines tilings of different dims when every device keeps a
// consistent position; when candidates disagree, the first one with the most tiles wins. An
// inferred sharding is refined when a later candidate merges with it into more tiles (so a
// weight gradient takes its weight's FSDP tiling from the optimizer update); tile counts only
// grow and the visiting order is fixed, so results are deterministic and identical on every host.
#ifndef TESSEL_PARTITIONER_PROPAGATION_H_
#define TESSEL_PARTITIONER_PROPAGATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/graph.h"
#include "spmd/sharding.h"

namespace tessel::partitioner {

// The sharding of every node of `graph`, indexed like graph.nodes(). Tuple-shaped nodes get a
// tuple sharding.
// Errors: kInvalidArgument naming the instruction when an annotation does not parse, does not
// fit the node's shape, or names a device outside 0..num_devices-1 or misses one (a sharding on
// the wrong mesh); kUnimplemented for manual shardings.
[[nodiscard]] absl::StatusOr<std::vector<spmd::Sharding>> ComputeShardings(const Graph& graph,
                                                                           int64_t num_devices);

// ComputeShardings for a called computation (a while's condition or body, a conditional's
// branch) whose caller fixes the sharding of its parameter 0 (a tuple sharding for a tuple
// parameter) and of its root: they act as annotations (a tuple root's elements learn theirs, the
// partitioner reshards them to it). Source: XLA ShardingPropagation, which propagates through
// a while's body with the loop state's sharding on the body's parameter and root.
// Errors: those of ComputeShardings.
[[nodiscard]] absl::StatusOr<std::vector<spmd::Sharding>> ComputeCalledShardings(
    const Graph& computation, int64_t num_devices, const spmd::Sharding& parameter,
    const spmd::Sharding& root);

// Runs ComputeShardings and writes each result into the node's sharding() text.
[[nodiscard]] absl::Status PropagateShardings(Graph& graph, int64_t num_devices);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_PROPAGATION_H_
