// The element types and ops of JAX's threefry PRNG (jax.random, dropout): u32 and u64 arithmetic
// (wrapping add, shifts, xor, convert to and from signed and floating types), bitcast-convert
// (u32 bits reread as f32, the uniform-float trick of jax.random.uniform) and reduce-precision
// (XLA's rounding of an f32 to fewer exponent and mantissa bits): executor numerics against hand
// values and the C++ standard library, shape rules, HLO text round trips and autodiff.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/tensor.h"
#include "tessel/core/testing/graphs.h"
#include "tessel/core/testing/run_op.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

TEST(UnsignedBitsTest, NamesAndWidths) {
  EXPECT_EQ(DTypeName(DType::kU32), "u32");
  EXPECT_EQ(DTypeName(DType::kU64), "u64");
  EXPECT_EQ(*ParseDType("u32"), DType::kU32);
  EXPECT_EQ(*ParseDType("u64"), DType::kU64);
  EXPECT_EQ(ByteWidth(DType::kU32), 4);
  EXPECT_EQ(ByteWidth(DType::kU64), 8);
  EXPECT_TRUE(IsInteger(DType::kU32));
  EXPECT_TRUE(IsInteger(DType::kU64));
  EXPECT_FALSE(IsFloating(DType::kU64));
  EXPECT_THAT(ParseDType("u16").status().message(), HasSubstr("u32, u64"));
}

TEST(UnsignedBitsTest, U32ArithmeticWrapsAndShiftsLogically) {
  const uint32_t max = std::numeric_limits<uint32_t>::max();
  Literal a = Literal::FromVector<uint32_t>({4}, {max, 0x80000001u, 466688986u, 7});
  Literal b = Literal::FromVector<uint32_t>({4}, {2, 1, 13, 32});
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kAdd, {a, b})[0]),
            (std::vector<uint32_t>{1, 0x80000002u, 466688999u, 39}));
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kSubtract, {b, a})[0]),
            (std::vector<uint32_t>{3, 0x80000000u, 2u - 466688986u + 11u, 25}));
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kXor, {a, b})[0]),
            (std::vector<uint32_t>{max ^ 2u, 0x80000000u, 466688986u ^ 13u, 39}));
  // Threefry's rotate: (x << r) | (x >> (32 - r)); a shift by 32 gives 0.
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kShiftLeft, {a, b})[0]),
            (std::vector<uint32_t>{max << 2, 2, 466688986u << 13, 0}));
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kShiftRightLogical, {a, b})[0]),
            (std::vector<uint32_t>{max >> 2, 0x40000000u, 466688986u >> 13, 0}));
  // Arithmetic shift of an unsigned type shifts in the top bit, as XLA does.
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kShiftRightArithmetic, {a, b})[0]),
            (std::vector<uint32_t>{max, 0xC0000000u, 466688986u >> 13, 0}));
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kMultiply, {a, b})[0]),
            (std::vector<uint32_t>{max - 1, 0x80000001u, 466688986u * 13u, 224}));
  // Unsigned division by zero gives all ones.
  Literal zero = Literal::FromVector<uint32_t>({4}, {0, 0, 0, 0});
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kDivide, {a, zero})[0]),
            (std::vector<uint32_t>{max, max, max, max}));
}

TEST(UnsignedBitsTest, U64ConstantsKeepEveryBitAndConvertsTruncate) {
  // The iota_2x32_shape pattern of jax.random: a u64 counter split into two u32 words.
  const uint64_t big = 0xFEDCBA9876543210ull;
  Literal c = Literal::FromVector<uint64_t>({2}, {big, 32});
  EXPECT_EQ(c.ValuesToString(), "{18364758544493064720, 32}");
  absl::StatusOr<Literal> parsed = ParseLiteralValues(Shape(DType::kU64, {2}), c.ValuesToString());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(Values<uint64_t>(*parsed), (std::vector<uint64_t>{big, 32}));
  Literal shift = Literal::FromVector<uint64_t>({2}, {32, 32});
  Literal high = RunOp(Opcode::kShiftRightLogical, {c, shift})[0];
  EXPECT_EQ(Values<uint64_t>(high), (std::vector<uint64_t>{big >> 32, 0}));
  const Shape u32(DType::kU32, {2});
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kConvert, {c}, {}, u32)[0]),
            (std::vector<uint32_t>{0x76543210u, 32}));
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kConvert, {high}, {}, u32)[0]),
            (std::vector<uint32_t>{0xFEDCBA98u, 0}));
  // s32 -> u32 wraps; f32 -> u32 saturates at 0 and at the maximum.
  Literal s = Literal::FromVector<int32_t>({2}, {-1, 5});
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kConvert, {s}, {}, u32)[0]),
            (std::vector<uint32_t>{0xFFFFFFFFu, 5}));
  Literal f = Literal::FromVector<float>({2}, {-3.5f, 1e20f});
  EXPECT_EQ(Values<uint32_t>(RunOp(Opcode::kConvert, {f}, {}, u32)[0]),
            (std::vector<uint32_t>{0, 0xFFFFFFFFu}));
}

