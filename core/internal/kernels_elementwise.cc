// Elementwise kernels: unary ops, convert, binary ops, compare, select, clamp.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"

namespace tessel::internal {
namespace {

absl::Status TypeError(Opcode opcode, DType dtype) {
  return absl::InvalidArgumentError(
      absl::StrCat(OpcodeName(opcode), ": element type ", DTypeName(dtype), " is not supported"));
}

// out[i] = f(x[i]) over `n` elements, in ComputeT<T>.
template <typename T, typename F>
void MapUnary(const KernelContext& ctx, const T* x, T* out, int64_t n, F f) {
  ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = StoreAs<T>(f(Load(x[i])));
  });
}

// Transcendental ops on f32/f64 through Eigen's vectorised array functions, chunk by chunk.
template <typename T, typename F>
void MapUnaryEigen(const KernelContext& ctx, const T* x, T* out, int64_t n, F f) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    Eigen::Map<const Array> in(x + begin, end - begin);
    Eigen::Map<Array> result(out + begin, end - begin);
    f(in, result);
  });
}

template <typename T>
absl::Status UnaryFloat(const KernelContext& ctx, Opcode opcode, const T* x, T* out, int64_t n) {
  using C = ComputeT<T>;
  if constexpr (std::is_same_v<T, C>) {
    switch (opcode) {
      case Opcode::kExp:
        MapUnaryEigen(ctx, x, out, n, [](const auto& in, auto& r) {
          r = in.exp();
          // Eigen clamps its argument at about ln(min normal), so below that its packet exp
          // returns a fixed tiny value (2.9e-39 for f32 on the SSE2 path, even for -inf)
          // instead of the subnormal or zero the true result rounds to. The few inputs there
          // take the scalar libm exp, which is correctly rounded enough and gives exp(-inf) = 0.
          const T lowest_normal_log = std::log(std::numeric_limits<T>::min());
          for (Eigen::Index i = 0; i < in.size(); ++i) {
            if (in[i] < lowest_normal_log) r[i] = std::exp(in[i]);
          }
        });
        return absl::OkStatus();
      case Opcode::kLog:
        MapUnaryEigen(ctx, x, out, n, [](const auto& in, auto& r) { r = in.log(); });
        return absl::OkStatus();
      case Opcode::kTanh:
        MapUnaryEigen(ctx, x, out, n, [](const auto& in, auto& r) { r = in.tanh(); });
        return absl::OkStatus();
      case Opcode::kLogistic:
        MapUnaryEigen(ctx, x, out, n, [](const auto& in, auto& r) { r = in.logistic(); });
        return absl::OkStatus();
      case Opcode::kSine:
        MapUnaryEigen(ctx, x, out, n, [](const auto& in, auto& r) { r = in.sin(); });
        return absl::OkStatus();
      case Opcode::kCosine:
        MapUnaryEigen(ctx, x, out, n, [](const auto& in, auto& r) { r = in.cos(); });
        return absl::OkStatus();
      default:
        break;
    }
  }
  switch (opcode) {
    case Opcode::kAbs:
      MapUnary(ctx, x, out, n, [](C v) { return std::abs(v); });
      break;
    case Opcode::kNegate:
      MapUnary(ctx, x, out, n, [](C v) { return -v; });
      break;
    case Opcode::kExp:
      MapUnary(ctx, x, out, n, [](C v) { return std::exp(v); });
      break;
    case Opcode::kLog:
      MapUnary(ctx, x, out, n, [](C v) { return std::log(v); });
      break;
    case Opcode::kTanh:
      MapUnary(ctx, x, out, n, [](C v) { return std::tanh(v); });
      break;
    case Opcode::kLogistic:
      MapUnary(ctx, x, out, n, [](C v) { return C(1) / (C(1) + std::exp(-v)); });
      break;
    case Opcode::kSqrt:
      MapUnary(ctx, x, out, n, [](C v) { return std::sqrt(v); });
      break;
    case Opcode::kRsqrt:
      MapUnary(ctx, x, out, n, [](C v) { return C(1) / std::sqrt(v); });
      break;
    case Opcode::kSine:
      MapUnary(ctx, x, out, n, [](C v) { return std::sin(v); });
      break;
    case Opcode::kCosine:
      MapUnary(ctx, x, out, n, [](C v) { return std::cos(v); });
      break;
    case Opcode::kErf:
      MapUnary(ctx, x, out, n, [](C v) { return std::erf(v); });
      break;
    default:
      return TypeError(opcode, DTypeOf<T>());
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status UnaryInteger(const KernelContext& ctx, Opcode opcode, const T* x, T* out, int64_t n) {
  if constexpr (!std::is_same_v<T, bool>) {
    if (opcode == Opcode::kAbs) {
      MapUnary(ctx, x, out, n, [](T v) { return WrapAbs(v); });
      return absl::OkStatus();
    }
    if (opcode == Opcode::kNegate) {
      MapUnary(ctx, x, out, n, [](T v) { return WrapNeg(v); });
      return absl::OkStatus();
    }
  }
  if constexpr (!std::is_same_v<T, bool>) {
    if (opcode == Opcode::kPopcnt) {
      MapUnary(ctx, x, out, n, [](T v) {
        return static_cast<T>(std::popcount(static_cast<std::make_unsigned_t<T>>(v)));
      });
      return absl::OkStatus();
    }
  }
  switch (opcode) {
    case Opcode::kNot:
      if constexpr (std::is_same_v<T, bool>) {
        MapUnary(ctx, x, out, n, [](bool v) { return !v; });
      } else {
        MapUnary(ctx, x, out, n, [](T v) { return static_cast<T>(~v); });
      }
      break;
    default:
      return TypeError(opcode, DTypeOf<T>());
  }
  return absl::OkStatus();
}

// XLA convert of one element: float -> int truncates toward zero and saturates (NaN -> 0),
// int -> int wraps, -> pred is `!= 0`, bf16/f16 round to nearest even from f32.
template <typename To, typename From>
To ConvertValue(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return Load(v) != ComputeT<From>(0);
  } else if constexpr (std::is_same_v<From, bool>) {
    return StoreAs<To>(ComputeT<To>(v ? 1 : 0));
  } else if constexpr (kIsFloating<From> && std::is_integral_v<To>) {
    double d = static_cast<double>(Load(v));
    if (std::isnan(d)) return To(0);
    if (d <= static_cast<double>(std::numeric_limits<To>::min())) {
      return std::numeric_limits<To>::min();
    }
    if (d >= static_cast<double>(std::numeric_limits<To>::max())) {
      return std::numeric_limits<To>::max();
    }
    return static_cast<To>(d);
  } else if constexpr (std::is_integral_v<From> && std::is_integral_v<To>) {
    return static_cast<To>(v);
  } else {
    // To is floating: int -> float, or float -> float. bf16/f16 round from f32.
    return StoreAs<To>(static_cast<ComputeT<To>>(Load(v)));
  }
}

// dst[i] = convert(src[i]) for i in [0, n).
void ConvertBuffer(const KernelContext& ctx, DType from, DType to, const void* src, void* dst,
                   int64_t n) {
  VisitDType(from, [&]<typename From>() {
    VisitDType(to, [&]<typename To>() {
      const From* in = static_cast<const From*>(src);
      To* out = static_cast<To*>(dst);
      ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = ConvertValue<To, From>(in[i]);
      });
    });
  });
}

