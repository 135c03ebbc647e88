// The shape of a value: an element type and dimensions (an array), or a tuple of shapes.
//
//   Shape s(DType::kF32, {8, 16});
//   s.ToString() == "f32[8,16]";  s.num_elements() == 128;  s.byte_size() == 512;
//   Shape::Tuple({s, Shape(DType::kS32, {})}).ToString() == "(f32[8,16], s32[])"
//
// Dims are row-major (the last dim varies fastest), matching XLA's default layout {n-1,...,0}.
// Source: XLA `Shape` / `ShapeUtil::HumanString`.
#ifndef TESSEL_CORE_SHAPE_H_
#define TESSEL_CORE_SHAPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/dtype.h"

namespace tessel {

class Shape {
 public:
  // A scalar f32 (rank 0).
  Shape() = default;
  // An array shape. Precondition: every dim >= 0 (TESSEL_CHECK).
  Shape(DType dtype, std::vector<int64_t> dims);
  // A tuple shape holding `elements` (which may themselves be tuples).
  static Shape Tuple(std::vector<Shape> elements);

  bool is_tuple() const { return is_tuple_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int64_t i) const { return dims_[i]; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  const std::vector<Shape>& tuple_shapes() const { return tuple_shapes_; }

  // Product of dims (1 for a scalar); 0 for a tuple.
  int64_t num_elements() const;
  // Bytes of the dense row-major buffer: num_elements() * ByteWidth(dtype); for a tuple the sum
  // of its elements.
  int64_t byte_size() const;
  // Row-major strides in elements: strides()[rank-1] == 1.
  std::vector<int64_t> strides() const;

  // The same dims with another element type.
  Shape WithDType(DType dtype) const;

  // XLA text: "f32[8,16]", "pred[]", "(f32[2], s32[])".
  std::string ToString() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> dims_;
  bool is_tuple_ = false;
  std::vector<Shape> tuple_shapes_;
};

// Parses XLA shape text: "f32[8,16]", "f32[8,16]{1,0}" (the layout is accepted and ignored),
// "pred[]", "(f32[2], s32[])". Errors: kInvalidArgument naming the text.
[[nodiscard]] absl::StatusOr<Shape> ParseShape(std::string_view text);

// byte_size() of `shape`, computed without overflow: num_elements() and byte_size() wrap around
// for shapes of 2^63 bytes or more, so every shape that comes from user input (HLO text, model
// flags) is checked with this first.
// Errors: kInvalidArgument naming the shape when its buffer (a tuple: all its buffers together)
// needs more than INT64_MAX bytes.
[[nodiscard]] absl::StatusOr<int64_t> CheckedByteSize(const Shape& shape);

// "[8,16]": dims in brackets, as XLA prints them inside attributes.
std::string DimsToString(absl::Span<const int64_t> dims);

}  // namespace tessel

#endif  // TESSEL_CORE_SHAPE_H_