TEST(UnsignedBitsTest, BitcastConvertRereadsTheBits) {
  // jax.random.uniform: (bits >> 9) | 0x3F800000 read as f32 lies in [1, 2).
  Literal bits = Literal::FromVector<uint32_t>({3}, {0x3F800000u, 0x3FC00000u, 0xBF800000u});
  const std::vector<float> want = {1.0f, 1.5f, -1.0f};
  EXPECT_EQ(Values<float>(RunOp(Opcode::kBitcastConvert, {bits}, {}, Shape(DType::kF32, {3}))[0]),
            want);
  Literal f = Literal::FromVector<float>({3}, want);
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kBitcastConvert, {f}, {}, Shape(DType::kS32, {3}))[0]),
            (std::vector<int32_t>{0x3F800000, 0x3FC00000, static_cast<int32_t>(0xBF800000u)}));
  Literal d = Literal::FromVector<double>({1}, {-2.0});
  EXPECT_EQ(Values<uint64_t>(RunOp(Opcode::kBitcastConvert, {d}, {}, Shape(DType::kU64, {1}))[0]),
            (std::vector<uint64_t>{std::bit_cast<uint64_t>(-2.0)}));
}

TEST(UnsignedBitsTest, ReducePrecisionRoundsLikeXla) {
  OpAttributes to_bf16;
  to_bf16.exponent_bits = 8;
  to_bf16.mantissa_bits = 7;
  std::vector<float> in = {1.0f,        1.00390625f, 1.01171875f,
                           3.14159265f, -2.71828f,   1e-40f,
                           3.0e38f,     -0.0f,       std::numeric_limits<float>::infinity(),
                           65504.0f,    1e-3f};
  Literal x = Literal::FromVector<float>({static_cast<int64_t>(in.size())}, in);
  // With f32's exponent and bf16's mantissa, the result is f32 -> bf16 (round to nearest even,
  // Eigen's conversion) -> f32, subnormals included.
  std::vector<float> got = Values<float>(RunOp(Opcode::kReducePrecision, {x}, to_bf16)[0]);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(got[i], static_cast<float>(bf16(in[i]))) << in[i];
  }
  // To f16's range (5 exponent bits, 10 mantissa bits): above 65504 becomes infinity, below the
  // smallest normal (2^-14) flushes to a signed zero (XLA's reduce-precision has no subnormals).
  OpAttributes to_f16;
  to_f16.exponent_bits = 5;
  to_f16.mantissa_bits = 10;
  Literal y = Literal::FromVector<float>({5}, {70000.0f, -70000.0f, 1e-5f, -1e-5f, 1.0009765625f});
  std::vector<float> h = Values<float>(RunOp(Opcode::kReducePrecision, {y}, to_f16)[0]);
  EXPECT_EQ(h[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[2], 0.0f);
  EXPECT_TRUE(std::signbit(h[3]) && h[3] == 0.0f);
  EXPECT_EQ(h[4], 1.0009765625f);
  // NaN stays NaN, even with no mantissa bits left.
  OpAttributes tiny;
  tiny.exponent_bits = 2;
  tiny.mantissa_bits = 0;
  Literal nan = Literal::FromVector<float>({2}, {std::nanf(""), 1.4f});
  std::vector<float> n = Values<float>(RunOp(Opcode::kReducePrecision, {nan}, tiny)[0]);
  EXPECT_TRUE(std::isnan(n[0]));
  EXPECT_EQ(n[1], 1.0f);
}

