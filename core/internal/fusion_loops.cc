#include "tessel/core/internal/fusion_loops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessel/core/internal/kernels_util.h"

// An output may be written over its own operand element by element (a donated buffer), never
// shifted against it: no loop-carried dependence, which the compiler cannot prove alone. GCC
// (the release build) is told so; clang checks the pointers at run time and vectorises the
// loop when they do not overlap (its assume_safety pragma warns in unoptimised sanitizer
// builds, where the loop is not vectorised anyway).
#if defined(__GNUC__) && !defined(__clang__)
#define TESSEL_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define TESSEL_INDEPENDENT_ITERATIONS
#endif

namespace tessel::internal {
namespace {

struct AddOp {
  float operator()(float a, float b) const { return a + b; }
};
struct SubtractOp {
  float operator()(float a, float b) const { return a - b; }
};
struct MultiplyOp {
  float operator()(float a, float b) const { return a * b; }
};
struct DivideOp {
  float operator()(float a, float b) const { return a / b; }
};
struct MaximumOp {
  float operator()(float a, float b) const { return FloatMax(a, b); }
};
struct MinimumOp {
  float operator()(float a, float b) const { return FloatMin(a, b); }
};
template <ComparisonDirection kDirection>
struct CompareOp {
  bool operator()(float a, float b) const {
    switch (kDirection) {
      case ComparisonDirection::kEq:
        return a == b;
      case ComparisonDirection::kNe:
        return a != b;
      case ComparisonDirection::kLt:
        return a < b;
      case ComparisonDirection::kLe:
        return a <= b;
      case ComparisonDirection::kGt:
        return a > b;
      case ComparisonDirection::kGe:
        return a >= b;
    }
    return false;
  }
};
struct NegateOp {
  float operator()(float a) const { return -a; }
};
struct AbsOp {
  float operator()(float a) const { return std::abs(a); }
};
// std::sqrt without errno (this file is compiled with -fno-math-errno): the vector square root.
struct SqrtOp {
  float operator()(float a) const { return std::sqrt(a); }
};
// pred is stored as a byte 0 or 1: its value converted is 0.0f or 1.0f.
struct PredToF32Op {
  float operator()(uint8_t p) const { return static_cast<float>(p); }
};

template <typename Op, typename In, typename Out>
void UnaryLoop(const std::byte* const* operands, std::byte* out, int64_t n) {
  const In* a = reinterpret_cast<const In*>(operands[0]);
  Out* o = reinterpret_cast<Out*>(out);
  const Op op;
  TESSEL_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i) o[i] = op(a[i]);
}

// out[i] = op(a, b) where each operand is its block, its one element (kScalar), or its block
// times a scalar (kScale: a folded multiply, operands[2 + k] the scalar), the product rounded
// to f32 before op as the unfused multiply rounds it (this file is compiled with
// -ffp-contract=off, so a * s + b is never one fused multiply-add).
template <typename Op, typename Out, bool kScalarA, bool kScalarB, bool kScaleA, bool kScaleB>
void BinaryLoop(const std::byte* const* operands, std::byte* out, int64_t n) {
  const float* a = reinterpret_cast<const float*>(operands[0]);
  const float* b = reinterpret_cast<const float*>(operands[1]);
  const float sa = kScalarA ? a[0] : 0.0f, sb = kScalarB ? b[0] : 0.0f;
  const float ka = kScaleA ? *reinterpret_cast<const float*>(operands[2]) : 1.0f;
  const float kb = kScaleB ? *reinterpret_cast<const float*>(operands[3]) : 1.0f;
  Out* o = reinterpret_cast<Out*>(out);
  const Op op;
  auto load_a = [&](int64_t i) {
    if constexpr (kScalarA) return sa;
    if constexpr (kScaleA) return a[i] * ka;
    return a[i];
  };
  auto load_b = [&](int64_t i) {
    if constexpr (kScalarB) return sb;
    if constexpr (kScaleB) return b[i] * kb;
    return b[i];
  };
  TESSEL_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i) o[i] = op(load_a(i), load_b(i));
}

