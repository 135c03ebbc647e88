#include "spmd/device_array.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::spmd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DeviceArrayTest, IotaAtAndIndexOf) {
  DeviceArray a = DeviceArray::Iota({2, 4});
  EXPECT_EQ(a.rank(), 2);
  EXPECT_EQ(a.num_elements(), 8);
  EXPECT_EQ(a.at({1, 2}), 6);
  EXPECT_THAT(*a.IndexOf(5), ElementsAre(1, 1));
  EXPECT_FALSE(a.IndexOf(8).has_value());
  EXPECT_THAT(a.strides(), ElementsAre(4, 1));
  EXPECT_TRUE(a.IsIota());
  EXPECT_EQ(a.ToString(), "[[0, 1, 2, 3], [4, 5, 6, 7]]");
}

TEST(DeviceArrayTest, TransposeAndReshapeFollowNumpy) {
  DeviceArray a = DeviceArray::Iota({2, 4});
  EXPECT_THAT(a.Transpose({1, 0}).device_ids(), ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
  EXPECT_THAT(a.Transpose({1, 0}).dims(), ElementsAre(4, 2));
  DeviceArray b = DeviceArray::Iota({2, 3, 4});
  // numpy.arange(24).reshape(2,3,4).transpose(2,0,1)[3][1][2] == 1*12 + 2*4 + 3 = 23.
  EXPECT_EQ(b.Transpose({2, 0, 1}).at({3, 1, 2}), 23);
  EXPECT_EQ(b.Transpose({2, 0, 1}).at({1, 0, 2}), 9);
  EXPECT_EQ(a.Reshape({8}).ToString(), "[0, 1, 2, 3, 4, 5, 6, 7]");
  EXPECT_FALSE(a.Transpose({1, 0}).IsIota());
}

TEST(DeviceArrayTest, RankZeroAndEmpty) {
  DeviceArray scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(scalar.at({}), 0);
  EXPECT_EQ(scalar.ToString(), "0");
  int calls = 0;
  ForEachIndex(std::vector<int64_t>{}, [&](absl::Span<const int64_t>) { ++calls; });
  EXPECT_EQ(calls, 1);
  ForEachIndex(std::vector<int64_t>{2, 0}, [&](absl::Span<const int64_t>) { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(DeviceArrayTest, ForEachIndexIsRowMajor) {
  std::vector<std::vector<int64_t>> seen;
  ForEachIndex(std::vector<int64_t>{2, 3},
               [&](absl::Span<const int64_t> i) { seen.emplace_back(i.begin(), i.end()); });
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_THAT(seen[1], ElementsAre(0, 1));
  EXPECT_THAT(seen[3], ElementsAre(1, 0));
}

TEST(DeviceArrayTest, IotaTransposedMatchesXla) {
  absl::StatusOr<DeviceArray> a = DeviceArray::IotaTransposed({4, 2}, {2, 4}, {1, 0});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->device_ids(), ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
  absl::StatusOr<DeviceArray> plain = DeviceArray::IotaTransposed({2, 2}, {4}, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->IsIota());
  EXPECT_THAT(DeviceArray::IotaTransposed({4}, {2, 3}, {}).status().message(),
              HasSubstr("hold 6 devices but tile dims [4] hold 4"));
  EXPECT_THAT(DeviceArray::IotaTransposed({4}, {2, 2}, {1}).status().message(),
              HasSubstr("not a permutation"));
  EXPECT_THAT(DeviceArray::IotaTransposed({4}, {2, 2}, {0, 2}).status().message(),
              HasSubstr("not a permutation"));
  EXPECT_FALSE(DeviceArray::IotaTransposed({0}, {0}, {}).ok());
  EXPECT_THAT(
      DeviceArray::IotaTransposed({4}, {int64_t{1} << 40, int64_t{1} << 40}, {}).status().message(),
      HasSubstr("hold more than 4 devices"));
}

}  // namespace
}  // namespace tessel::spmd
