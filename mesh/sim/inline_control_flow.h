// Control flow for the simulator: a partitioned program with while loops and conditionals is
// simulated as the straight-line program they execute.
//
//   // %w = while(%init), condition=%c, body=%b with a trip count of 4 (pattern or
//   // known_trip_count): the flat program holds 4 copies of %b's nodes, one after the other,
//   // each reading the state the previous one produced, and 5 copies of %c (the last test
//   // fails). The loop's users read the last state.
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Graph> flat, InlineControlFlow(program, costs, {}));
//
// So a loop costs trip count x (body + condition) in both schedules, its collectives run once
// per iteration, and the memory analysis sees each iteration's buffers. A conditional becomes
// its costlier branch (by the sum of `branch_seconds` over the branch's nodes, nested control
// flow included): a step's worst case, since which branch runs depends on data the simulator
// does not have. Source of the trip counts: core/while_loop_analysis.h.
#ifndef TESSEL_MESH_SIM_INLINE_CONTROL_FLOW_H_
#define TESSEL_MESH_SIM_INLINE_CONTROL_FLOW_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"

namespace tessel::mesh {

// The most nodes a straight-line program may hold (about 1.6 KB of graph a node: 1.6 GB).
inline constexpr int64_t kMaxInlinedNodes = int64_t{1} << 20;

// True when `graph` has a while or conditional node.
[[nodiscard]] bool HasControlFlow(const Graph& graph);

// The straight-line program of `program` (see the file comment); nodes without control flow are
// copied as they are. `node_seconds` is the cost of one node (to pick a conditional's costlier
// branch). `assumed_trip_count`, when set, is used for loops whose trip count is unknown.
// Errors: kFailedPrecondition naming the loop when its trip count is unknown and no
// `assumed_trip_count` is given: "while %while.4: unknown trip count (...)"; kInvalidArgument
// naming the loop when the straight-line program would hold more than kMaxInlinedNodes nodes
// (checked before anything is copied).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Graph>> InlineControlFlow(
    const Graph& program, const std::function<double(const Node&)>& node_seconds,
    std::optional<int64_t> assumed_trip_count);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_SIM_INLINE_CONTROL_FLOW_H_
