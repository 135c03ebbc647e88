#include "tessel/spmd/device_array.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// ----------------------------------------------------------------------------------------------
// The compact (iota) form against a naive explicit reference.

std::vector<int64_t> NaiveTranspose(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& ids,
                                    const std::vector<int64_t>& perm) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  std::vector<int64_t> out_dims;
  for (int64_t p : perm) out_dims.push_back(dims[p]);
  std::vector<int64_t> out;
  ForEachIndex(out_dims, [&](absl::Span<const int64_t> index) {
    int64_t linear = 0;
    for (size_t i = 0; i < perm.size(); ++i) linear += index[i] * strides[perm[i]];
    out.push_back(ids[linear]);
  });
  return out;
}

// Row-major ids of numpy.arange(n).reshape(reshape).transpose(perm) (then any reshape).
std::vector<int64_t> NaiveIotaTransposed(const std::vector<int64_t>& reshape,
                                         const std::vector<int64_t>& perm) {
  std::vector<int64_t> iota(Product(reshape));
  std::iota(iota.begin(), iota.end(), int64_t{0});
  return NaiveTranspose(reshape, iota, perm);
}

// Splits n into a random list of factors >= 2 (n itself if prime-ish).
std::vector<int64_t> RandomFactorization(int64_t n, std::mt19937& rng) {
  std::vector<int64_t> dims;
  while (n > 1) {
    std::vector<int64_t> divisors;
    for (int64_t d = 2; d <= n; ++d) {
      if (n % d == 0) divisors.push_back(d);
    }
    int64_t d = divisors[rng() % divisors.size()];
    dims.push_back(d);
    n /= d;
  }
  if (dims.empty()) dims.push_back(1);
  // Sprinkle a size-1 dim now and then.
  if (rng() % 4 == 0) dims.insert(dims.begin() + rng() % (dims.size() + 1), 1);
  return dims;
}

std::vector<int64_t> RandomPerm(size_t size, std::mt19937& rng) {
  std::vector<int64_t> perm(size);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

TEST(DeviceArrayTest, ExplicitIdsOfATransposedIotaBecomeCompact) {
  DeviceArray a({4, 2}, {0, 4, 1, 5, 2, 6, 3, 7});
  EXPECT_TRUE(a.is_compact());
  EXPECT_EQ(a, *DeviceArray::IotaTransposed({4, 2}, {2, 4}, {1, 0}));
  EXPECT_THAT(a.iota_reshape_dims(), ElementsAre(2, 4));
  EXPECT_THAT(a.iota_transpose_perm(), ElementsAre(1, 0));
  // 2x2 blocks of a 4x4 torus: a 4-factor form.
  DeviceArray blocks({4, 4}, {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15});
  EXPECT_TRUE(blocks.is_compact());
  EXPECT_EQ(blocks.factors().size(), 4u);
  // Not a transposed iota: kept explicit, every operation still right.
  DeviceArray shuffled({2, 2}, {0, 3, 1, 2});
  EXPECT_FALSE(shuffled.is_compact());
  EXPECT_THAT(shuffled.Transpose({1, 0}).device_ids(), ElementsAre(0, 1, 3, 2));
  EXPECT_THAT(*shuffled.IndexOf(2), ElementsAre(1, 1));
  EXPECT_THAT(shuffled.SortLastDimGroups().device_ids(), ElementsAre(0, 3, 1, 2));
  DeviceArray offset({2}, {4, 5});  // ids not starting at 0
  EXPECT_FALSE(offset.is_compact());
  EXPECT_FALSE(offset.IndexOf(0).has_value());
  EXPECT_NE(DeviceArray({2}, {0, 1}), DeviceArray({1, 2}, {0, 1}));
}

TEST(DeviceArrayTest, FromIdFactors) {
  // Digits major to minor: (2, stride 1) then (4, stride 2) is iota(8).reshape(4,2).T.
  absl::StatusOr<DeviceArray> a = DeviceArray::FromIdFactors({2, 4}, {{2, 1}, {4, 2}});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->device_ids(), ElementsAre(0, 2, 4, 6, 1, 3, 5, 7));
  EXPECT_THAT(DeviceArray::FromIdFactors({8}, {{2, 1}, {4, 3}}).status().message(),
              HasSubstr("does not continue a mixed radix at stride 2"));
  EXPECT_THAT(DeviceArray::FromIdFactors({6}, {{2, 1}, {4, 2}}).status().message(),
              HasSubstr("span 8 devices but dims [6] hold 6"));
}

