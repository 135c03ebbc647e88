#include "tessel/spmd/visualize.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::spmd {
namespace {

using ::testing::HasSubstr;

std::string Draw(std::vector<int64_t> dims, const std::string& sharding, int64_t devices) {
  absl::StatusOr<Sharding> s = ParseSharding(sharding);
  EXPECT_TRUE(s.ok()) << s.status();
  absl::StatusOr<std::string> table = VisualizeSharding(Shape(DType::kF32, dims), *s, devices);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *table : "";
}

TEST(VisualizeTest, PartialReplicationRows) {
  EXPECT_EQ(Draw({8, 10}, "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", 8),
            "+-------------+\n"
            "|     0-3     |\n"
            "| [0:4, 0:10] |\n"
            "+-------------+\n"
            "|     4-7     |\n"
            "| [4:8, 0:10] |\n"
            "+-------------+\n");
}

TEST(VisualizeTest, TwoDimensionalGrid) {
  EXPECT_EQ(Draw({4, 6}, "{devices=[2,2]0,2,1,3}", 4),
            "+------------+------------+\n"
            "|     0      |     2      |\n"
            "| [0:2, 0:3] | [0:2, 3:6] |\n"
            "+------------+------------+\n"
            "|     1      |     3      |\n"
            "| [2:4, 0:3] | [2:4, 3:6] |\n"
            "+------------+------------+\n");
}

TEST(VisualizeTest, OneDimensionalUneven) {
  EXPECT_EQ(Draw({5}, "{devices=[4]0,1,2,3}", 4),
            "+-------+-------+-------+-------+\n"
            "|   0   |   1   |   2   |   3   |\n"
            "| [0:2] | [2:4] | [4:5] | [5:5] |\n"
            "+-------+-------+-------+-------+\n");
}

TEST(VisualizeTest, ReplicatedMaximalUnreducedScalar) {
  EXPECT_EQ(Draw({8, 2}, "{replicated}", 8),
            "+------------+\n"
            "|    0-7     |\n"
            "| [0:8, 0:2] |\n"
            "+------------+\n");
  absl::StatusOr<std::string> all =
      VisualizeSharding(Shape(DType::kF32, {3}), Sharding::Replicate());
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, HasSubstr("all devices"));
  EXPECT_THAT(Draw({2}, "{maximal device=5}", 8), HasSubstr("|   5   |"));
  EXPECT_THAT(Draw({4}, "{devices=[2,2]0,1,2,3 last_tile_dims={unreduced}}", 4),
              HasSubstr("| 0 + 1 | 2 + 3 |"));
  EXPECT_THAT(Draw({}, "{replicated}", 2), HasSubstr("0,1"));
}

TEST(VisualizeTest, Errors) {
  EXPECT_FALSE(VisualizeSharding(Shape(DType::kF32, {2, 2, 2}), Sharding::Replicate(), 1).ok());
  EXPECT_FALSE(VisualizeSharding(Shape(DType::kF32, {2}), Sharding::Manual(), 1).ok());
  EXPECT_FALSE(
      VisualizeSharding(Shape(DType::kF32, {2}), *ParseSharding("{devices=[2]0,1}"), 1).ok());
}

TEST(VisualizeTest, CompactDeviceList) {
  EXPECT_EQ(CompactDeviceList({3, 0, 1, 2, 8, 9, 11}), "0-3,8,9,11");
  EXPECT_EQ(CompactDeviceList({5}), "5");
  EXPECT_EQ(CompactDeviceList({}), "");
}

}  // namespace
}  // namespace tessel::spmd
