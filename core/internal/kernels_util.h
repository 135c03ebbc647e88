// Element-type helpers shared by the kernels in core/internal/. Internal to tessel::core.
//
//   using C = ComputeT<bf16>;                 // float: bf16/f16 compute in f32
//   out[i] = StoreAs<bf16>(Load(a[i]) + Load(b[i]));   // rounds to nearest even on store
//   WrapAdd<int32_t>(INT32_MAX, 1) == INT32_MIN;       // two's complement, as XLA
#ifndef TESSEL_CORE_INTERNAL_KERNELS_UTIL_H_
#define TESSEL_CORE_INTERNAL_KERNELS_UTIL_H_

#include <cstdint>
#include <type_traits>

#include "tessel/core/dtype.h"

namespace tessel::internal {

template <typename T>
inline constexpr bool kIsFloating =
    std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// The type arithmetic on T is done in: float for bf16 and f16, T otherwise.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<bf16> {
  using type = float;
};
template <>
struct ComputeType<f16> {
  using type = float;
};
template <typename T>
using ComputeT = typename ComputeType<T>::type;

template <typename T>
inline ComputeT<T> Load(T v) {
  return static_cast<ComputeT<T>>(v);
}

// Converts a computed value back to storage type T (bf16/f16: round to nearest even).
template <typename T, typename C>
inline T StoreAs(C v) {
  return static_cast<T>(v);
}

// XLA maximum/minimum on floats: NaN in either operand gives NaN.
template <typename C>
inline C FloatMax(C a, C b) {
  return (a > b || a != a) ? a : b;
}
template <typename C>
inline C FloatMin(C a, C b) {
  return (a < b || a != a) ? a : b;
}

// Two's complement arithmetic without signed-overflow UB.
template <typename T>
using UnsignedT = std::make_unsigned_t<T>;
template <typename T>
inline T WrapAdd(T a, T b) {
  return static_cast<T>(
      static_cast<UnsignedT<T>>(static_cast<UnsignedT<T>>(a) + static_cast<UnsignedT<T>>(b)));
}
template <typename T>
inline T WrapSub(T a, T b) {
  return static_cast<T>(
      static_cast<UnsignedT<T>>(static_cast<UnsignedT<T>>(a) - static_cast<UnsignedT<T>>(b)));
}
template <typename T>
inline T WrapMul(T a, T b) {
  // Promote u8 through unsigned int so the product cannot overflow a signed int.
  using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, UnsignedT<T>>;
  return static_cast<T>(static_cast<UnsignedT<T>>(static_cast<Wide>(static_cast<UnsignedT<T>>(a)) *
                                                  static_cast<Wide>(static_cast<UnsignedT<T>>(b))));
}
template <typename T>
inline T WrapNeg(T a) {
  return WrapSub<T>(T(0), a);
}
// abs(INT_MIN) == INT_MIN, as XLA; unsigned values are their own abs.
template <typename T>
inline T WrapAbs(T a) {
  if constexpr (std::is_signed_v<T>) {
    return a < 0 ? WrapNeg(a) : a;
  } else {
    return a;
  }
}

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_KERNELS_UTIL_H_
