#include "tessel/core/literal.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(LiteralTest, FromVectorAndEigen) {
  Literal x = Literal::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(x.shape().ToString(), "f32[2,3]");
  EXPECT_EQ(x.data<float>()[4], 5);
  EXPECT_EQ(x.AsMatrix<float>()(1, 1), 5);
  Eigen::MatrixXd m(2, 2);
  m << 1, 2, 3, 4;
  Literal y = Literal::FromEigen(m);
  EXPECT_EQ(y.shape(), Shape(DType::kF64, {2, 2}));
  EXPECT_EQ(y.data<double>()[1], 2);  // row-major even though m is column-major
}

TEST(LiteralTest, ValueSemantics) {
  Literal a = Literal::FromVector<int32_t>({3}, {1, 2, 3});
  Literal b = a;
  b.data<int32_t>()[0] = 9;
  EXPECT_EQ(a.data<int32_t>()[0], 1);
  EXPECT_NE(a, b);
  b.data<int32_t>()[0] = 1;
  EXPECT_EQ(a, b);
}

TEST(LiteralTest, TextRoundTripEveryDType) {
  for (DType dtype : {DType::kPred, DType::kU8, DType::kS32, DType::kS64, DType::kBF16, DType::kF16,
                      DType::kF32, DType::kF64}) {
    Literal lit(Shape(dtype, {2, 3}));
    for (int i = 0; i < 6; ++i) lit.SetFromDouble(i, dtype == DType::kPred ? i % 2 : i * 1.5 - 3);
    auto parsed = ParseLiteralValues(lit.shape(), lit.ValuesToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, lit) << DTypeName(dtype) << " " << lit.ToString();
  }
  Literal f = Literal::FromVector<float>({3}, {0.1f, -1e-30f, 3.4e38f});
  EXPECT_EQ(*ParseLiteralValues(f.shape(), f.ValuesToString()), f);
  EXPECT_EQ(Literal::Scalar<float>(2.5f).ValuesToString(), "2.5");
  EXPECT_EQ(Literal::FromVector<float>({2, 2}, {1, 2, 3, 4}).ValuesToString(), "{{1, 2}, {3, 4}}");
}

TEST(LiteralTest, SpecialFloatsRoundTrip) {
  Literal f = Literal::FromVector<float>({3}, {INFINITY, -INFINITY, NAN});
  auto parsed = ParseLiteralValues(f.shape(), f.ValuesToString());
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(std::isinf(parsed->data<float>()[0]));
  EXPECT_TRUE(std::isnan(parsed->data<float>()[2]));
}

TEST(LiteralTest, ParseErrors) {
  Shape s(DType::kF32, {2, 2});
  EXPECT_FALSE(ParseLiteralValues(s, "{{1, 2}, {3}}").ok());
  EXPECT_FALSE(ParseLiteralValues(s, "{{1, 2}, {3, 4, 5}}").ok());
  EXPECT_FALSE(ParseLiteralValues(s, "{{1, x}, {3, 4}}").ok());
  EXPECT_FALSE(ParseLiteralValues(s, "{{1, 2}, {3, 4}").ok());
  EXPECT_FALSE(ParseLiteralValues(s, "").ok());
}

TEST(LiteralTest, ConvertFollowsXla) {
  Literal f = Literal::FromVector<float>({4}, {-1.7f, 0.0f, 2.9f, 0.5f});
  Literal i = f.Convert(DType::kS32);
  EXPECT_EQ(i.data<int32_t>()[0], -1);
  EXPECT_EQ(i.data<int32_t>()[2], 2);
  Literal p = f.Convert(DType::kPred);
  EXPECT_EQ(p.data<bool>()[1], false);
  EXPECT_EQ(p.data<bool>()[3], true);
}

TEST(LiteralTest, AllClose) {
  Literal a = Literal::FromVector<float>({2}, {1.0f, 2.0f});
  Literal b = Literal::FromVector<float>({2}, {1.0f, 2.001f});
  EXPECT_TRUE(AllClose(a, b, 1e-3, 0));
  EXPECT_FALSE(AllClose(a, b, 1e-5, 0));
}

TEST(LiteralTest, IntegerValuesOutsideTheirTypeAreRefused) {
  // XLA refuses them; storing them clamped (s32 99999999999 -> 2147483647, pred 2 -> true)
  // would change the program.
  EXPECT_THAT(
      std::string(
          ParseLiteralValues(Shape(DType::kS32, {2}), "{99999999999, -1}").status().message()),
      ::testing::HasSubstr(
          "literal value \"99999999999\" is outside s32 (-2147483648 to 2147483647)"));
  EXPECT_FALSE(ParseLiteralValues(Shape(DType::kU8, {1}), "{256}").ok());
  EXPECT_FALSE(ParseLiteralValues(Shape(DType::kU8, {1}), "{-1}").ok());
  EXPECT_FALSE(ParseLiteralValues(Shape(DType::kPred, {1}), "{2}").ok());
  EXPECT_FALSE(ParseLiteralValues(Shape(DType::kS32, {1}), "{1.5}").ok());
  EXPECT_FALSE(ParseLiteralValues(Shape(DType::kS64, {1}), "{9223372036854775808}").ok());
  EXPECT_FALSE(ParseLiteralValues(Shape(DType::kU64, {1}), "{-1}").ok());
  // The limits themselves are values of the type.
  absl::StatusOr<Literal> s32 =
      ParseLiteralValues(Shape(DType::kS32, {2}), "{-2147483648, 2147483647}");
  ASSERT_TRUE(s32.ok()) << s32.status();
  EXPECT_EQ(s32->data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_TRUE(ParseLiteralValues(Shape(DType::kPred, {2}), "{true, 0}").ok());
  EXPECT_TRUE(ParseLiteralValues(Shape(DType::kU64, {1}), "{18446744073709551615}").ok());
}

}  // namespace
}  // namespace tessel