Literal Convert(const KernelContext& ctx, const Literal& x, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  int64_t n = x.num_elements();
  VisitDType(x.shape().dtype(), [&]<typename From>() {
    VisitDType(shape.dtype(), [&]<typename To>() {
      const From* src = x.data<From>().data();
      To* dst = out.data<To>().data();
      ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = ConvertValue<To, From>(src[i]);
      });
    });
  });
  return out;
}

// ---- Binary ----

template <typename T>
T IntegerPow(T base, T exponent) {
  if constexpr (std::is_signed_v<T>) {
    // XLA: a negative exponent gives 1 for base 1 and 0 otherwise.
    if (exponent < 0) return base == 1 ? T(1) : T(0);
  }
  T result = 1;
  while (exponent != 0) {
    if (exponent & 1) result = WrapMul(result, base);
    exponent = static_cast<T>(exponent >> 1);
    base = WrapMul(base, base);
  }
  return result;
}

template <typename T>
T IntegerDivide(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == 0) return T(-1);
    if (a == std::numeric_limits<T>::min() && b == T(-1)) return a;
  } else {
    if (b == 0) return std::numeric_limits<T>::max();
  }
  return static_cast<T>(a / b);
}

// XLA's integer remainder: the sign of the dividend (C++ %), x % 0 == x, INT_MIN % -1 == 0.
template <typename T>
T IntegerRemainder(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}

