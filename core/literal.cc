#include "tessel/core/literal.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tessel/core/internal/buffer_pool.h"

namespace tessel {

namespace {

// Large buffers are reused across steps (core/internal/buffer_pool.h).
std::byte* AllocateAligned(int64_t bytes) { return internal::AllocateBuffer(bytes); }

template <typename T>
double ToDouble(T v) {
  return static_cast<double>(v);
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return 0;
    double lo = static_cast<double>(std::numeric_limits<T>::min());
    double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// Shortest decimal text that reads back to the same value of type T.
template <typename T>
std::string FormatValue(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return absl::StrCat(v);
  } else if constexpr (std::is_integral_v<T>) {
    return absl::StrCat(static_cast<int64_t>(v));
  } else {
    double d = static_cast<double>(v);
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    std::to_chars_result r;
    if constexpr (std::is_same_v<T, double>) {
      r = std::to_chars(buf, buf + sizeof(buf), d);
    } else {
      // bf16, f16 and f32 values are exactly representable as float.
      r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(d));
    }
    return std::string(buf, r.ptr);
  }
}

}  // namespace

void Literal::AlignedFree::operator()(std::byte* p) const { internal::FreeBuffer(p); }

Literal::Literal(const Shape& shape) : shape_(shape) {
  if (shape.is_tuple()) {
    for (const Shape& s : shape.tuple_shapes()) elements_.emplace_back(s);
    return;
  }
  buffer_.reset(AllocateAligned(shape.byte_size()));
  std::memset(buffer_.get(), 0, static_cast<size_t>(shape.byte_size()));
}

Literal Literal::Uninitialized(const Shape& shape) {
  if (shape.is_tuple()) return Literal(shape);
  Literal lit(Shape(DType::kPred, {}));
  lit.shape_ = shape;
  lit.buffer_.reset(AllocateAligned(shape.byte_size()));
  return lit;
}

Literal Literal::Tuple(std::vector<Literal> elements) {
  std::vector<Shape> shapes;
  for (const Literal& e : elements) shapes.push_back(e.shape());
  Literal lit(Shape::Tuple({}));
  lit.shape_ = Shape::Tuple(std::move(shapes));
  lit.elements_ = std::move(elements);
  return lit;
}

Literal::Literal(const Literal& other) : shape_(other.shape_), elements_(other.elements_) {
  if (other.buffer_) {
    buffer_.reset(AllocateAligned(other.byte_size()));
    std::memcpy(buffer_.get(), other.buffer_.get(), static_cast<size_t>(other.byte_size()));
  }
}

Literal& Literal::operator=(const Literal& other) {
  if (this != &other) {
    Literal copy(other);
    *this = std::move(copy);
  }
  return *this;
}

std::pair<int64_t, int64_t> Literal::MatrixDims() const {
  TESSEL_CHECK(!shape_.is_tuple() && shape_.rank() <= 2);
  if (shape_.rank() == 0) return {1, 1};
  if (shape_.rank() == 1) return {1, shape_.dim(0)};
  return {shape_.dim(0), shape_.dim(1)};
}

double Literal::GetAsDouble(int64_t linear_index) const {
  return VisitDType(shape_.dtype(),
                    [&]<typename T>() { return ToDouble<T>(data<T>()[linear_index]); });
}

void Literal::SetFromDouble(int64_t linear_index, double value) {
  VisitDType(shape_.dtype(), [&]<typename T>() { data<T>()[linear_index] = FromDouble<T>(value); });
}

std::vector<double> Literal::ToDoubles() const {
  std::vector<double> out(num_elements());
  for (int64_t i = 0; i < num_elements(); ++i) out[i] = GetAsDouble(i);
  return out;
}

Literal Literal::Convert(DType dtype) const {
  TESSEL_CHECK(!shape_.is_tuple());
  Literal out = Uninitialized(shape_.WithDType(dtype));
  VisitDType(shape_.dtype(), [&]<typename From>() {
    VisitDType(dtype, [&]<typename To>() {
      auto src = data<From>();
      auto dst = out.data<To>();
      for (size_t i = 0; i < src.size(); ++i) {
        if constexpr (std::is_same_v<From, To>) {
          dst[i] = src[i];
        } else {
          dst[i] = FromDouble<To>(ToDouble<From>(src[i]));
        }
      }
    });
  });
  return out;
}

absl::StatusOr<Literal> Literal::Reshape(std::vector<int64_t> dims) const {
  Shape target(shape_.dtype(), std::move(dims));
  if (shape_.is_tuple() || target.num_elements() != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_.ToString(), " to ",
                                                   target.ToString(), ": element counts differ"));
  }
  Literal out = *this;
  out.shape_ = target;
  return out;
}

std::string Literal::ValuesToString() const {
  if (shape_.is_tuple()) {
    std::vector<std::string> parts;
    for (const Literal& e : elements_) parts.push_back(e.ValuesToString());
    return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
  }
  return VisitDType(shape_.dtype(), [&]<typename T>() -> std::string {
    auto values = data<T>();
    if (shape_.rank() == 0) return FormatValue<T>(values[0]);
    std::string out;
    std::vector<int64_t> strides = shape_.strides();
    // Recursive printer over dims.
    auto print = [&](auto&& self, int64_t dim, int64_t offset) -> void {
      out += "{";
      for (int64_t i = 0; i < shape_.dim(dim); ++i) {
        if (i > 0) out += ", ";
        if (dim + 1 == shape_.rank()) {
          out += FormatValue<T>(values[offset + i]);
        } else {
          self(self, dim + 1, offset + i * strides[dim]);
        }
      }
      out += "}";
    };
    print(print, 0, 0);
    return out;
  });
}

std::string Literal::ToString() const {
  return absl::StrCat(shape_.ToString(), " ", ValuesToString());
}

