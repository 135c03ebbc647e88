// Structural checks of a Graph: run after parsing HLO text and after building a graph.
//
//   TESSEL_RETURN_IF_ERROR(Verify(graph));
//
// Checks: every node's shape equals the shape rule (core/shape_inference.h) for its operands
// and attributes; operands precede users; parameter numbers are dense 0..N-1 and unique; names
// are unique; the root exists; constants hold a literal of the node's shape. Called
// computations (while condition/body, conditional branches) are verified recursively, and their
// signatures checked by the shape rules: body parameter == body root == condition parameter ==
// init shape, condition root pred[]; branch k's parameter == operand k+1, branch roots agree.
#ifndef TESSEL_CORE_VERIFIER_H_
#define TESSEL_CORE_VERIFIER_H_

#include "absl/status/status.h"
#include "tessel/core/graph.h"

namespace tessel {

// Errors: kInvalidArgument naming the instruction (`%name`) and the broken rule, e.g.
//   "%while.7: while: body %region_0.2 returns (s32[]) but the loop state (init) is (s32[], f32[])"
// Source: XLA HloVerifier (ShapeVerifier::HandleWhile / HandleConditional).
[[nodiscard]] absl::Status Verify(const Graph& graph);

}  // namespace tessel

#endif  // TESSEL_CORE_VERIFIER_H_
