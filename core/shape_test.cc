#include "tessel/core/shape.h"

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(ShapeTest, ToStringAndSizes) {
  Shape s(DType::kF32, {8, 16});
  EXPECT_EQ(s.ToString(), "f32[8,16]");
  EXPECT_EQ(s.num_elements(), 128);
  EXPECT_EQ(s.byte_size(), 512);
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{16, 1}));
  EXPECT_EQ(Shape(DType::kPred, {}).ToString(), "pred[]");
  EXPECT_EQ(Shape::Tuple({s, Shape(DType::kS32, {})}).ToString(), "(f32[8,16], s32[])");
}

TEST(ShapeTest, CheckedByteSizeRefusesWhatWouldWrapAround) {
  EXPECT_EQ(*CheckedByteSize(Shape(DType::kF32, {8, 16})), 512);
  EXPECT_EQ(*CheckedByteSize(Shape::Tuple({Shape(DType::kF32, {2}), Shape(DType::kS64, {})})), 16);
  // 2^61 f32 elements are 2^63 bytes: one past int64.
  absl::StatusOr<int64_t> big =
      CheckedByteSize(Shape(DType::kF32, {int64_t{1} << 31, int64_t{1} << 30}));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("f32[2147483648,1073741824] is too large"),
            std::string::npos)
      << big.status();
  EXPECT_TRUE(CheckedByteSize(Shape(DType::kU8, {int64_t{1} << 31, int64_t{1} << 30})).ok());
  const Shape half(DType::kF32, {int64_t{1} << 60});
  EXPECT_FALSE(CheckedByteSize(Shape::Tuple({half, half})).ok());  // the sum wraps
}

TEST(ShapeTest, ParseAcceptsLayoutsAndTuples) {
  EXPECT_EQ(ParseShape("f32[8,16]{1,0}").value(), Shape(DType::kF32, {8, 16}));
  EXPECT_EQ(ParseShape("bf16[]").value(), Shape(DType::kBF16, {}));
  EXPECT_EQ(ParseShape("(f32[2], s64[3,1])").value(),
            Shape::Tuple({Shape(DType::kF32, {2}), Shape(DType::kS64, {3, 1})}));
}

TEST(ShapeTest, ParseErrorsNameTheText) {
  auto bad = ParseShape("f33[2]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("f33"), std::string::npos);
  EXPECT_FALSE(ParseShape("f32[2,-1]").ok());
  EXPECT_FALSE(ParseShape("f32[2").ok());
  EXPECT_FALSE(ParseShape("f32[2] junk").ok());
}

}  // namespace
}  // namespace tessel