// XLA's shifts take the amount as unsigned: an amount >= the bit width (a negative one too)
// shifts everything out: 0, or for an arithmetic right shift the sign (0 or -1).
template <typename T>
T ShiftLeft(T a, T b) {
  using U = std::make_unsigned_t<T>;
  const U amount = static_cast<U>(b);
  if (amount >= sizeof(T) * 8) return T(0);
  return static_cast<T>(static_cast<U>(static_cast<U>(a) << amount));
}
template <typename T>
T ShiftRightLogical(T a, T b) {
  using U = std::make_unsigned_t<T>;
  const U amount = static_cast<U>(b);
  if (amount >= sizeof(T) * 8) return T(0);
  return static_cast<T>(static_cast<U>(a) >> amount);
}
template <typename T>
T ShiftRightArithmetic(T a, T b) {
  using U = std::make_unsigned_t<T>;
  using S = std::make_signed_t<T>;
  const U amount = static_cast<U>(b);
  const S value = static_cast<S>(a);
  if (amount >= sizeof(T) * 8) return static_cast<T>(value < 0 ? S(-1) : S(0));
  return static_cast<T>(static_cast<S>(value >> amount));
}

template <typename T, typename R, typename F>
void MapBinary(const KernelContext& ctx, const T* a, const T* b, R* out, int64_t n, F f) {
  ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = StoreAs<R>(f(Load(a[i]), Load(b[i])));
  });
}

template <typename T>
absl::Status BinaryArithmetic(const KernelContext& ctx, Opcode opcode, const T* a, const T* b,
                              T* out, int64_t n) {
  using C = ComputeT<T>;
  if constexpr (kIsFloating<T>) {
    switch (opcode) {
      case Opcode::kAdd:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return x + y; });
        return absl::OkStatus();
      case Opcode::kSubtract:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return x - y; });
        return absl::OkStatus();
      case Opcode::kMultiply:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return x * y; });
        return absl::OkStatus();
      case Opcode::kDivide:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return x / y; });
        return absl::OkStatus();
      case Opcode::kMaximum:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return FloatMax(x, y); });
        return absl::OkStatus();
      case Opcode::kMinimum:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return FloatMin(x, y); });
        return absl::OkStatus();
      case Opcode::kPower:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return std::pow(x, y); });
        return absl::OkStatus();
      case Opcode::kRemainder:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return std::fmod(x, y); });
        return absl::OkStatus();
      case Opcode::kAtan2:
        MapBinary(ctx, a, b, out, n, [](C x, C y) { return std::atan2(x, y); });
        return absl::OkStatus();
      default:
        return TypeError(opcode, DTypeOf<T>());
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (opcode) {
      case Opcode::kAnd:
        MapBinary(ctx, a, b, out, n, [](bool x, bool y) { return x && y; });
        return absl::OkStatus();
      case Opcode::kOr:
        MapBinary(ctx, a, b, out, n, [](bool x, bool y) { return x || y; });
        return absl::OkStatus();
      case Opcode::kXor:
        MapBinary(ctx, a, b, out, n, [](bool x, bool y) { return x != y; });
        return absl::OkStatus();
      default:
        return TypeError(opcode, DTypeOf<T>());
    }
  } else {
    switch (opcode) {
      case Opcode::kAdd:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return WrapAdd(x, y); });
        return absl::OkStatus();
      case Opcode::kSubtract:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return WrapSub(x, y); });
        return absl::OkStatus();
      case Opcode::kMultiply:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return WrapMul(x, y); });
        return absl::OkStatus();
      case Opcode::kDivide:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return IntegerDivide(x, y); });
        return absl::OkStatus();
      case Opcode::kMaximum:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return x > y ? x : y; });
        return absl::OkStatus();
      case Opcode::kMinimum:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return x < y ? x : y; });
        return absl::OkStatus();
      case Opcode::kPower:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return IntegerPow(x, y); });
        return absl::OkStatus();
      case Opcode::kAnd:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return static_cast<T>(x & y); });
        return absl::OkStatus();
      case Opcode::kOr:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return static_cast<T>(x | y); });
        return absl::OkStatus();
      case Opcode::kXor:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return static_cast<T>(x ^ y); });
        return absl::OkStatus();
      case Opcode::kRemainder:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return IntegerRemainder(x, y); });
        return absl::OkStatus();
      case Opcode::kShiftLeft:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return ShiftLeft(x, y); });
        return absl::OkStatus();
      case Opcode::kShiftRightLogical:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return ShiftRightLogical(x, y); });
        return absl::OkStatus();
      case Opcode::kShiftRightArithmetic:
        MapBinary(ctx, a, b, out, n, [](T x, T y) { return ShiftRightArithmetic(x, y); });
        return absl::OkStatus();
      default:
        return TypeError(opcode, DTypeOf<T>());
    }
  }
}

