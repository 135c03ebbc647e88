#include "tessel/spmd/mark_sharding.h"

#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::spmd {
namespace {

using ::testing::HasSubstr;

Mesh Mesh42() {
  absl::StatusOr<Mesh> mesh = Mesh::Create({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}, {"x", "y"});
  EXPECT_TRUE(mesh.ok());
  return *mesh;
}

Tensor Zeros(std::vector<int64_t> dims) {
  return Tensor::FromLiteral(Literal(Shape(DType::kF32, std::move(dims))));
}

TEST(MarkShardingTest, SetsXlaText) {
  // torch_xla's docstring: 4-way data parallel input, 2-way model parallel weight.
  Tensor input = Zeros({8, 32});
  ASSERT_TRUE(mark_sharding(input, Mesh42(), {0, kNone}).ok());
  EXPECT_EQ(input.sharding(), "{devices=[4,1,2]<=[8] last_tile_dim_replicate}");
  EXPECT_EQ(GetSharding(input)->value().ToString(),
            "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  Tensor weight = Zeros({10, 32});
  ASSERT_TRUE(mark_sharding(weight, Mesh42(), {kNone, "y"}).ok());
  EXPECT_EQ(weight.sharding(), "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}");
  EXPECT_EQ(GetSharding(weight)->value().ToString(),
            "{devices=[1,2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}");
  absl::StatusOr<std::optional<Sharding>> parsed = GetSharding(weight);
  ASSERT_TRUE(parsed.ok() && parsed->has_value());
  EXPECT_EQ((*parsed)->num_tiles(1), 2);
  clear_sharding(weight);
  EXPECT_EQ(weight.sharding(), "");
  EXPECT_FALSE(GetSharding(weight)->has_value());
  // A scalar is replicated.
  Tensor scalar = Tensor::FromLiteral(Literal::Scalar<float>(1));
  ASSERT_TRUE(mark_sharding(scalar, Mesh42(), {}).ok());
  EXPECT_EQ(scalar.sharding(), "{replicated}");
}

TEST(MarkShardingTest, ErrorsLeaveTheTensorUnchanged) {
  Tensor t = Zeros({8, 32});
  ASSERT_TRUE(mark_sharding(t, Mesh42(), {0, 1}).ok());
  const std::string before = t.sharding();
  absl::Status short_spec = mark_sharding(t, Mesh42(), {0});
  EXPECT_EQ(short_spec.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_spec.message(), HasSubstr("mark_sharding on f32[8,32]: partition_spec (0) "
                                              "has 1 entries for a rank-2 tensor"));
  EXPECT_THAT(mark_sharding(t, Mesh42(), {"z", kNone}).message(),
              HasSubstr("unknown mesh axis \"z\""));
  EXPECT_THAT(mark_sharding(t, Mesh42(), {"x", "x"}).message(), HasSubstr("used twice"));
  EXPECT_EQ(t.sharding(), before);
  Tensor undefined;
  EXPECT_FALSE(mark_sharding(undefined, Mesh42(), {}).ok());
  Tensor errored = Tensor::Error(absl::InvalidArgumentError("boom"));
  EXPECT_EQ(mark_sharding(errored, Mesh42(), {}).message(), "boom");
  t.SetSharding("{nonsense}");
  EXPECT_FALSE(GetSharding(t).ok());
}

TEST(MarkShardingTest, GlobalMeshAndShardingSpec) {
  clear_global_mesh();
  Tensor t = Zeros({8, 4});
  EXPECT_EQ(mark_sharding(t, {0, kNone}).code(), absl::StatusCode::kFailedPrecondition);
  set_global_mesh(Mesh42());
  ASSERT_TRUE(mark_sharding(t, {"x", "y"}).ok());
  EXPECT_EQ(t.sharding(), "{devices=[4,2]<=[8]}");
  clear_global_mesh();

  ShardingSpec spec(Mesh42(), {kNone, 0});
  Tensor u = Zeros({3, 8});
  ASSERT_TRUE(ApplyShardingSpec(spec, u).ok());
  EXPECT_EQ(u.sharding(), "{devices=[1,4,2]<=[8] last_tile_dim_replicate}");
  Tensor v = Zeros({3});
  EXPECT_THAT(ApplyShardingSpec(spec, v).message(), HasSubstr("does not apply to f32[3]"));
}

}  // namespace
}  // namespace tessel::spmd