TEST(UnsignedBitsTest, ShapeRules) {
  const Shape u32(DType::kU32, {4}), f32(DType::kF32, {4}), f64(DType::kF64, {4});
  const Shape pred(DType::kPred, {4}), s32_other(DType::kS32, {2, 2});
  auto infer = [](Opcode op, std::vector<const Shape*> shapes, const OpAttributes& attrs,
                  std::optional<Shape> declared) {
    return InferShape(op, shapes, attrs, declared);
  };
  EXPECT_EQ(*infer(Opcode::kBitcastConvert, {&u32}, {}, f32), f32);
  absl::Status wider = infer(Opcode::kBitcastConvert, {&u32}, {}, f64).status();
  EXPECT_EQ(wider.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(wider.message(), HasSubstr("different bit widths"));
  EXPECT_THAT(
      infer(Opcode::kBitcastConvert, {&pred}, {}, Shape(DType::kU8, {4})).status().message(),
      HasSubstr("pred"));
  EXPECT_THAT(infer(Opcode::kBitcastConvert, {&u32}, {}, s32_other).status().message(),
              HasSubstr("other dims"));
  OpAttributes rp;
  rp.exponent_bits = 5;
  rp.mantissa_bits = 10;
  EXPECT_EQ(*infer(Opcode::kReducePrecision, {&f32}, rp, std::nullopt), f32);
  EXPECT_THAT(infer(Opcode::kReducePrecision, {&u32}, rp, std::nullopt).status().message(),
              HasSubstr("floating point"));
  rp.exponent_bits = 0;
  EXPECT_THAT(infer(Opcode::kReducePrecision, {&f32}, rp, std::nullopt).status().message(),
              HasSubstr("exponent_bits >= 1"));
  EXPECT_TRUE(infer(Opcode::kShiftLeft, {&u32, &u32}, {}, std::nullopt).ok());
  EXPECT_TRUE(infer(Opcode::kPopcnt, {&u32}, {}, std::nullopt).ok());
}

constexpr char kModule[] = R"(HloModule m

ENTRY e {
  x = u32[4]{0} parameter(0)
  k = u64[2]{0} constant({18364758544493064720, 32})
  c = u32[] constant(1065353216)
  b = u32[4]{0} broadcast(c), dimensions={}
  o = u32[4]{0} or(x, b)
  f = f32[4]{0} bitcast-convert(o)
  r = f32[4]{0} reduce-precision(f), exponent_bits=5, mantissa_bits=10
  ROOT t = (f32[4]{0}, u64[2]{0}) tuple(r, k)
})";

TEST(UnsignedBitsTest, HloTextRoundTrips) {
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(kModule);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = PrintHloModule(**g);
  EXPECT_THAT(text, HasSubstr("f32[4] bitcast-convert(%o)"));
  EXPECT_THAT(text, HasSubstr("reduce-precision(%f), exponent_bits=5, mantissa_bits=10"));
  EXPECT_THAT(text, HasSubstr("u64[2] constant({18364758544493064720, 32})"));
  absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(PrintHloModule(**again), text);

  std::string missing = kModule;
  missing.replace(missing.find(", mantissa_bits=10"), std::string(", mantissa_bits=10").size(), "");
  absl::StatusOr<std::unique_ptr<Graph>> bad = ParseHloModule(missing);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("mantissa_bits"));
  EXPECT_THAT(bad.status().message(), HasSubstr("line 10"));
}

TEST(UnsignedBitsTest, GradientOfReducePrecisionRoundsTheCotangent) {
  Tensor x = Tensor::FromLiteral(Literal::FromVector<float>({2}, {1.0f, 2.0f}));
  Tensor scale = Tensor::FromLiteral(Literal::FromVector<float>({2}, {1.00390625f, 3.0f}));
  // loss = sum(reduce_precision(x) * scale): d/dx = reduce_precision(scale) = bf16(scale).
  Tensor loss = ReduceSum(ReducePrecision(x, 8, 7) * scale, {0});
  std::vector<Tensor> grads = Grad(loss, {x});
  absl::StatusOr<Literal> g = grads[0].ToLiteral();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Values<float>(*g), (std::vector<float>{1.0f, 3.0f}));
}

TEST(UnsignedBitsTest, BitcastConvertBetweenHalfTypes) {
  // f16 1.0 is 0x3C00; as bf16 those bits are 2^(0x78 - 127) = 2^-7.
  Literal h = Literal::FromVector<f16>({2}, {f16(1.0f), f16(-2.0f)});
  std::vector<bf16> got =
      Values<bf16>(RunOp(Opcode::kBitcastConvert, {h}, {}, Shape(DType::kBF16, {2}))[0]);
  EXPECT_EQ(static_cast<float>(got[0]), 0.0078125f);
  EXPECT_EQ(std::bit_cast<uint16_t>(got[1]), std::bit_cast<uint16_t>(f16(-2.0f)));
}

}  // namespace
}  // namespace tessel