template <typename T>
void CompareKernel(const KernelContext& ctx, ComparisonDirection direction, const T* a, const T* b,
                   bool* out, int64_t n) {
  using C = ComputeT<T>;
  switch (direction) {
    case ComparisonDirection::kEq:
      MapBinary(ctx, a, b, out, n, [](C x, C y) { return x == y; });
      break;
    case ComparisonDirection::kNe:
      MapBinary(ctx, a, b, out, n, [](C x, C y) { return x != y; });
      break;
    case ComparisonDirection::kLt:
      MapBinary(ctx, a, b, out, n, [](C x, C y) { return x < y; });
      break;
    case ComparisonDirection::kLe:
      MapBinary(ctx, a, b, out, n, [](C x, C y) { return x <= y; });
      break;
    case ComparisonDirection::kGt:
      MapBinary(ctx, a, b, out, n, [](C x, C y) { return x > y; });
      break;
    case ComparisonDirection::kGe:
      MapBinary(ctx, a, b, out, n, [](C x, C y) { return x >= y; });
      break;
  }
}

// The bit layout of a floating type: the unsigned integer of its width and its field sizes.
template <typename T>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = uint32_t;
  static constexpr int kMantissa = 23, kExponent = 8;
};
template <>
struct FloatBits<double> {
  using U = uint64_t;
  static constexpr int kMantissa = 52, kExponent = 11;
};
template <>
struct FloatBits<bf16> {
  using U = uint16_t;
  static constexpr int kMantissa = 7, kExponent = 8;
};
template <>
struct FloatBits<f16> {
  using U = uint16_t;
  static constexpr int kMantissa = 10, kExponent = 5;
};

// XLA's EmitReducePrecisionIR on the raw bits of one value.
template <typename T>
T ReducePrecisionValue(T value, int64_t exponent_bits, int64_t mantissa_bits) {
  using U = typename FloatBits<T>::U;
  constexpr int kMantissa = FloatBits<T>::kMantissa, kExponent = FloatBits<T>::kExponent;
  U x = std::bit_cast<U>(value);
  if (mantissa_bits < kMantissa) {
    // Round to nearest even at the last kept bit: add half an ulp minus one, plus the kept LSB.
    const int shift = kMantissa - static_cast<int>(mantissa_bits);
    const U last_kept = U(1) << shift;
    const U bias = static_cast<U>((last_kept >> 1) - 1 + ((x & last_kept) >> shift));
    x = static_cast<U>((x + bias) & ~static_cast<U>(last_kept - 1));
  }
  if (exponent_bits < kExponent) {
    const U sign = U(1) << (kMantissa + kExponent);
    const U exponent_mask = static_cast<U>(((U(1) << kExponent) - 1) << kMantissa);
    const U bias = (U(1) << (kExponent - 1)) - 1;
    const U reduced_bias = (U(1) << (exponent_bits - 1)) - 1;
    const U x_exponent = x & exponent_mask;
    if (x_exponent > static_cast<U>((bias + reduced_bias) << kMantissa)) {
      x = static_cast<U>((x & sign) | exponent_mask);
    } else if (x_exponent <= static_cast<U>((bias - reduced_bias) << kMantissa)) {
      x = x & sign;
    }
  }
  // The rounding may have carried a NaN's payload into the exponent or cleared it; XLA keeps
  // NaN inputs as they are.
  if (std::isnan(Load(value))) return value;
  return std::bit_cast<T>(x);
}