// select on the bits: pred is stored as bytes 0 or 1, so 0 - pred is a mask of all zeros or all
// ones, and the result is exactly on_true's or on_false's element (the compiler vectorises the
// blend; a branch per element it does not).
template <bool kScalarTrue, bool kScalarFalse>
void SelectLoop(const std::byte* const* operands, std::byte* out, int64_t n) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(operands[0]);
  const uint32_t* t = reinterpret_cast<const uint32_t*>(operands[1]);
  const uint32_t* f = reinterpret_cast<const uint32_t*>(operands[2]);
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  auto blend = [](uint8_t pred, uint32_t on_true, uint32_t on_false) {
    const uint32_t mask = 0u - static_cast<uint32_t>(pred);
    return (on_true & mask) | (on_false & ~mask);
  };
  if constexpr (kScalarTrue && kScalarFalse) {
    const uint32_t st = t[0], sf = f[0];
    TESSEL_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i) o[i] = blend(p[i], st, sf);
  } else if constexpr (kScalarTrue) {
    const uint32_t st = t[0];
    TESSEL_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i) o[i] = blend(p[i], st, f[i]);
  } else if constexpr (kScalarFalse) {
    const uint32_t sf = f[0];
    TESSEL_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i) o[i] = blend(p[i], t[i], sf);
  } else {
    TESSEL_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i) o[i] = blend(p[i], t[i], f[i]);
  }
}

// The variant of a binary op for which operands are scalars: a scalar first operand only when
// the second is a block (two scalars: the first is read as its filled block).
// The variant for a scaled first operand `kScaleA` and the scalar / scaled choice of the second.
template <typename Op, typename Out, bool kScaleA>
BlockLoop BinaryWithScaleA(absl::Span<const bool> scalar, bool scale_b) {
  const uint32_t a_bit = kScaleA ? 4 : 0;
  if (scale_b) return {&BinaryLoop<Op, Out, false, false, kScaleA, true>, a_bit | 8};
  if (scalar[1]) return {&BinaryLoop<Op, Out, false, true, kScaleA, false>, a_bit | 2};
  if (scalar[0] && !kScaleA) return {&BinaryLoop<Op, Out, true, false, false, false>, 1};
  return {&BinaryLoop<Op, Out, false, false, kScaleA, false>, a_bit};
}

// The variant of a binary op for which operands are scalars or scaled: a scalar first operand
// only when the second is a block (two scalars: the first is read as its filled block).
template <typename Op, typename Out>
BlockLoop Binary(absl::Span<const bool> scalar, absl::Span<const bool> scaled) {
  if (scaled[0]) return BinaryWithScaleA<Op, Out, true>(scalar, scaled[1]);
  return BinaryWithScaleA<Op, Out, false>(scalar, scaled[1]);
}

BlockLoop Compare(ComparisonDirection direction, absl::Span<const bool> scalar,
                  absl::Span<const bool> scaled) {
  switch (direction) {
    case ComparisonDirection::kEq:
      return Binary<CompareOp<ComparisonDirection::kEq>, bool>(scalar, scaled);
    case ComparisonDirection::kNe:
      return Binary<CompareOp<ComparisonDirection::kNe>, bool>(scalar, scaled);
    case ComparisonDirection::kLt:
      return Binary<CompareOp<ComparisonDirection::kLt>, bool>(scalar, scaled);
    case ComparisonDirection::kLe:
      return Binary<CompareOp<ComparisonDirection::kLe>, bool>(scalar, scaled);
    case ComparisonDirection::kGt:
      return Binary<CompareOp<ComparisonDirection::kGt>, bool>(scalar, scaled);
    case ComparisonDirection::kGe:
      return Binary<CompareOp<ComparisonDirection::kGe>, bool>(scalar, scaled);
  }
  return {};
}

