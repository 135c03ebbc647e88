// Element types of Tessel tensors, named as in XLA's PrimitiveType text form.
//
//   DType t = DType::kF32;
//   DTypeName(t) == "f32";  ByteWidth(t) == 4;
//   ParseDType("bf16") -> DType::kBF16
//
// bf16 and f16 values are stored as Eigen::bfloat16 / Eigen::half (2 bytes each); pred is
// stored as one byte holding 0 or 1, as XLA does on the CPU.
#ifndef TESSEL_CORE_DTYPE_H_
#define TESSEL_CORE_DTYPE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "Eigen/Core"
#include "absl/status/statusor.h"

namespace tessel {

// The element type of a tensor. Enumerators follow XLA's PrimitiveType names. kU32 and kU64
// (JAX's threefry PRNG state and counters) come last so the earlier values, which the transport's
// wire header carries, keep their numbers.
enum class DType : uint8_t { kPred, kU8, kS32, kS64, kBF16, kF16, kF32, kF64, kU32, kU64 };

using bf16 = Eigen::bfloat16;
using f16 = Eigen::half;

// XLA's text name: "pred", "u8", "s32", "s64", "bf16", "f16", "f32", "f64", "u32", "u64".
[[nodiscard]] const std::string& DTypeName(DType dtype);

// Parses an XLA type name. Errors: kInvalidArgument naming the text if it is not one of the
// names above.
[[nodiscard]] absl::StatusOr<DType> ParseDType(std::string_view name);

// Bytes per element: 1 for pred and u8, 2 for bf16 and f16, 4 for s32, u32 and f32, 8 otherwise.
[[nodiscard]] int64_t ByteWidth(DType dtype);

// True for bf16, f16, f32, f64.
[[nodiscard]] bool IsFloating(DType dtype);
// True for s32, s64, u8, u32, u64.
[[nodiscard]] bool IsInteger(DType dtype);

// Maps a C++ element type to its DType: DTypeOf<float>() == DType::kF32. pred is `bool`.
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<bool>() {
  return DType::kPred;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return DType::kU8;
}
template <>
constexpr DType DTypeOf<uint32_t>() {
  return DType::kU32;
}
template <>
constexpr DType DTypeOf<uint64_t>() {
  return DType::kU64;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kS32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kS64;
}
template <>
constexpr DType DTypeOf<bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType DTypeOf<f16>() {
  return DType::kF16;
}
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kF64;
}

// Calls `fn.template operator()<T>()` with the C++ element type T of `dtype` and returns its
// result. Used by kernels to instantiate one loop per type:
//   VisitDType(dtype, [&]<typename T>() { ... });
template <typename Fn>
decltype(auto) VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kPred:
      return fn.template operator()<bool>();
    case DType::kU8:
      return fn.template operator()<uint8_t>();
    case DType::kS32:
      return fn.template operator()<int32_t>();
    case DType::kS64:
      return fn.template operator()<int64_t>();
    case DType::kBF16:
      return fn.template operator()<bf16>();
    case DType::kF16:
      return fn.template operator()<f16>();
    case DType::kF32:
      return fn.template operator()<float>();
    case DType::kF64:
      return fn.template operator()<double>();
    case DType::kU32:
      return fn.template operator()<uint32_t>();
    case DType::kU64:
      return fn.template operator()<uint64_t>();
  }
  return fn.template operator()<float>();  // unreachable: every enumerator is handled
}

}  // namespace tessel

#endif  // TESSEL_CORE_DTYPE_H_