Literal BitcastConvert(const Literal& x, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  std::memcpy(out.raw_data(), x.raw_data(), x.num_elements() * ByteWidth(x.shape().dtype()));
  return out;
}

}  // namespace

Literal ReducePrecision(const KernelContext& ctx, const Literal& x, int64_t exponent_bits,
                        int64_t mantissa_bits) {
  Literal out = Literal::Uninitialized(x.shape());
  VisitDType(x.shape().dtype(), [&]<typename T>() {
    if constexpr (kIsFloating<T>) {
      const T* src = x.data<T>().data();
      T* dst = out.data<T>().data();
      ParallelFor(ctx, x.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          dst[i] = ReducePrecisionValue(src[i], exponent_bits, mantissa_bits);
        }
      });
    }
  });
  return out;
}

absl::StatusOr<Literal> Unary(const KernelContext& ctx, Opcode opcode, const Literal& x,
                              const Shape& shape) {
  if (opcode == Opcode::kConvert) return Convert(ctx, x, shape);
  if (opcode == Opcode::kBitcastConvert) return BitcastConvert(x, shape);
  if (opcode == Opcode::kCopy) return Literal(x);
  if (opcode == Opcode::kIsFinite) {
    Literal out = Literal::Uninitialized(shape);
    bool* dst = out.data<bool>().data();
    VisitDType(x.shape().dtype(), [&]<typename T>() {
      if constexpr (kIsFloating<T>) {
        const T* src = x.data<T>().data();
        ParallelFor(ctx, x.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) dst[i] = std::isfinite(Load(src[i]));
        });
      }
    });
    return out;
  }
  Literal out = Literal::Uninitialized(shape);
  int64_t n = x.num_elements();
  absl::Status status = VisitDType(x.shape().dtype(), [&]<typename T>() -> absl::Status {
    const T* src = x.data<T>().data();
    T* dst = out.data<T>().data();
    if constexpr (kIsFloating<T>) {
      return UnaryFloat<T>(ctx, opcode, src, dst, n);
    } else {
      return UnaryInteger<T>(ctx, opcode, src, dst, n);
    }
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<Literal> Binary(const KernelContext& ctx, Opcode opcode,
                               ComparisonDirection direction, const Literal& a, const Literal& b,
                               const Shape& shape) {
  TESSEL_CHECK(a.shape() == b.shape());
  Literal out = Literal::Uninitialized(shape);
  int64_t n = a.num_elements();
  absl::Status status = VisitDType(a.shape().dtype(), [&]<typename T>() -> absl::Status {
    const T* pa = a.data<T>().data();
    const T* pb = b.data<T>().data();
    if (opcode == Opcode::kCompare) {
      CompareKernel<T>(ctx, direction, pa, pb, out.data<bool>().data(), n);
      return absl::OkStatus();
    }
    return BinaryArithmetic<T>(ctx, opcode, pa, pb, out.data<T>().data(), n);
  });
  if (!status.ok()) return status;
  return out;
}

Literal Select(const KernelContext& ctx, const Literal& pred, const Literal& on_true,
               const Literal& on_false, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  int64_t n = shape.num_elements();
  const bool* p = pred.data<bool>().data();
  const bool scalar_pred = pred.shape().rank() == 0 && shape.rank() != 0;
  VisitDType(shape.dtype(), [&]<typename T>() {
    const T* t = on_true.data<T>().data();
    const T* f = on_false.data<T>().data();
    T* dst = out.data<T>().data();
    if (scalar_pred) {
      std::memcpy(dst, p[0] ? t : f, static_cast<size_t>(n) * sizeof(T));
      return;
    }
    ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = p[i] ? t[i] : f[i];
    });
  });
  return out;
}

