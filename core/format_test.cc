#include "tessel/core/format.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(FormatBytesTest, WholeBytesBelowOneKibibyte) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
}

TEST(FormatBytesTest, LargestBinaryUnitWithTwoDecimals) {
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3.0 * (1 << 20)), "3.00 MiB");
  EXPECT_EQ(FormatBytes(static_cast<double>(int64_t{32} << 30)), "32.00 GiB");
  EXPECT_EQ(FormatBytes(static_cast<double>(int64_t{95} << 30) + 1), "95.00 GiB");
  EXPECT_EQ(FormatBytes(static_cast<double>(int64_t{3} << 39)), "1.50 TiB");
  EXPECT_EQ(FormatBytes(static_cast<double>(int64_t{1} << 50)), "1.00 PiB");
  EXPECT_EQ(FormatBytes(static_cast<double>(int64_t{1} << 62)), "4.00 EiB");
  EXPECT_EQ(FormatBytes(1e22), "8673.62 EiB");  // no unit above EiB
}

TEST(FormatBytesTest, NegativeCountsKeepTheirSign) {
  EXPECT_EQ(FormatBytes(-100), "-100 B");
  EXPECT_EQ(FormatBytes(-1536), "-1.50 KiB");
}

}  // namespace
}  // namespace tessel
