#include "tessel/spmd/sharded_tensor.h"

#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel::spmd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

Sharding Parse(const std::string& text) {
  absl::StatusOr<Sharding> s = ParseSharding(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

ShardedTensor Make(std::vector<int64_t> dims, const std::string& sharding, int64_t devices) {
  absl::StatusOr<ShardedTensor> t =
      ShardedTensor::Create(Shape(DType::kF32, std::move(dims)), Parse(sharding), devices);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

Literal Arange(std::vector<int64_t> dims) {
  std::vector<float> values(Shape(DType::kF32, dims).num_elements());
  std::iota(values.begin(), values.end(), 1.0f);
  return Literal::FromVector<float>(std::move(dims), values);
}

TEST(ShardedTensorTest, UnevenFiveOnFour) {
  // 5 elements on 4 devices: ceil(5/4) = 2 each; [0:2], [2:4], [4:5], [5:5].
  ShardedTensor t = Make({5}, "{devices=[4]0,1,2,3}", 4);
  EXPECT_EQ(t.local_shape().ToString(), "f32[2]");
  ASSERT_EQ(t.shards().size(), 4u);
  EXPECT_THAT(t.shards()[0].index, ElementsAre(Pair(0, 2)));
  EXPECT_THAT(t.shards()[1].index, ElementsAre(Pair(2, 4)));
  EXPECT_THAT(t.shards()[2].index, ElementsAre(Pair(4, 5)));
  EXPECT_THAT(t.shards()[3].index, ElementsAre(Pair(5, 5)));
  EXPECT_THAT(t.shards()[3].data_dims(), ElementsAre(0));
  Literal x = Literal::FromVector<float>({5}, {1, 2, 3, 4, 5});
  absl::StatusOr<std::vector<Literal>> locals = t.Split(x);
  ASSERT_TRUE(locals.ok()) << locals.status();
  EXPECT_EQ((*locals)[2].ToDoubles(), (std::vector<double>{5, 0}));  // padded with zero
  EXPECT_EQ((*locals)[3].ToDoubles(), (std::vector<double>{0, 0}));
  EXPECT_EQ(*t.Assemble(*locals), x);
}

TEST(ShardedTensorTest, UnevenThreeTimesPlusOne) {
  // devices * 3 + 1 = 13 rows on 4 devices: 4 each, the last holds 1.
  ShardedTensor t = Make({13, 2}, "{devices=[4,1]0,1,2,3}", 4);
  EXPECT_EQ(t.local_shape().ToString(), "f32[4,2]");
  EXPECT_THAT(t.shards()[3].index, ElementsAre(Pair(12, 13), Pair(0, 2)));
  Literal x = Arange({13, 2});
  EXPECT_EQ(*t.Assemble(*t.Split(x)), x);
}

// A dim near 2^63: ceil(dim / tiles) without computing dim + tiles - 1, which wrapped to a
// negative local dim and aborted in Shape's check (reached from Python's tessel.shard).
TEST(ShardedTensorTest, DimNearInt64MaxDoesNotWrap) {
  constexpr int64_t kDim = std::numeric_limits<int64_t>::max();
  ShardedTensor t = Make({kDim}, "{devices=[3]0,1,2}", 3);
  EXPECT_EQ(t.local_shape().dim(0), kDim / 3 + 1);
  EXPECT_THAT(t.shards()[2].index, ElementsAre(Pair(2 * (kDim / 3 + 1), kDim)));
}

TEST(ShardedTensorTest, PartialReplicationReplicaIds) {
  // torch_xla docs: mesh (2, 4), spec (0, None) on an 8x10 tensor.
  ShardedTensor t = Make({8, 10}, "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", 8);
  EXPECT_EQ(t.local_shape().ToString(), "f32[4,10]");
  ASSERT_EQ(t.shards().size(), 8u);
  for (const Shard& shard : t.shards()) {
    EXPECT_EQ(shard.replica_id, shard.device_id % 4);
    EXPECT_THAT(shard.tile_index, ElementsAre(shard.device_id / 4, 0));
    const int64_t row = shard.device_id < 4 ? 0 : 4;
    EXPECT_THAT(shard.index, ElementsAre(Pair(row, row + 4), Pair(0, 10)));
  }
  Literal x = Arange({8, 10});
  std::vector<Literal> locals = *t.Split(x);
  EXPECT_EQ(locals[5], locals[4]);  // replicas hold the same data
  EXPECT_EQ(*t.Assemble(locals), x);
}

TEST(ShardedTensorTest, TransposedTileAssignment) {
  ShardedTensor t = Make({8, 6}, "{devices=[4,2]0,4,1,5,2,6,3,7}", 8);
  EXPECT_EQ(t.local_shape().ToString(), "f32[2,3]");
  const Shard* s5 = t.shard_for(5);
  ASSERT_NE(s5, nullptr);
  EXPECT_THAT(s5->tile_index, ElementsAre(1, 1));
  EXPECT_THAT(s5->index, ElementsAre(Pair(2, 4), Pair(3, 6)));
  Literal x = Arange({8, 6});
  std::vector<Literal> locals = *t.Split(x);
  EXPECT_EQ(locals[5].ToDoubles(), (std::vector<double>{16, 17, 18, 22, 23, 24}));
  EXPECT_EQ(*t.Assemble(locals), x);
}

TEST(ShardedTensorTest, ReplicatedAndMaximal) {
  ShardedTensor r = Make({3}, "{replicated}", 4);
  ASSERT_EQ(r.shards().size(), 4u);
  for (const Shard& shard : r.shards()) {
    EXPECT_EQ(shard.replica_id, shard.device_id);  // torch_xla: the ordinal
    EXPECT_THAT(shard.index, ElementsAre(Pair(0, 3)));
  }
  EXPECT_EQ(r.local_shape().ToString(), "f32[3]");
  Literal x = Arange({3});
  EXPECT_EQ(*r.Assemble(*r.Split(x)), x);

  ShardedTensor m = Make({2, 2}, "{maximal device=2}", 4);
  ASSERT_EQ(m.shards().size(), 1u);
  EXPECT_EQ(m.shards()[0].device_id, 2);
  EXPECT_EQ(m.shard_for(1), nullptr);
  EXPECT_EQ(*m.Assemble(*m.Split(Arange({2, 2}))), Arange({2, 2}));

  // A scalar.
  ShardedTensor s = Make({}, "{replicated}", 2);
  EXPECT_EQ(s.local_shape().ToString(), "f32[]");
  Literal one = Literal::Scalar<float>(7);
  EXPECT_EQ(*s.Assemble(*s.Split(one)), one);
}

TEST(ShardedTensorTest, SubsetOfDevices) {
  // A sharding over devices 1 and 3 of 4: the others hold nothing.
  ShardedTensor t = Make({4}, "{devices=[2]3,1}", 4);
  ASSERT_EQ(t.shards().size(), 2u);
  EXPECT_EQ(t.shards()[0].device_id, 1);
  EXPECT_THAT(t.shards()[0].index, ElementsAre(Pair(2, 4)));
  EXPECT_EQ(t.shard_for(0), nullptr);
}

TEST(ShardedTensorTest, UnreducedSumsPartials) {
  ShardedTensor t = Make({4}, "{devices=[2,2]1,0,3,2 last_tile_dims={unreduced}}", 4);
  // Device 1 has unreduced_id 0 in tile 0; device 0 has 1.
  EXPECT_EQ(t.shard_for(1)->unreduced_id, 0);
  EXPECT_EQ(t.shard_for(0)->unreduced_id, 1);
  Literal a = Literal::FromVector<float>({2}, {1, 2});
  Literal b = Literal::FromVector<float>({2}, {10, 20});
  Literal c = Literal::FromVector<float>({2}, {3, 4});
  Literal d = Literal::FromVector<float>({2}, {30, 40});
  // shards() order is device 0, 1, 2, 3.
  absl::StatusOr<Literal> sum = t.Assemble({a, b, c, d});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->ToDoubles(), (std::vector<double>{11, 22, 33, 44}));
  Literal x = Arange({4});
  EXPECT_EQ(*t.Assemble(*t.Split(x)), x);

  ShardedTensor full = Make({2}, "{unreduced}", 3);
  EXPECT_EQ(full.shards()[2].unreduced_id, 2);
  EXPECT_EQ(full.shards()[2].replica_id, 0);
  EXPECT_EQ(*full.Assemble(*full.Split(Arange({2}))), Arange({2}));
}

TEST(ShardedTensorTest, OtherDTypes) {
  absl::StatusOr<ShardedTensor> t =
      ShardedTensor::Create(Shape(DType::kS32, {3, 5}), Parse("{devices=[2,2]0,1,2,3}"), 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->local_shape().ToString(), "s32[2,3]");
  std::vector<int32_t> values(15);
  std::iota(values.begin(), values.end(), -7);
  Literal x = Literal::FromVector<int32_t>({3, 5}, values);
  EXPECT_EQ(*t->Assemble(*t->Split(x)), x);
  absl::StatusOr<ShardedTensor> p = ShardedTensor::Create(
      Shape(DType::kPred, {3}), Parse("{devices=[1,2]0,1 last_tile_dims={unreduced}}"), 2);
  ASSERT_TRUE(p.ok());
  Literal yes = Literal::FromVector<bool>({3}, {true, false, true});
  Literal no = Literal::FromVector<bool>({3}, {false, false, true});
  EXPECT_EQ(p->Assemble({no, yes})->ToDoubles(), (std::vector<double>{1, 0, 1}));
}

// Split then Assemble is the identity for random shapes and partition specs.
TEST(ShardedTensorTest, RandomRoundTrip) {
  std::mt19937_64 rng(7);
  const std::vector<std::vector<int64_t>> meshes = {{8}, {2, 4}, {2, 2, 2}, {4, 2}, {1, 3}};
  for (int iteration = 0; iteration < 300; ++iteration) {
    const std::vector<int64_t>& mesh_shape = meshes[rng() % meshes.size()];
    std::vector<int64_t> ids(Product(mesh_shape));
    std::iota(ids.begin(), ids.end(), int64_t{0});
    std::shuffle(ids.begin(), ids.end(), rng);
    Mesh mesh = *Mesh::Create(ids, mesh_shape);
    const int64_t rank = 1 + rng() % 3;
    std::vector<int64_t> dims(rank);
    for (int64_t& d : dims) d = rng() % 7;  // includes 0 and sizes smaller than the tiles
    std::vector<int64_t> axes(mesh.rank());
    std::iota(axes.begin(), axes.end(), int64_t{0});
    std::shuffle(axes.begin(), axes.end(), rng);
    std::vector<PartitionSpec::Entry> entries;
    size_t next = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (next < axes.size() && rng() % 2) {
        entries.emplace_back(axes[next++]);
      } else {
        entries.emplace_back(kNone);
      }
    }
    absl::StatusOr<Sharding> sharding =
        ShardingFromPartitionSpec(mesh, rank, PartitionSpec(entries));
    ASSERT_TRUE(sharding.ok()) << sharding.status();
    absl::StatusOr<ShardedTensor> t =
        ShardedTensor::Create(Shape(DType::kF32, dims), *sharding, mesh.size());
    ASSERT_TRUE(t.ok()) << t.status();
    Literal x = Arange(dims);
    absl::StatusOr<std::vector<Literal>> locals = t->Split(x);
    ASSERT_TRUE(locals.ok());
    absl::StatusOr<Literal> back = t->Assemble(*locals);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, x) << sharding->ToString();
    // Every element is held by exactly (number of replicas) devices.
    int64_t held = 0;
    for (const Shard& shard : t->shards()) held += Product(shard.data_dims());
    const int64_t replicas = static_cast<int64_t>(t->shards().size()) / sharding->NumTiles();
    EXPECT_EQ(held, x.num_elements() * replicas) << sharding->ToString();
  }
}

