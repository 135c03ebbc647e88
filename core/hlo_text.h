// XLA HLO text for Tessel graphs: printing and parsing.
//
//   HloModule mlp, entry_computation_layout={...}      (entry_computation_layout is optional)
//
//   %add_f32 (x: f32[], y: f32[]) -> f32[] {
//     %x = f32[] parameter(0)
//     %y = f32[] parameter(1)
//     ROOT %add = f32[] add(f32[] %x, f32[] %y)
//   }
//
//   ENTRY %main (a: f32[8,16], b: f32[16,4]) -> f32[8,4] {
//     %a = f32[8,16]{1,0} parameter(0), sharding={devices=[2,1]0,1}
//     %b = f32[16,4]{1,0} parameter(1)
//     ROOT %dot = f32[8,4]{1,0} dot(f32[8,16]{1,0} %a, f32[16,4]{1,0} %b),
//         lhs_contracting_dims={1}, rhs_contracting_dims={0}
//   }
//
// Printing: `PrintHloModule` writes the form above (no layouts, operands as `%name`, one
// reduction computation per (reduce kind, dtype) used, then the computations that while and
// conditional nodes call, callees first, each once). `ParseHloModule(PrintHloModule(g))`
// gives a graph that prints identically (the round-trip property the tests check).
//
// Parsing accepts what XLA dumps for the supported ops: layouts `{1,0}` (ignored), operands
// with or without their shape (`f32[8]{0} %a` or `%a`), names with or without '%', metadata=
// / frontend_attributes= / backend_config= (ignored), `to_apply` computations whose root is
// add / multiply / maximum / minimum / and / or of its two parameters, `while` (condition=,
// body=, backend_config's known_trip_count) and `conditional` (true_computation= /
// false_computation= or branch_computations=) with their computations built as graphs of their
// own. Computations may appear before or after ENTRY.
// Source: XLA hlo_parser.cc / HloInstruction::ToString text format.
#ifndef TESSEL_CORE_HLO_TEXT_H_
#define TESSEL_CORE_HLO_TEXT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"

namespace tessel {

// The HLO text of `graph` (HloModule header, reduction computations, ENTRY computation).
[[nodiscard]] std::string PrintHloModule(const Graph& graph);

// Parses HLO text into a verified Graph (core/verifier.h runs before returning).
// Errors (all name the 1-based line number and quote the offending token):
//   kInvalidArgument: syntax errors, unknown operand names, missing operands, shapes that do
//     not match the op's rule, duplicate names;
//   kUnimplemented: an op Tessel does not support ("line 7: unsupported op \"cholesky\""),
//     or a to_apply computation that is not one of the recognised reductions.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Graph>> ParseHloModule(std::string_view text);

// Reads the file at `path` and parses it with ParseHloModule.
// Errors: kNotFound "PATH: cannot open the file"; ParseHloModule's errors with "PATH: " before
// their message (same code).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Graph>> ParseHloFile(const std::string& path);

}  // namespace tessel

#endif  // TESSEL_CORE_HLO_TEXT_H_
