// Shape rules of every op in core/graph.h, as XLA's ShapeInference defines them.
//
//   InferShape(Opcode::kDot, {&f32_8x16, &f32_16x4}, attrs_with_contracting_1_0, std::nullopt)
//     -> f32[8,4]
//   InferShape(Opcode::kReshape, {&f32_8x16}, {}, Shape(kF32, {128})) -> f32[128]
//
// Ops whose result is not fixed by operands and attributes take it from `declared`:
// parameter, iota, rng, reshape, broadcast, convert (its dtype), constant (must equal the
// literal's shape). For every other op, a `declared` shape, when given, must equal the inferred
// one. Source: XLA shape_inference.cc and the operation semantics page.
#ifndef TESSEL_CORE_SHAPE_INFERENCE_H_
#define TESSEL_CORE_SHAPE_INFERENCE_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/graph.h"
#include "core/shape.h"

namespace tessel {

// Returns the result shape of `opcode` applied to operands of `operand_shapes` with `attrs`.
// Errors: kInvalidArgument with a message naming the op and what is wrong, e.g.
//   "dot: lhs contracting dim 1 has size 16 but rhs contracting dim 0 has size 8"
//   "add: operand shapes differ: f32[8] vs f32[9]"
//   "transpose: dimensions={0,0} is not a permutation of rank 2"
// including a wrong operand count, dims out of range, and `declared` disagreeing with the rule.
[[nodiscard]] absl::StatusOr<Shape> InferShape(Opcode opcode,
                                               absl::Span<const Shape* const> operand_shapes,
                                               const OpAttributes& attrs,
                                               const std::optional<Shape>& declared);

}  // namespace tessel

#endif  // TESSEL_CORE_SHAPE_INFERENCE_H_
