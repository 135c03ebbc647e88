// Trip counts of while loops, for the simulator (a loop costs trip count x its body) and for
// `tessel partition --stats` (collectives in a body run once per iteration).
//
//   // %while = while(tuple(constant(0), ...)), condition: compare(gte(s, 0), constant(4)),
//   //   direction=LT; body root: tuple(add(gte(s, 0), constant(1)), ...)
//   ComputeWhileLoopTripCount(*while_node) == 4
//
// Source: XLA while_loop_analysis.cc (ComputeWhileLoopTripCount: the induction variable is a
// tuple element of the state with a constant init, advanced by a constant step in the body and
// compared with a constant in the condition) and the `known_trip_count` backend config that
// XLA's WhileLoopTripCountAnnotator writes.
#ifndef TESSEL_CORE_WHILE_LOOP_ANALYSIS_H_
#define TESSEL_CORE_WHILE_LOOP_ANALYSIS_H_

#include <cstdint>
#include <optional>

#include "tessel/core/graph.h"

namespace tessel {

// The number of times the body of `loop` (a kWhile node) runs, when it is known statically:
// 1. `known_trip_count` from the text's backend_config, if present;
// 2. else the pattern JAX emits for fori_loop / scan: state element k is an integer scalar whose
//    init is a constant (init is a tuple() of the same graph), the body's root tuple sets it to
//    add(get-tuple-element(param, k), constant step) (either operand order), and the condition's
//    root is compare(get-tuple-element(param, k), constant bound) (or the mirror image) with
//    direction LT, LE, GT, GE or NE. The count is the number of values init, init+step, ...
//    that pass the comparison before the first that fails (0 if the first fails).
// Returns nullopt when neither applies (a data-dependent loop) or the loop never ends (a step
// that never reaches the bound). Precondition: loop.opcode() == Opcode::kWhile and the node
// passed the verifier.
[[nodiscard]] std::optional<int64_t> ComputeWhileLoopTripCount(const Node& loop);

}  // namespace tessel

#endif  // TESSEL_CORE_WHILE_LOOP_ANALYSIS_H_
