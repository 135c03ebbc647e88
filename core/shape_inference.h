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

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/graph.h"
#include "tessel/core/shape.h"

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

// How the dims of a gather's output relate to its operand and indices, for kernels,
// autodiff and the partitioner. Preconditions: the dimension numbers passed InferShape.
struct GatherDimMap {
  // Per output dim: the indices dim it runs over (a batch dim), or -1 for an offset dim.
  std::vector<int64_t> output_to_indices;
  // Per output dim: the operand dim its window runs along (an offset dim), or -1 for a batch dim.
  std::vector<int64_t> output_to_operand;
  // Per indices dim: the output dim, or -1 for index_vector_dim.
  std::vector<int64_t> indices_to_output;
  // Per operand dim: the output dim of its window, or -1 for a collapsed or batching dim.
  std::vector<int64_t> operand_to_output;
};
[[nodiscard]] GatherDimMap MapGatherDims(int64_t operand_rank, int64_t indices_rank,
                                         const GatherDimensionNumbers& dnums);

// The gather that reads, for each element of `updates`, the operand element a scatter with
// `dnums` writes (slice_sizes from the update window sizes; 1 for inserted and batching dims).
// Scatter `updates` have the shape of this gather's output. Preconditions: `dnums` passed
// InferShape for scatter with these shapes.
[[nodiscard]] GatherDimensionNumbers ScatterAsGather(const ScatterDimensionNumbers& dnums,
                                                     const Shape& operand, const Shape& updates);
// The scatter dimension numbers that write back where a gather with `dnums` reads (its VJP).
[[nodiscard]] ScatterDimensionNumbers GatherAsScatter(const GatherDimensionNumbers& dnums);

}  // namespace tessel

#endif  // TESSEL_CORE_SHAPE_INFERENCE_H_