bool Literal::operator==(const Literal& other) const {
  if (shape_ != other.shape_) return false;
  if (shape_.is_tuple()) return elements_ == other.elements_;
  return std::memcmp(buffer_.get(), other.buffer_.get(), static_cast<size_t>(byte_size())) == 0;
}

namespace {

class ValueParser {
 public:
  ValueParser(const Shape& shape, std::string_view text) : shape_(shape), text_(text) {}

  absl::StatusOr<Literal> Parse() {
    Literal lit(shape_);
    std::vector<int64_t> strides = shape_.strides();
    if (shape_.rank() == 0) {
      SkipSpace();
      // XLA prints scalars bare; also accept "{3}".
      bool braced = Consume('{');
      TESSEL_RETURN_IF_ERROR(ParseNumber(lit, 0));
      if (braced && !Consume('}')) return Error("expected '}'");
    } else {
      TESSEL_RETURN_IF_ERROR(ParseDim(lit, strides, 0, 0));
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected trailing text");
    return lit;
  }

 private:
  absl::Status ParseDim(Literal& lit, const std::vector<int64_t>& strides, int64_t dim,
                        int64_t offset) {
    if (!Consume('{')) return Error(absl::StrCat("expected '{' for dimension ", dim));
    for (int64_t i = 0; i < shape_.dim(dim); ++i) {
      if (i > 0 && !Consume(',')) {
        return Error(absl::StrCat("expected ',' or too few entries in dimension ", dim, " (size ",
                                  shape_.dim(dim), ")"));
      }
      if (dim + 1 == shape_.rank()) {
        TESSEL_RETURN_IF_ERROR(ParseNumber(lit, offset + i));
      } else {
        TESSEL_RETURN_IF_ERROR(ParseDim(lit, strides, dim + 1, offset + i * strides[dim]));
      }
    }
    if (!Consume('}')) {
      return Error(absl::StrCat("expected '}': too many entries in dimension ", dim, " (size ",
                                shape_.dim(dim), ")"));
    }
    return absl::OkStatus();
  }

  absl::Status ParseNumber(Literal& lit, int64_t index) {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' && text_[pos_] != ' ' &&
           text_[pos_] != '\n') {
      ++pos_;
    }
    std::string token(text_.substr(start, pos_ - start));
    double value;
    if (token == "true") {
      value = 1;
    } else if (token == "false") {
      value = 0;
    } else if (token == "inf" || token == "+inf") {
      value = std::numeric_limits<double>::infinity();
    } else if (token == "-inf") {
      value = -std::numeric_limits<double>::infinity();
    } else if (token == "nan" || token == "-nan") {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (!absl::SimpleAtod(token, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad literal value \"", token, "\" for ", shape_.ToString()));
    }
    const DType dtype = shape_.dtype();
    if (dtype == DType::kS64) {
      int64_t iv;  // keep full 64-bit precision
      if (absl::SimpleAtoi(token, &iv)) {
        lit.data<int64_t>()[index] = iv;
        return absl::OkStatus();
      }
    }
    if (dtype == DType::kU64) {
      uint64_t uv;
      if (absl::SimpleAtoi(token, &uv)) {
        lit.data<uint64_t>()[index] = uv;
        return absl::OkStatus();
      }
    }
    // A value the type cannot hold is refused, as XLA does: storing it would clamp or wrap it
    // (s32 99999999999 became 2147483647, pred 2 became true) and change the program.
    if (std::optional<std::pair<double, double>> range = IntegerRange(dtype)) {
      const bool word = token == "true" || token == "false";
      const bool wide = dtype == DType::kS64 || dtype == DType::kU64;  // fits: stored above
      if (wide || !(value == std::floor(value)) || value < range->first || value > range->second ||
          (dtype != DType::kPred && word)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("literal value \"%s\" is outside %s (%.0f to %.0f) in %s", token,
                            DTypeName(dtype), range->first, range->second, shape_.ToString()));
      }
    }
    lit.SetFromDouble(index, value);
    return absl::OkStatus();
  }

  // The values an integer (or pred) dtype holds, or nullopt for a floating dtype. s64 and u64
  // values that fit were stored above from their digits, so any that reach the check are out of
  // range: their (empty) range says so.
  static std::optional<std::pair<double, double>> IntegerRange(DType dtype) {
    switch (dtype) {
      case DType::kPred:
        return std::make_pair(0.0, 1.0);
      case DType::kU8:
        return std::make_pair(0.0, 255.0);
      case DType::kS32:
        return std::make_pair(-2147483648.0, 2147483647.0);
      case DType::kU32:
        return std::make_pair(0.0, 4294967295.0);
      case DType::kS64:
        return std::make_pair(-9223372036854775808.0, 9223372036854775807.0);
      case DType::kU64:
        return std::make_pair(0.0, 18446744073709551615.0);
      default:
        return std::nullopt;
    }
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status Error(std::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("bad literal for ", shape_.ToString(), " at \"",
                                                   std::string(text_.substr(pos_, 20)),
                                                   "\": ", std::string(why)));
  }

  const Shape& shape_;
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Literal> ParseLiteralValues(const Shape& shape, std::string_view text) {
  if (shape.is_tuple()) {
    return absl::InvalidArgumentError("tuple literals are not supported in constant text");
  }
  return ValueParser(shape, text).Parse();
}

bool AllClose(const Literal& a, const Literal& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  if (a.shape().is_tuple()) {
    for (size_t i = 0; i < a.tuple_elements().size(); ++i) {
      if (!AllClose(a.tuple_elements()[i], b.tuple_elements()[i], rtol, atol)) return false;
    }
    return true;
  }
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (x == y) continue;  // equal infinities
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) return false;
  }
  return true;
}

}  // namespace tessel