TEST(ShardedTensorTest, Errors) {
  auto create = [](const Shape& shape, const std::string& sharding, int64_t devices) {
    return ShardedTensor::Create(shape, Parse(sharding), devices).status();
  };
  Shape f8 = Shape(DType::kF32, {8});
  EXPECT_THAT(create(f8, "{manual}", 2).message(), HasSubstr("is manual"));
  EXPECT_THAT(
      create(Shape(DType::kF32, {8, 2}), "{devices=[1,2,2]0,1,2,3 last_tile_dims={manual}}", 4)
          .message(),
      HasSubstr("is manual"));
  EXPECT_THAT(create(f8, "{{replicated}}", 2).message(), HasSubstr("non-tuple"));
  EXPECT_EQ(create(f8, "{devices=[2,2]0,1,2,3}", 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(create(f8, "{devices=[2]0,5}", 4).code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(create(f8, "{replicated}", 0).ok());

  ShardedTensor t = Make({4}, "{devices=[2]0,1}", 2);
  EXPECT_THAT(t.Split(Arange({5})).status().message(), HasSubstr("cannot split a f32[5]"));
  EXPECT_THAT(t.Assemble({Arange({2})}).status().message(), HasSubstr("needs 2 shards, got 1"));
  EXPECT_THAT(t.Assemble({Arange({2}), Arange({3})}).status().message(),
              HasSubstr("shard 1 (device 1) is f32[3], expected f32[2]"));
}

}  // namespace
}  // namespace tessel::spmd
