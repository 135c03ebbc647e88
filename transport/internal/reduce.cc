#include "tessel/transport/internal/reduce.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::transport::internal {
namespace {

template <typename T>
bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
    return Eigen::numext::isnan(x);
  } else {
    return false;
  }
}

// Integer arithmetic in the unsigned type of the same width: defined wrap-around.
template <typename T>
T WrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
T WrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  // uint8_t promotes to int; 255 * 255 fits, so the product is exact before truncation.
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

template <typename T, ReduceKind kKind>
inline T Apply(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    if constexpr (kKind == ReduceKind::kAdd || kKind == ReduceKind::kMaximum ||
                  kKind == ReduceKind::kOr) {
      return a || b;
    } else {
      return a && b;
    }
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (kKind == ReduceKind::kAdd) return WrapAdd(a, b);
    if constexpr (kKind == ReduceKind::kMultiply) return WrapMul(a, b);
    if constexpr (kKind == ReduceKind::kMaximum) return a < b ? b : a;
    if constexpr (kKind == ReduceKind::kMinimum) return b < a ? b : a;
    if constexpr (kKind == ReduceKind::kAnd) return static_cast<T>(a & b);
    if constexpr (kKind == ReduceKind::kOr) return static_cast<T>(a | b);
  } else {
    if constexpr (kKind == ReduceKind::kAdd) return static_cast<T>(a + b);
    if constexpr (kKind == ReduceKind::kMultiply) return static_cast<T>(a * b);
    if constexpr (kKind == ReduceKind::kMaximum) {
      if (IsNan(a)) return a;
      if (IsNan(b)) return b;
      return a < b ? b : a;
    }
    if constexpr (kKind == ReduceKind::kMinimum) {
      if (IsNan(a)) return a;
      if (IsNan(b)) return b;
      return b < a ? b : a;
    }
    return a;  // and/or on floating types: rejected by CheckReduction
  }
}

template <typename T, ReduceKind kKind>
void Loop(const T* lhs, const T* rhs, T* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = Apply<T, kKind>(lhs[i], rhs[i]);
}

template <typename T, ReduceKind kKind>
void CombineTyped(const void* lhs, const void* rhs, void* out, int64_t count) {
  auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % alignof(T) != 0; };
  if (!misaligned(lhs) && !misaligned(rhs) && !misaligned(out)) {
    Loop<T, kKind>(static_cast<const T*>(lhs), static_cast<const T*>(rhs), static_cast<T*>(out),
                   count);
    return;
  }
  // Stage through aligned blocks. `out` may alias lhs or rhs exactly: each block is read
  // completely before it is written.
  constexpr int64_t kBlock = 2048;
  alignas(64) T a[kBlock];
  alignas(64) T b[kBlock];
  const auto* l = static_cast<const std::byte*>(lhs);
  const auto* r = static_cast<const std::byte*>(rhs);
  auto* o = static_cast<std::byte*>(out);
  for (int64_t done = 0; done < count; done += kBlock) {
    const int64_t n = std::min(kBlock, count - done);
    const size_t offset = static_cast<size_t>(done) * sizeof(T);
    std::memcpy(a, l + offset, n * sizeof(T));
    std::memcpy(b, r + offset, n * sizeof(T));
    Loop<T, kKind>(a, b, a, n);
    std::memcpy(o + offset, a, n * sizeof(T));
  }
}

template <typename T>
void CombineKind(ReduceKind kind, const void* lhs, const void* rhs, void* out, int64_t count) {
  switch (kind) {
    case ReduceKind::kAdd:
      return CombineTyped<T, ReduceKind::kAdd>(lhs, rhs, out, count);
    case ReduceKind::kMultiply:
      return CombineTyped<T, ReduceKind::kMultiply>(lhs, rhs, out, count);
    case ReduceKind::kMaximum:
      return CombineTyped<T, ReduceKind::kMaximum>(lhs, rhs, out, count);
    case ReduceKind::kMinimum:
      return CombineTyped<T, ReduceKind::kMinimum>(lhs, rhs, out, count);
    case ReduceKind::kAnd:
      return CombineTyped<T, ReduceKind::kAnd>(lhs, rhs, out, count);
    case ReduceKind::kOr:
      return CombineTyped<T, ReduceKind::kOr>(lhs, rhs, out, count);
  }
}

}  // namespace

absl::Status CheckReduction(ReduceKind kind, DType dtype) {
  if ((kind == ReduceKind::kAnd || kind == ReduceKind::kOr) && IsFloating(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("reduction ", ReduceKindName(kind),
                                                   " is not defined on ", DTypeName(dtype),
                                                   " (and/or take pred or integer types)"));
  }
  return absl::OkStatus();
}

void Combine(ReduceKind kind, DType dtype, const void* lhs, const void* rhs, void* out,
             int64_t count) {
  if (count <= 0) return;
  VisitDType(dtype, [&]<typename T>() { CombineKind<T>(kind, lhs, rhs, out, count); });
}

}  // namespace tessel::transport::internal
