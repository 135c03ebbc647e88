// Unit tests of the halo-exchange planner (partitioner/internal/halo.h): which boundary ranges
// travel, between which devices, and the bytes. The numbers are checked end to end by
// tests/golden/partitioner/halo_*.hlo (tessel verify) and tests/integration/
// partition_property_test.cc (HaloExchange*).
#include "tessel/partitioner/internal/halo.h"

#include <optional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Pairs = std::vector<std::pair<int64_t, int64_t>>;

spmd::Sharding S(std::string_view text) { return *spmd::ParseSharding(text); }

// The example of halo.h: one element from each side, the edges clipped to the value.
TEST(HaloPlanTest, OneElementEachSide) {
  HaloWindow w{0, {-1, 3, 7, 11}, 6, 0, 16};
  absl::StatusOr<HaloPlan> plan =
      PlanHalo(S("{devices=[4]0,1,2,3}"), Shape(DType::kF32, {16}), {w}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const HaloDimPlan& dim = plan->dims[0];
  ASSERT_EQ(dim.pieces.size(), 3u);
  EXPECT_EQ(dim.pieces[0].hop, -1);
  EXPECT_EQ(dim.pieces[0].begin, 3);
  EXPECT_EQ(dim.pieces[0].end, 4);
  EXPECT_EQ(dim.pieces[0].pairs, (Pairs{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(dim.pieces[1].hop, 0);
  EXPECT_TRUE(dim.pieces[1].pairs.empty());
  EXPECT_EQ(dim.pieces[2].hop, 1);
  EXPECT_EQ(dim.pieces[2].end, 1);
  EXPECT_EQ(dim.pieces[2].pairs, (Pairs{{1, 0}, {2, 1}, {3, 2}}));
  EXPECT_THAT(dim.offset_by_device, ElementsAre(0, 0, 0, 0));
  EXPECT_EQ(dim.pad_low, 0);
  EXPECT_TRUE(dim.needs_mask);  // device 0 reads global -1, device 3 global 16
  EXPECT_EQ(plan->bytes_per_device, 8);
}

// A window reaching two shards to the left: one collective-permute per hop, the far one
// carrying only the element the targets need; devices 0 and 1 get nothing from two hops away.
TEST(HaloPlanTest, HaloWiderThanOneShard) {
  HaloWindow w{0, {-3, -1, 1, 3}, 5, 0, 8};
  absl::StatusOr<HaloPlan> plan =
      PlanHalo(S("{devices=[4]0,1,2,3}"), Shape(DType::kF32, {8}), {w}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const HaloDimPlan& dim = plan->dims[0];
  ASSERT_EQ(dim.pieces.size(), 3u);
  EXPECT_EQ(dim.pieces[0].hop, -2);
  EXPECT_EQ(dim.pieces[0].begin, 1);
  EXPECT_EQ(dim.pieces[0].end, 2);
  EXPECT_EQ(dim.pieces[0].pairs, (Pairs{{0, 2}, {1, 3}}));
  EXPECT_EQ(dim.pieces[1].hop, -1);
  EXPECT_EQ(dim.pieces[1].pairs, (Pairs{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(dim.pieces[2].hop, 0);
  // Devices 2 and 3 start at their window; 0 and 1 read inside the padding/zeros (masked).
  EXPECT_EQ(dim.offset_by_device[2], dim.offset_by_device[3]);
  EXPECT_EQ(plan->bytes_per_device, (1 + 2) * 4);
}

// Uneven (7 over 2: shards of 4, the second one short) and partially replicated: the replicas
// of tile 1 (devices 2, 3) each send to their own copy of tile 0 (devices 0, 1).
TEST(HaloPlanTest, UnevenPartiallyReplicatedStaysInsideEachCopy) {
  // slice [2:7] of f32[7,3] tiled along dim 0: the result has 5 rows, 3 per tile.
  HaloWindow w{0, {2, 5}, 3, 2, 7};
  absl::StatusOr<HaloPlan> plan = PlanHalo(S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
                                           Shape(DType::kF32, {7, 3}), {w}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const HaloDimPlan& dim = plan->dims[0];
  ASSERT_EQ(dim.pieces.size(), 2u);
  EXPECT_EQ(dim.pieces[0].hop, 0);
  EXPECT_EQ(dim.pieces[0].begin, 1);  // tile 1 needs from its row 1 on, tile 0 from row 2
  EXPECT_EQ(dim.pieces[1].hop, 1);
  EXPECT_EQ(dim.pieces[1].end, 1);
  EXPECT_EQ(dim.pieces[1].pairs, (Pairs{{2, 0}, {3, 1}}));
  // Tile 0's window starts one row into the joined buffer, tile 1's at its start.
  EXPECT_THAT(dim.offset_by_device, ElementsAre(1, 1, 0, 0));
  // Tile 1's window [5, 8) ends past the slice: its last row is the result's padding.
  EXPECT_TRUE(dim.needs_mask);
  EXPECT_EQ(plan->bytes_per_device, 1 * 3 * 4);
}

// Two dims in turn: the second exchange carries the first one's window size.
TEST(HaloPlanTest, TwoDimsCarryTheFirstWindow) {
  HaloWindow rows{0, {-1, 3}, 6, 0, 8};
  HaloWindow cols{1, {-1, 2}, 5, 0, 6};
  absl::StatusOr<HaloPlan> plan =
      PlanHalo(S("{devices=[2,2]0,1,2,3}"), Shape(DType::kF32, {8, 6}), {rows, cols}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // rows: one row each way, 3 columns wide; cols: one column each way, 6 rows tall.
  EXPECT_EQ(plan->dims[0].pieces[0].pairs, (Pairs{{0, 2}, {1, 3}}));
  EXPECT_EQ(plan->dims[1].pieces[0].pairs, (Pairs{{0, 1}, {2, 3}}));
  EXPECT_EQ(plan->bytes_per_device, (3 + 3 + 6 + 6) * 4);
}

// The max pool of tests/fixtures/jax/pool_spatial_sharded.hlo along its sharded dim: 16 rows
// over 4, window 3, stride 2, padding 0_1: each device needs one row from its right neighbour
// (XLA's partitioned module sends the same f32[.,1,...] slice with pairs {1,0},{2,1},{3,2}).
// The 2x2 average pool (window 2, stride 2) needs nothing.
TEST(HaloPlanTest, WindowedOpPool) {
  HaloWindow max = WindowedOpHalo(0, 4, 16, 8, 3, 2, 0, 1);
  EXPECT_THAT(max.start, ElementsAre(0, 4, 8, 12));
  EXPECT_EQ(max.size, 5);
  absl::StatusOr<HaloPlan> plan =
      PlanHalo(S("{devices=[4]0,1,2,3}"), Shape(DType::kF32, {16}), {max}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->dims[0].pieces.size(), 2u);
  EXPECT_EQ(plan->dims[0].pieces[1].pairs, (Pairs{{1, 0}, {2, 1}, {3, 2}}));
  EXPECT_EQ(plan->bytes_per_device, 4);
  HaloWindow mean = WindowedOpHalo(0, 4, 16, 8, 2, 2, 0, 1);
  EXPECT_EQ(mean.size, 4);
  plan = PlanHalo(S("{devices=[4]0,1,2,3}"), Shape(DType::kF32, {16}), {mean}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->bytes_per_device, 0);
}

// A tile whose window holds no valid element (the padding tiles of a result) takes part in no
// exchange and reads an in-bounds window of its own buffer.
TEST(HaloPlanTest, TileWithNothingValidReceivesNothing) {
  // rows [0:3) of f32[8] over 4 (shards of 2), windows of 1 row at 0, 1, 2, 3: tile 3's row 3
  // is past the valid range [0, 3).
  HaloWindow w{0, {0, 1, 2, 3}, 1, 0, 3};
  absl::StatusOr<HaloPlan> plan =
      PlanHalo(S("{devices=[4]0,1,2,3}"), Shape(DType::kF32, {8}), {w}, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const HaloDimPlan& dim = plan->dims[0];
  for (const HaloPiece& piece : dim.pieces) {
    for (const auto& [source, target] : piece.pairs) EXPECT_NE(target, 3);
  }
  EXPECT_TRUE(dim.needs_mask);
  for (int64_t offset : dim.offset_by_device) {
    EXPECT_GE(offset, 0);
  }
}

TEST(HaloPlanTest, RejectsBadWindows) {
  const spmd::Sharding s = S("{devices=[4,1]0,1,2,3}");
  const Shape shape(DType::kF32, {8, 6});
  absl::StatusOr<HaloPlan> untiled = PlanHalo(s, shape, {HaloWindow{1, {0}, 6, 0, 6}}, 4);
  EXPECT_EQ(untiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(untiled.status().message(), HasSubstr("the dim is not tiled"));
  absl::StatusOr<HaloPlan> starts = PlanHalo(s, shape, {HaloWindow{0, {0, 2}, 2, 0, 8}}, 4);
  EXPECT_THAT(starts.status().message(), HasSubstr("expected 4 window starts, got 2"));
  absl::StatusOr<HaloPlan> range = PlanHalo(s, shape, {HaloWindow{0, {0, 2, 4, 6}, 2, 0, 9}}, 4);
  EXPECT_THAT(range.status().message(), HasSubstr("valid range [0, 9)"));
  absl::StatusOr<HaloPlan> replicated =
      PlanHalo(spmd::Sharding::Replicate(), shape, {HaloWindow{0, {0}, 8, 0, 8}}, 4);
  EXPECT_EQ(replicated.status().code(), absl::StatusCode::kUnimplemented);
}

// The input gradient of a stride-2 conv (lhs_dilate 2, 3-wide window, pad 2_1) on 8 rows over
// 4 devices, 16 output rows: device k reads dilated positions [4k-2, 4k+4), i.e. rows 2k-1 ..
// 2k+1, with no local padding before its first row and one position after the last.
TEST(ConvHaloTest, BaseDilatedWindowIsTheSameOnEveryDevice) {
  WindowDim w;
  w.size = 3;
  w.padding_low = 2;
  w.padding_high = 1;
  w.base_dilation = 2;
  std::optional<ConvLhsHalo> halo = BaseDilatedConvHalo(1, 4, 8, 16, w);
  ASSERT_TRUE(halo.has_value());
  EXPECT_THAT(halo->window.start, ElementsAre(-1, 1, 3, 5));
  EXPECT_EQ(halo->window.size, 3);
  EXPECT_EQ(halo->window.valid_end, 8);
  EXPECT_EQ(halo->padding_low, 0);
  EXPECT_EQ(halo->padding_high, 1);
  EXPECT_EQ(halo->window_size, 3);
  // 11 output rows, 3 per device: windows start at dilated -1, 2, 5, 8, alternately on a hole
  // and on a row, so the local padding would differ: no halo.
  w.padding_low = 1;
  EXPECT_FALSE(BaseDilatedConvHalo(1, 4, 6, 11, w).has_value());
  // Without base dilation it is WindowedOpHalo with no local padding.
  WindowDim plain;
  plain.size = 3;
  plain.stride = 2;
  plain.padding_low = 1;
  std::optional<ConvLhsHalo> same = BaseDilatedConvHalo(0, 4, 13, 7, plain);
  ASSERT_TRUE(same.has_value());
  const HaloWindow expected = WindowedOpHalo(0, 4, 13, 7, 3, 2, 1, 1);
  EXPECT_EQ(same->window.start, expected.start);
  EXPECT_EQ(same->window.size, expected.size);
  EXPECT_EQ(same->padding_low, 0);
  EXPECT_EQ(same->padding_high, 0);
}

// The weight gradient of a 3x3 conv with pad 1 on 13 rows over 4 devices: kernel (output
// gradient) tiles of 4 rows; device k reads activation rows [4k-1, 4k+5) and runs a 4-wide
// window with no padding, yielding all 3 output rows.
TEST(ConvHaloTest, KernelTiledWindowFollowsTheKernelTile) {
  WindowDim w;
  w.size = 13;
  w.padding_low = 1;
  w.padding_high = 1;
  ConvLhsHalo halo = KernelTiledConvHalo(1, 4, 13, 13, 3, w);
  EXPECT_THAT(halo.window.start, ElementsAre(-1, 3, 7, 11));
  EXPECT_EQ(halo.window.size, 6);
  EXPECT_EQ(halo.window.valid_end, 13);
  EXPECT_EQ(halo.window_size, 4);
  EXPECT_EQ(halo.padding_low, 0);
  EXPECT_EQ(halo.padding_high, 0);
  // Window dilation 2 (the weight gradient of a stride-2 conv): kernel tiles of 2 rows span 4
  // activation rows each.
  w.size = 8;
  w.padding_low = 0;
  w.window_dilation = 2;
  ConvLhsHalo dilated = KernelTiledConvHalo(1, 4, 16, 8, 3, w);
  EXPECT_THAT(dilated.window.start, ElementsAre(0, 4, 8, 12));
  EXPECT_EQ(dilated.window.size, 5);
  EXPECT_EQ(dilated.window_size, 2);
}

}  // namespace
}  // namespace tessel::partitioner::internal