BlockLoop Select(absl::Span<const bool> scalar) {
  if (scalar[1] && scalar[2]) return {&SelectLoop<true, true>, 6};
  if (scalar[1]) return {&SelectLoop<true, false>, 2};
  if (scalar[2]) return {&SelectLoop<false, true>, 4};
  return {&SelectLoop<false, false>, 0};
}

}  // namespace

BlockLoop ChooseBlockLoop(const Node& node, absl::Span<const bool> scalar_operands) {
  return ChooseScaledBlockLoop(node, scalar_operands, {});
}

BlockLoop ChooseScaledBlockLoop(const Node& node, absl::Span<const bool> scalar_operands,
                                absl::Span<const bool> scaled_operands) {
  if (node.shape().is_tuple() ||
      static_cast<int64_t>(scalar_operands.size()) != node.operand_count()) {
    return {};
  }
  for (const Node* operand : node.operands()) {
    if (operand->shape().is_tuple()) return {};
  }
  const bool unscaled[2] = {false, false};
  const bool any_scaled =
      std::find(scaled_operands.begin(), scaled_operands.end(), true) != scaled_operands.end();
  if (any_scaled && (scaled_operands.size() != 2 || scalar_operands.size() != 2)) return {};
  const absl::Span<const bool> scaled = any_scaled ? scaled_operands : unscaled;
  for (int k = 0; k < 2 && any_scaled; ++k) {
    if (scaled[k] && scalar_operands[k]) return {};  // a scaled operand is a block
  }
  const DType result = node.shape().dtype();
  auto operand_is = [&](int k, DType dtype) { return node.operand(k)->shape().dtype() == dtype; };
  const bool f32 = result == DType::kF32;
  switch (node.opcode()) {
    case Opcode::kAdd:
    case Opcode::kSubtract:
    case Opcode::kMultiply:
    case Opcode::kDivide:
    case Opcode::kMaximum:
    case Opcode::kMinimum:
      if (!f32 || !operand_is(0, DType::kF32) || !operand_is(1, DType::kF32)) return {};
      switch (node.opcode()) {
        case Opcode::kAdd:
          return Binary<AddOp, float>(scalar_operands, scaled);
        case Opcode::kSubtract:
          return Binary<SubtractOp, float>(scalar_operands, scaled);
        case Opcode::kMultiply:
          return Binary<MultiplyOp, float>(scalar_operands, scaled);
        case Opcode::kDivide:
          return Binary<DivideOp, float>(scalar_operands, scaled);
        case Opcode::kMaximum:
          return Binary<MaximumOp, float>(scalar_operands, scaled);
        default:
          return Binary<MinimumOp, float>(scalar_operands, scaled);
      }
    case Opcode::kCompare:
      if (result != DType::kPred || !operand_is(0, DType::kF32) || !operand_is(1, DType::kF32)) {
        return {};
      }
      return Compare(node.attrs().comparison_direction, scalar_operands, scaled);
    case Opcode::kSelect:
      if (any_scaled) return {};
      if (!f32 || !operand_is(0, DType::kPred) || !operand_is(1, DType::kF32) ||
          !operand_is(2, DType::kF32)) {
        return {};
      }
      return Select(scalar_operands);
    case Opcode::kNegate:
      if (any_scaled) return {};
      if (!f32 || !operand_is(0, DType::kF32)) return {};
      return {&UnaryLoop<NegateOp, float, float>, 0};
    case Opcode::kAbs:
      if (any_scaled) return {};
      if (!f32 || !operand_is(0, DType::kF32)) return {};
      return {&UnaryLoop<AbsOp, float, float>, 0};
    case Opcode::kSqrt:
      if (any_scaled) return {};
      if (!f32 || !operand_is(0, DType::kF32)) return {};
      return {&UnaryLoop<SqrtOp, float, float>, 0};
    case Opcode::kConvert:
      if (any_scaled) return {};
      if (!f32 || !operand_is(0, DType::kPred)) return {};
      return {&UnaryLoop<PredToF32Op, uint8_t, float>, 0};
    default:
      return {};
  }
}

}  // namespace tessel::internal

#undef TESSEL_INDEPENDENT_ITERATIONS
