#include "tessel/core/shape.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tessel/core/status_macros.h"

namespace tessel {

Shape::Shape(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  for (int64_t d : dims_) TESSEL_CHECK(d >= 0);
}

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape s;
  s.is_tuple_ = true;
  s.tuple_shapes_ = std::move(elements);
  return s;
}

int64_t Shape::num_elements() const {
  if (is_tuple_) return 0;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

absl::StatusOr<int64_t> CheckedByteSize(const Shape& shape) {
  int64_t bytes = 0;
  bool overflow = false;
  if (shape.is_tuple()) {
    for (const Shape& e : shape.tuple_shapes()) {
      absl::StatusOr<int64_t> element = CheckedByteSize(e);
      if (!element.ok()) return element.status();
      overflow = overflow || __builtin_add_overflow(bytes, *element, &bytes);
    }
  } else {
    bytes = ByteWidth(shape.dtype());
    for (int64_t d : shape.dims()) overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
  }
  if (overflow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", shape.ToString(), " is too large: its buffer needs more than 2^63 - 1 bytes"));
  }
  return bytes;
}

int64_t Shape::byte_size() const {
  if (is_tuple_) {
    int64_t total = 0;
    for (const Shape& s : tuple_shapes_) total += s.byte_size();
    return total;
  }
  return num_elements() * ByteWidth(dtype_);
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> strides(dims_.size(), 1);
  for (int64_t i = rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims_[i + 1];
  return strides;
}

Shape Shape::WithDType(DType dtype) const {
  Shape s = *this;
  s.dtype_ = dtype;
  return s;
}

std::string DimsToString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

std::string Shape::ToString() const {
  if (is_tuple_) {
    std::vector<std::string> parts;
    for (const Shape& s : tuple_shapes_) parts.push_back(s.ToString());
    return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
  }
  return absl::StrCat(std::string(DTypeName(dtype_)), DimsToString(dims_));
}

bool Shape::operator==(const Shape& other) const {
  if (is_tuple_ != other.is_tuple_) return false;
  if (is_tuple_) return tuple_shapes_ == other.tuple_shapes_;
  return dtype_ == other.dtype_ && dims_ == other.dims_;
}

namespace {

absl::Status ShapeError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad shape \"", text, "\": ", why));
}

// Parses one shape at the front of `*rest`, consuming it.
absl::StatusOr<Shape> ParseShapePrefix(absl::string_view full, absl::string_view* rest) {
  absl::string_view& s = *rest;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (absl::ConsumePrefix(&s, "(")) {
    std::vector<Shape> elements;
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    if (absl::ConsumePrefix(&s, ")")) return Shape::Tuple({});
    while (true) {
      TESSEL_ASSIGN_OR_RETURN(Shape e, ParseShapePrefix(full, &s));
      elements.push_back(std::move(e));
      while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
      if (absl::ConsumePrefix(&s, ",")) continue;
      if (absl::ConsumePrefix(&s, ")")) break;
      return ShapeError(full, "expected ',' or ')' in tuple shape");
    }
    return Shape::Tuple(std::move(elements));
  }
  size_t bracket = s.find('[');
  if (bracket == absl::string_view::npos) return ShapeError(full, "expected '[' after the type");
  absl::string_view type_name = s.substr(0, bracket);
  TESSEL_ASSIGN_OR_RETURN(DType dtype,
                          ParseDType(std::string_view(type_name.data(), type_name.size())));
  size_t close = s.find(']', bracket);
  if (close == absl::string_view::npos) return ShapeError(full, "missing ']'");
  absl::string_view dims_text = s.substr(bracket + 1, close - bracket - 1);
  std::vector<int64_t> dims;
  if (!dims_text.empty()) {
    for (absl::string_view d : absl::StrSplit(dims_text, ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(d, &v) || v < 0) {
        return ShapeError(
            full, absl::StrCat("dimension \"", std::string(d), "\" is not a non-negative integer"));
      }
      dims.push_back(v);
    }
  }
  s.remove_prefix(close + 1);
  // Optional layout such as {1,0}: accepted and ignored (Tessel is always row-major).
  if (!s.empty() && s.front() == '{') {
    size_t end = s.find('}');
    if (end == absl::string_view::npos) return ShapeError(full, "missing '}' after the layout");
    s.remove_prefix(end + 1);
  }
  return Shape(dtype, std::move(dims));
}

}  // namespace

absl::StatusOr<Shape> ParseShape(std::string_view text) {
  absl::string_view full(text.data(), text.size());
  absl::string_view rest = full;
  TESSEL_ASSIGN_OR_RETURN(Shape shape, ParseShapePrefix(full, &rest));
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (!rest.empty()) {
    return ShapeError(full, absl::StrCat("unexpected trailing text \"", std::string(rest), "\""));
  }
  return shape;
}

}  // namespace tessel
