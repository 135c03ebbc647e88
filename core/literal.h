// A dense host array (or a tuple of them): the value of a tensor on the host.
//
//   Literal x = Literal::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
//   x.shape().ToString() == "f32[2,3]";
//   x.data<float>()[4] == 5;                       // row-major
//   x.AsMatrix<float>()(1, 1) == 5;                // Eigen view of a rank-2 literal
//   x.ToString() == "{ {1, 2, 3}, {4, 5, 6} }";    // XLA literal text
//
// Literals have value semantics: copying copies the buffer, moving is cheap. Buffers are
// 64-byte aligned. Source: XLA `Literal` (host literal, row-major default layout).
#ifndef TESSEL_CORE_LITERAL_H_
#define TESSEL_CORE_LITERAL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/shape.h"
#include "tessel/core/status_macros.h"

namespace tessel {

class Literal {
 public:
  template <typename T>
  using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  // A scalar f32 zero.
  Literal() : Literal(Shape()) {}
  // A zero-filled array (or tuple of zero-filled arrays) of `shape`.
  explicit Literal(const Shape& shape);
  // An array of `shape` whose contents are unspecified (for kernels that overwrite it all).
  static Literal Uninitialized(const Shape& shape);
  // A tuple literal owning `elements`.
  static Literal Tuple(std::vector<Literal> elements);

  // An array of C++ type T with `dims` and row-major `values`.
  // Precondition: values.size() == product of dims (TESSEL_CHECK).
  template <typename T>
  static Literal FromVector(std::vector<int64_t> dims, absl::Span<const T> values) {
    Literal lit = Uninitialized(Shape(DTypeOf<T>(), std::move(dims)));
    TESSEL_CHECK(static_cast<int64_t>(values.size()) == lit.shape().num_elements());
    if (!values.empty()) std::memcpy(lit.raw_data(), values.data(), values.size() * sizeof(T));
    return lit;
  }
  template <typename T>
  static Literal FromVector(std::vector<int64_t> dims, const std::vector<T>& values) {
    return FromVector<T>(std::move(dims), absl::Span<const T>(values));
  }
  template <typename T>
  static Literal FromVector(std::vector<int64_t> dims, std::initializer_list<T> values) {
    return FromVector<T>(std::move(dims), absl::Span<const T>(values.begin(), values.size()));
  }
  // A rank-0 array holding `value`.
  template <typename T>
  static Literal Scalar(T value) {
    return FromVector<T>({}, absl::Span<const T>(&value, 1));
  }
  // A rank-2 literal copied from an Eigen matrix (any storage order).
  template <typename Derived>
  static Literal FromEigen(const Eigen::MatrixBase<Derived>& m) {
    using T = typename Derived::Scalar;
    Literal lit = Uninitialized(Shape(DTypeOf<T>(), {m.rows(), m.cols()}));
    lit.AsMatrix<T>() = m;
    return lit;
  }

  Literal(const Literal& other);
  Literal& operator=(const Literal& other);
  Literal(Literal&&) noexcept = default;
  Literal& operator=(Literal&&) noexcept = default;

  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  // Bytes of this array's buffer (0 for a tuple).
  int64_t byte_size() const { return shape_.is_tuple() ? 0 : shape_.byte_size(); }

  // Typed views of an array literal. Precondition: DTypeOf<T>() == shape().dtype().
  template <typename T>
  absl::Span<T> data() {
    TESSEL_CHECK(!shape_.is_tuple() && DTypeOf<T>() == shape_.dtype());
    return absl::Span<T>(reinterpret_cast<T*>(buffer_.get()), num_elements());
  }
  template <typename T>
  absl::Span<const T> data() const {
    TESSEL_CHECK(!shape_.is_tuple() && DTypeOf<T>() == shape_.dtype());
    return absl::Span<const T>(reinterpret_cast<const T*>(buffer_.get()), num_elements());
  }
  std::byte* raw_data() { return buffer_.get(); }
  const std::byte* raw_data() const { return buffer_.get(); }

  // Eigen row-major view of a rank-2 array (a rank-1 array is viewed as one row, a scalar as
  // 1x1). Precondition: rank <= 2 and T matches the dtype.
  template <typename T>
  Eigen::Map<RowMajorMatrix<T>> AsMatrix() {
    auto [rows, cols] = MatrixDims();
    return Eigen::Map<RowMajorMatrix<T>>(data<T>().data(), rows, cols);
  }
  template <typename T>
  Eigen::Map<const RowMajorMatrix<T>> AsMatrix() const {
    auto [rows, cols] = MatrixDims();
    return Eigen::Map<const RowMajorMatrix<T>>(data<T>().data(), rows, cols);
  }

  // Element `linear_index` (row-major) converted to double; pred gives 0 or 1.
  double GetAsDouble(int64_t linear_index) const;
  // Stores `value` converted to the element type (rounded toward zero for integers, != 0 for
  // pred) at `linear_index`.
  void SetFromDouble(int64_t linear_index, double value);
  // All elements as doubles, row-major (for tests and printing).
  std::vector<double> ToDoubles() const;

  // A copy converted element-wise to `dtype`, with XLA `convert` semantics (float -> int
  // truncates toward zero; -> pred is `!= 0`).
  Literal Convert(DType dtype) const;
  // The same buffer viewed with new dims of the same element count.
  // Errors: kInvalidArgument when the element counts differ.
  [[nodiscard]] absl::StatusOr<Literal> Reshape(std::vector<int64_t> dims) const;

  // Tuple access. Precondition: shape().is_tuple().
  const std::vector<Literal>& tuple_elements() const { return elements_; }
  std::vector<Literal>& tuple_elements() { return elements_; }

  // XLA literal text of the values: "{ {1, 2}, {3, 4} }" for f32[2,2], "3" for a scalar,
  // "true"/"false" for pred. Floats use the shortest text that reads back to the same value.
  std::string ValuesToString() const;
  // "f32[2,2] { {1, 2}, {3, 4} }".
  std::string ToString() const;

  // Bitwise equality of shape and contents.
  bool operator==(const Literal& other) const;
  bool operator!=(const Literal& other) const { return !(*this == other); }

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  std::pair<int64_t, int64_t> MatrixDims() const;

  Shape shape_;
  std::unique_ptr<std::byte[], AlignedFree> buffer_;
  std::vector<Literal> elements_;
};

// Parses XLA literal values for an array `shape`: nested braces "{ {1, 2}, {3, 4} }", a bare
// scalar "3.5", "true"/"false", "inf", "-inf", "nan". Nesting must match the rank and every
// brace must hold exactly the dim's count of entries.
// Errors: kInvalidArgument naming the offending token and the shape, also for an integer or pred
// value the dtype cannot hold (XLA refuses it; it would be clamped).
[[nodiscard]] absl::StatusOr<Literal> ParseLiteralValues(const Shape& shape, std::string_view text);

// True when a and b have the same shape and every element satisfies
// |a - b| <= atol + rtol * |b| (NaNs equal NaNs). Used by tests and the property checker.
bool AllClose(const Literal& a, const Literal& b, double rtol, double atol);

}  // namespace tessel

#endif  // TESSEL_CORE_LITERAL_H_