TEST(DeviceArrayTest, CompactOperationsMatchNaiveReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = std::vector<int64_t>{1, 2, 4, 6, 8, 12, 16, 24, 36, 64}[rng() % 10];
    std::vector<int64_t> reshape = RandomFactorization(n, rng);
    std::vector<int64_t> perm = RandomPerm(reshape.size(), rng);
    std::vector<int64_t> dims = RandomFactorization(n, rng);
    absl::StatusOr<DeviceArray> made = DeviceArray::IotaTransposed(dims, reshape, perm);
    ASSERT_TRUE(made.ok()) << made.status();
    const DeviceArray& a = *made;
    std::vector<int64_t> ids = NaiveIotaTransposed(reshape, perm);
    SCOPED_TRACE(absl::StrCat("n=", n, " reshape=", absl::StrJoin(reshape, ","), " perm=",
                              absl::StrJoin(perm, ","), " dims=", absl::StrJoin(dims, ",")));
    ASSERT_TRUE(a.is_compact());
    ASSERT_EQ(a.device_ids(), ids);
    // The explicit constructor finds the same canonical form.
    DeviceArray from_ids(dims, ids);
    ASSERT_TRUE(from_ids.is_compact());
    EXPECT_EQ(from_ids, a);
    EXPECT_EQ(absl::HashOf(from_ids), absl::HashOf(a));
    // at / IndexOf.
    for (int64_t p = 0; p < n; ++p) {
      EXPECT_EQ(a.AtLinear(p), ids[p]);
      std::optional<std::vector<int64_t>> index = a.IndexOf(ids[p]);
      ASSERT_TRUE(index.has_value());
      EXPECT_EQ(a.at(*index), ids[p]);
    }
    EXPECT_FALSE(a.IndexOf(n).has_value());
    EXPECT_FALSE(a.IndexOf(-1).has_value());
    // Transpose.
    std::vector<int64_t> tperm = RandomPerm(dims.size(), rng);
    DeviceArray t = a.Transpose(tperm);
    EXPECT_EQ(t.device_ids(), NaiveTranspose(dims, ids, tperm));
    EXPECT_EQ(t, DeviceArray(t.dims(), NaiveTranspose(dims, ids, tperm)));
    // Reshape keeps the contents.
    std::vector<int64_t> other_dims = RandomFactorization(n, rng);
    EXPECT_EQ(a.Reshape(other_dims).device_ids(), ids);
    // SortLastDimGroups.
    std::vector<int64_t> sorted = ids;
    const int64_t g = dims.back();
    for (int64_t start = 0; start < n; start += g) {
      std::sort(sorted.begin() + start, sorted.begin() + start + g);
    }
    DeviceArray s = a.SortLastDimGroups();
    EXPECT_EQ(s.device_ids(), sorted);
    EXPECT_EQ(s, DeviceArray(dims, sorted));
    // XLA's spelling round-trips.
    EXPECT_EQ(*DeviceArray::IotaTransposed(dims, a.iota_reshape_dims(), a.iota_transpose_perm()),
              a);
    EXPECT_EQ(a.IsIota(), std::is_sorted(ids.begin(), ids.end()));
  }
}

// DimFactors(d) of two arrays are equal exactly when every device has the same index along d in
// both (what the partitioner relies on to compare tilings in O(rank)).
TEST(DeviceArrayTest, DimFactorsEqualExactlyWhenTheDimMapsDevicesAlike) {
  std::mt19937 rng(11);
  int equal_cases = 0, differing_cases = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = std::vector<int64_t>{4, 8, 12, 16, 32}[rng() % 5];
    std::vector<int64_t> dims = RandomFactorization(n, rng);
    auto make = [&] {
      std::vector<int64_t> reshape = RandomFactorization(n, rng);
      return *DeviceArray::IotaTransposed(dims, reshape, RandomPerm(reshape.size(), rng));
    };
    DeviceArray a = make(), b = make();
    const int64_t d = rng() % dims.size();
    std::optional<std::vector<IdFactor>> fa = a.DimFactors(d), fb = b.DimFactors(d);
    if (!fa || !fb) continue;
    bool same = true;
    for (int64_t id = 0; id < n; ++id) same = same && (*a.IndexOf(id))[d] == (*b.IndexOf(id))[d];
    EXPECT_EQ(*fa == *fb, same) << a.ToString() << " vs " << b.ToString() << " dim " << d;
    (same ? equal_cases : differing_cases)++;
  }
  EXPECT_GT(equal_cases, 100);
  EXPECT_GT(differing_cases, 100);
}

TEST(DeviceArrayTest, CompactFormStaysSmallAtPodScale) {
  // A 3-D torus mesh of 8192 devices, transposed and regrouped as the partitioner does: no
  // operation below materialises the 8192 ids.
  DeviceArray mesh = *DeviceArray::IotaTransposed({4, 512, 4}, {4, 16, 32, 4}, {0, 2, 1, 3});
  DeviceArray regrouped = mesh.Transpose({2, 0, 1}).Reshape({4, 2048});
  DeviceArray t = regrouped.SortLastDimGroups();
  EXPECT_TRUE(regrouped.is_compact());
  EXPECT_TRUE(t.is_compact());
  EXPECT_LE(t.factors().size(), 4u);
  EXPECT_EQ(regrouped.at({3, 2047}), mesh.at({3, 511, 3}));
  std::vector<int64_t> expected = regrouped.device_ids();
  for (size_t start = 0; start < expected.size(); start += 2048) {
    std::sort(expected.begin() + start, expected.begin() + start + 2048);
  }
  EXPECT_EQ(t.device_ids(), expected);
  std::optional<std::vector<int64_t>> index = t.IndexOf(8191);
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(t.at(*index), 8191);
}

}  // namespace
}  // namespace tessel::spmd