Literal Clamp(const KernelContext& ctx, const Literal& min, const Literal& x, const Literal& max,
              const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  int64_t n = shape.num_elements();
  // Stride 0 reads a scalar bound for every element.
  const int64_t min_stride = min.shape().rank() == 0 ? 0 : 1;
  const int64_t max_stride = max.shape().rank() == 0 ? 0 : 1;
  VisitDType(shape.dtype(), [&]<typename T>() {
    using C = ComputeT<T>;
    const T* lo = min.data<T>().data();
    const T* hi = max.data<T>().data();
    const T* src = x.data<T>().data();
    T* dst = out.data<T>().data();
    ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        C v = Load(src[i]);
        C l = Load(lo[i * min_stride]);
        C h = Load(hi[i * max_stride]);
        if constexpr (kIsFloating<T>) {
          dst[i] = StoreAs<T>(FloatMin(FloatMax(v, l), h));
        } else {
          v = v < l ? l : v;
          dst[i] = v > h ? h : v;
        }
      }
    });
  });
  return out;
}

absl::Status ElementwiseOnBuffers(Opcode opcode, ComparisonDirection direction, DType operand_dtype,
                                  DType result_dtype, absl::Span<const void* const> operands,
                                  void* out, int64_t n) {
  // One thread: the fused loop that calls this already runs inside a parallel chunk.
  const KernelContext ctx{1};
  switch (opcode) {
    case Opcode::kConvert:
      ConvertBuffer(ctx, operand_dtype, result_dtype, operands[0], out, n);
      return absl::OkStatus();
    case Opcode::kCopy:
      if (n > 0) std::memcpy(out, operands[0], static_cast<size_t>(n) * ByteWidth(result_dtype));
      return absl::OkStatus();
    case Opcode::kIsFinite:
      return VisitDType(operand_dtype, [&]<typename T>() -> absl::Status {
        if constexpr (kIsFloating<T>) {
          const T* src = static_cast<const T*>(operands[0]);
          bool* dst = static_cast<bool*>(out);
          for (int64_t i = 0; i < n; ++i) dst[i] = std::isfinite(Load(src[i]));
          return absl::OkStatus();
        } else {
          return TypeError(opcode, operand_dtype);
        }
      });
    case Opcode::kSelect:
      return VisitDType(result_dtype, [&]<typename T>() -> absl::Status {
        const bool* p = static_cast<const bool*>(operands[0]);
        const T* t = static_cast<const T*>(operands[1]);
        const T* f = static_cast<const T*>(operands[2]);
        T* dst = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) dst[i] = p[i] ? t[i] : f[i];
        return absl::OkStatus();
      });
    case Opcode::kClamp:
      return VisitDType(result_dtype, [&]<typename T>() -> absl::Status {
        using C = ComputeT<T>;
        const T* lo = static_cast<const T*>(operands[0]);
        const T* src = static_cast<const T*>(operands[1]);
        const T* hi = static_cast<const T*>(operands[2]);
        T* dst = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) {
          C v = Load(src[i]);
          C l = Load(lo[i]);
          C h = Load(hi[i]);
          if constexpr (kIsFloating<T>) {
            dst[i] = StoreAs<T>(FloatMin(FloatMax(v, l), h));
          } else {
            v = v < l ? l : v;
            dst[i] = v > h ? h : v;
          }
        }
        return absl::OkStatus();
      });
    default:
      break;
  }
  if (operands.size() == 1) {
    return VisitDType(operand_dtype, [&]<typename T>() -> absl::Status {
      const T* src = static_cast<const T*>(operands[0]);
      T* dst = static_cast<T*>(out);
      if constexpr (kIsFloating<T>) {
        return UnaryFloat<T>(ctx, opcode, src, dst, n);
      } else {
        return UnaryInteger<T>(ctx, opcode, src, dst, n);
      }
    });
  }
  return VisitDType(operand_dtype, [&]<typename T>() -> absl::Status {
    const T* pa = static_cast<const T*>(operands[0]);
    const T* pb = static_cast<const T*>(operands[1]);
    if (opcode == Opcode::kCompare) {
      CompareKernel<T>(ctx, direction, pa, pb, static_cast<bool*>(out), n);
      return absl::OkStatus();
    }
    return BinaryArithmetic<T>(ctx, opcode, pa, pb, static_cast<T*>(out), n);
  });
}

}  // namespace tessel::internal
