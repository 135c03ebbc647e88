// Windows and convolution dimension numbers: XLA's Window / ConvolutionDimensionNumbers text
// forms, window arithmetic, and the shape rules of the windowed ops (convolution, reduce-window,
// select-and-scatter) and reverse. core/shape_inference.h dispatches to these.
//
//   std::vector<WindowDim> w = ParseWindow("size=3x3 stride=2x2 pad=0_1x0_1").value();
//   WindowOutputSize(w[0], 16) == 8;          // ceil-free StridedBound of the padded operand
//   WindowToString(w) == "size=3x3 stride=2x2 pad=0_1x0_1";
//   ConvolutionDimensionNumbers d = ParseDimLabels("b01f_01io->b01f").value();
//   DimLabelsToString(d) == "b01f_01io->b01f";
//
// Source: xla/window_util.cc (ToString, DilatedBound, StridedBound), xla/service/hlo_parser.cc
// (window and dim_labels syntax), xla/service/shape_inference.cc (InferConvolveShape,
// InferReduceWindowShape, InferSelectAndScatterShape, InferReverseShape).
#ifndef TESSEL_CORE_WINDOW_H_
#define TESSEL_CORE_WINDOW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/graph.h"
#include "tessel/core/shape.h"

namespace tessel {

// The text inside `window={...}`: space-separated fields size=, stride=, pad=, lhs_dilate=,
// rhs_dilate=, rhs_reversal=, each with one value per window dim joined by 'x' (pad: low_high).
// Fields at their defaults (stride 1, pad 0_0, dilation 1, reversal 0) are omitted; a rank-0
// window prints as "".
[[nodiscard]] std::string WindowToString(absl::Span<const WindowDim> window);
// Parses WindowToString's form. `size` is required unless every field is absent (rank 0).
// Errors: kInvalidArgument naming the field and value (unknown field, count differing from
// size's, size or stride or dilation < 1, malformed number).
[[nodiscard]] absl::StatusOr<std::vector<WindowDim>> ParseWindow(std::string_view text);

// "b01f_01io->b01f". Precondition: the dims are a consistent set (InferConvolutionShape passed);
// spatial dims >= 10 are not representable in this form and print their index's last digit.
[[nodiscard]] std::string DimLabelsToString(const ConvolutionDimensionNumbers& dnums);
// Parses "LHS_RHS->OUT". Errors: kInvalidArgument if a part lacks b/f (i/o), repeats a label,
// or the three parts have different numbers of spatial dims or gaps in the digits.
[[nodiscard]] absl::StatusOr<ConvolutionDimensionNumbers> ParseDimLabels(std::string_view text);

// Size of the base-dilated operand dim: (size - 1) * dilation + 1, 0 for an empty dim.
[[nodiscard]] int64_t DilatedBound(int64_t size, int64_t dilation);
// Number of window positions along one dim for an operand dim of `operand_size`:
// StridedBound(padding_low + DilatedBound(operand_size, base_dilation) + padding_high,
//              DilatedBound(size, window_dilation), stride) (0 if the window does not fit).
[[nodiscard]] int64_t WindowOutputSize(const WindowDim& dim, int64_t operand_size);
// True when the dim neither moves nor widens the window: size 1, stride 1, no padding, no
// dilation, no reversal. Such a dim of a reduce-window or select-and-scatter is elementwise.
[[nodiscard]] bool IsTrivialWindowDim(const WindowDim& dim);

// Shape rules (operands as given to InferShape). Errors: kInvalidArgument naming the op and the
// offending operand, dim or attribute, e.g.
//   "convolution: lhs feature dim 3 has size 8 but rhs input feature dim 2 has size 4 times
//    feature_group_count=1"
//   "reduce-window: window has 3 dims but the operand f32[4,64] has rank 2"
[[nodiscard]] absl::StatusOr<Shape> InferConvolutionShape(const Shape& lhs, const Shape& rhs,
                                                          const OpAttributes& attrs,
                                                          DType result_dtype);
[[nodiscard]] absl::StatusOr<Shape> InferReduceWindowShape(const Shape& operand, const Shape& init,
                                                           const OpAttributes& attrs);
// select-and-scatter(operand, source, init): `source` must have reduce-window's output shape;
// the result has the operand's shape.
[[nodiscard]] absl::StatusOr<Shape> InferSelectAndScatterShape(const Shape& operand,
                                                               const Shape& source,
                                                               const Shape& init,
                                                               const OpAttributes& attrs);
[[nodiscard]] absl::StatusOr<Shape> InferReverseShape(const Shape& operand,
                                                      const OpAttributes& attrs);

}  // namespace tessel

#endif  // TESSEL_CORE_WINDOW_H_
