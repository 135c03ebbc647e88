// Unit tests of the sharding algebra, reshard plans, propagation and the partitioner's output
// structure. Numerical correctness is tests/integration/partition_property_test.cc.
#include "tessel/partitioner/partitioner.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/partitioner/internal/reshape_dims.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/partitioner/reshard.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner {
namespace {

using spmd::ParseSharding;
using ::testing::HasSubstr;

Sharding S(std::string_view text) {
  absl::StatusOr<Sharding> s = ParseSharding(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status();
  return s.ok() ? *s : Sharding::Replicate();
}

TEST(ShardingUtilTest, ProjectMovesTilesIntoReplication) {
  Sharding s = S("{devices=[2,4]0,1,2,3,4,5,6,7}");
  EXPECT_EQ(Project(s, {0}), S("{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
  EXPECT_EQ(Project(s, {1}), S("{devices=[4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"));
  EXPECT_EQ(Project(s, {1, 0}), S("{devices=[4,2]0,4,1,5,2,6,3,7}"));
  EXPECT_TRUE(Project(s, {}).IsReplicated());
}

TEST(ShardingUtilTest, EmbedAndPartiallyReplicate) {
  Sharding row = S("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(Embed(row, 3, {1}), S("{devices=[1,2,1,2]0,1,2,3 last_tile_dim_replicate}"));
  Sharding s = S("{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(PartiallyReplicate(s, 2, {1}), S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"));
  EXPECT_EQ(TransposeSharding(s, {1, 0}), S("{devices=[2,2]0,2,1,3}"));
}

// The device-by-device merge (the definition): each device keeps its tile index from a on a's
// tiled dims and from b on b's; the devices of one merged tile, ascending, form its replicas.
std::optional<Sharding> ReferenceMerge(const Sharding& a, const Sharding& b, int64_t rank,
                                       int64_t num_devices) {
  std::vector<int64_t> tiles(rank, 1);
  for (int64_t d = 0; d < rank; ++d) {
    if (a.num_tiles(d) > 1 && b.num_tiles(d) > 1 && a.num_tiles(d) != b.num_tiles(d)) {
      return std::nullopt;
    }
    tiles[d] = std::max(a.num_tiles(d), b.num_tiles(d));
  }
  std::map<std::vector<int64_t>, std::vector<int64_t>> by_index;
  for (int64_t device = 0; device < num_devices; ++device) {
    std::vector<int64_t> ia = *a.TileIndexOf(device), ib = *b.TileIndexOf(device);
    std::vector<int64_t> index(rank);
    for (int64_t d = 0; d < rank; ++d) {
      if (a.num_tiles(d) > 1 && b.num_tiles(d) > 1 && ia[d] != ib[d]) return std::nullopt;
      index[d] = a.num_tiles(d) > 1 ? ia[d] : ib[d];
    }
    by_index[index].push_back(device);
  }
  if (static_cast<int64_t>(by_index.size()) != spmd::Product(tiles)) return std::nullopt;
  std::vector<int64_t> ids;
  for (const auto& [index, devices] : by_index) {
    if (devices.size() != by_index.begin()->second.size()) return std::nullopt;
    ids.insert(ids.end(), devices.begin(), devices.end());
  }
  tiles.push_back(static_cast<int64_t>(by_index.begin()->second.size()));
  return Sharding::PartialTile(DeviceArray(tiles, ids));
}

// Random partially replicated tilings of a random mesh (as mark_sharding makes them), merged
// pairwise: the O(rank) merge on compact tile assignments equals the definition.
TEST(ShardingUtilTest, MergeOnCompactTilingsMatchesDeviceByDeviceMerge) {
  std::mt19937 rng(5);
  int merged = 0, conflicts = 0;
  for (int trial = 0; trial < 600; ++trial) {
    // Mesh of 2-3 axes over 8, 16 or 24 devices, ids a transposed iota.
    const std::vector<std::vector<int64_t>> meshes = {{2, 4}, {4, 2},    {2, 2, 2}, {2, 2, 4},
                                                      {4, 4}, {2, 3, 4}, {3, 8}};
    const std::vector<int64_t>& mesh_dims = meshes[rng() % meshes.size()];
    const int64_t n = spmd::Product(mesh_dims);
    std::vector<int64_t> perm(mesh_dims.size());
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int64_t> reshape;
    for (int64_t p : perm) reshape.push_back(mesh_dims[p]);
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
    DeviceArray mesh = *DeviceArray::IotaTransposed(mesh_dims, reshape, inverse);
    const int64_t rank = 3;
    // A tensor dim takes at most one mesh axis; unused axes replicate (torch_xla semantics).
    auto random_sharding = [&] {
      std::vector<int64_t> axis_of_dim(rank, -1);
      for (int64_t axis = 0; axis < static_cast<int64_t>(mesh_dims.size()); ++axis) {
        const int64_t d = static_cast<int64_t>(rng() % (rank + 1));
        if (d < rank && axis_of_dim[d] < 0) axis_of_dim[d] = axis;
      }
      std::vector<int64_t> order, dims;
      for (int64_t d = 0; d < rank; ++d) {
        if (axis_of_dim[d] >= 0) order.push_back(axis_of_dim[d]);
        dims.push_back(axis_of_dim[d] >= 0 ? mesh_dims[axis_of_dim[d]] : 1);
      }
      int64_t replicas = 1;
      for (int64_t axis = 0; axis < static_cast<int64_t>(mesh_dims.size()); ++axis) {
        if (std::find(order.begin(), order.end(), axis) == order.end()) {
          order.push_back(axis);
          replicas *= mesh_dims[axis];
        }
      }
      dims.push_back(replicas);
      return Sharding::PartialTile(mesh.Transpose(order).Reshape(dims));
    };
    Sharding a = random_sharding(), b = random_sharding();
    if (!a.IsTiled() || !b.IsTiled()) continue;
    ASSERT_TRUE(a.tile_assignment().is_compact());
    std::optional<Sharding> expected = ReferenceMerge(a, b, rank, n);
    std::optional<Sharding> got = MergeShardings(a, b, rank, n);
    ASSERT_EQ(got.has_value(), expected.has_value()) << a << " + " << b;
    if (got.has_value()) {
      EXPECT_EQ(*got, *expected) << a << " + " << b;
      ++merged;
    } else {
      ++conflicts;
    }
  }
  EXPECT_GT(merged, 100);
  EXPECT_GT(conflicts, 10);
}

TEST(ShardingUtilTest, MergeCombinesDisjointTilings) {
  // Mesh 2x2 (data, model): batch over data, features over model.
  Sharding batch = S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  Sharding features = S("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  std::optional<Sharding> merged = MergeShardings(batch, features, 2, 4);
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(*merged, S("{devices=[2,2]0,1,2,3}"));
  // Conflicting mappings of the same dim do not merge.
  EXPECT_FALSE(MergeShardings(S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
                              S("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"), 2, 4)
                   .has_value());
}

TEST(ShardingUtilTest, GroupsAndLocalShapes) {
  Sharding s = S("{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(GroupsAlongDims(s, {1}), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(GroupsAlongDims(s, {0}), (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(LocalShape(Shape(DType::kF32, {9, 4}), s), Shape(DType::kF32, {5, 2}));
}

TEST(ReshardTest, TiledToReplicatedIsOneAllGather) {
  absl::StatusOr<ReshardPlan> plan = PlanReshard(S("{devices=[4,1]0,1,2,3}"), Sharding::Replicate(),
                                                 Shape(DType::kF32, {8, 32}), 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].kind, ReshardStep::Kind::kAllGather);
  EXPECT_EQ(plan->steps[0].groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
  EXPECT_EQ(plan->bytes_per_device, 8 * 32 * 4 * 3 / 4);
}

TEST(ReshardTest, ReplicatedToTiledIsLocal) {
  absl::StatusOr<ReshardPlan> plan = PlanReshard(Sharding::Replicate(), S("{devices=[1,4]0,1,2,3}"),
                                                 Shape(DType::kF32, {8, 13}), 4);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].kind, ReshardStep::Kind::kLocalSlice);
  EXPECT_EQ(plan->bytes_per_device, 0);
}

TEST(ReshardTest, UnreducedIsAllReducedAndPermutationIsAPermute) {
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard(Sharding::Unreduced(), Sharding::Replicate(), Shape(DType::kF32, {4}), 2);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].kind, ReshardStep::Kind::kAllReduce);
  absl::StatusOr<ReshardPlan> permute =
      PlanReshard(S("{devices=[2]0,1}"), S("{devices=[2]1,0}"), Shape(DType::kF32, {4}), 2);
  ASSERT_TRUE(permute.ok());
  ASSERT_EQ(permute->steps.size(), 1u);
  EXPECT_EQ(permute->steps[0].kind, ReshardStep::Kind::kCollectivePermute);
}

// Partial sums over all 4 devices into rows over 2 replicated over 2: a reduce-scatter inside
// each unreduced group over the devices holding different row tiles, then an all-reduce of the
// shard over the devices holding the same tile; fewer bytes than all-reduce + slice.
TEST(ReshardTest, UnreducedToPartiallyReplicatedIsReduceScatterThenAllReduce) {
  const Shape shape(DType::kF32, {32, 128});
  absl::StatusOr<ReshardPlan> plan = PlanReshard(
      Sharding::Unreduced(), S("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"), shape, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps.size(), 2u);
  EXPECT_EQ(plan->steps[0].kind, ReshardStep::Kind::kReduceScatter);
  EXPECT_EQ(plan->steps[0].dim, 0);
  EXPECT_EQ(plan->steps[0].groups.groups(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(plan->steps[1].kind, ReshardStep::Kind::kAllReduce);
  EXPECT_EQ(plan->steps[1].groups.groups(), (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
  // 16 KiB buffer: 8 KiB received by the reduce-scatter, 8 KiB by the all-reduce of the shard,
  // against 24 KiB for an all-reduce of the whole buffer.
  EXPECT_EQ(plan->bytes_per_device, 8192 + 8192);
}

// Nested tilings of one dim (GSPMD's all-to-all and partial gathers, the MoE dispatch): rows
// over 8 -> rows over 2 x columns over 4 is an all-to-all inside the groups of 4 that share a row
// block; rows over 8 -> rows over 2 replicated is a gather inside those groups; the reverse, a
// finer tiling nested in the current one, is local. An indivisible dim keeps the general path.
TEST(ReshardTest, NestedTilingsMoveInsideGroups) {
  const Shape shape(DType::kF32, {8, 8});
  const Sharding rows8 = S("{devices=[8,1]<=[8]}");
  absl::StatusOr<ReshardPlan> a2a = PlanReshard(rows8, S("{devices=[2,4]<=[8]}"), shape, 8);
  ASSERT_TRUE(a2a.ok()) << a2a.status();
  ASSERT_EQ(a2a->steps.size(), 1u);
  EXPECT_EQ(a2a->steps[0].kind, ReshardStep::Kind::kAllToAll);
  EXPECT_EQ(a2a->steps[0].dim, 0);
  EXPECT_EQ(a2a->steps[0].to_dim, 1);
  EXPECT_EQ(a2a->steps[0].groups.groups(),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(a2a->bytes_per_device, 32 * 3 / 4);  // f32[1,8] local, 3/4 of it received

  const Sharding rows2 = S("{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  absl::StatusOr<ReshardPlan> gather = PlanReshard(rows8, rows2, shape, 8);
  ASSERT_TRUE(gather.ok()) << gather.status();
  ASSERT_EQ(gather->steps.size(), 1u);
  EXPECT_EQ(gather->steps[0].kind, ReshardStep::Kind::kAllGather);
  EXPECT_EQ(gather->steps[0].groups.groups(),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(gather->bytes_per_device, 4 * 8 * 4 * 3 / 4);

  absl::StatusOr<ReshardPlan> refine = PlanReshard(rows2, rows8, shape, 8);
  ASSERT_TRUE(refine.ok()) << refine.status();
  ASSERT_EQ(refine->steps.size(), 1u);
  EXPECT_EQ(refine->steps[0].kind, ReshardStep::Kind::kLocalSlice);
  EXPECT_EQ(refine->bytes_per_device, 0);

  // Rows do not nest when the devices of a row block are not the holders of its sub-blocks.
  absl::StatusOr<ReshardPlan> scattered =
      PlanReshard(S("{devices=[8,1]0,4,1,5,2,6,3,7}"), rows2, shape, 8);
  ASSERT_TRUE(scattered.ok());
  EXPECT_EQ(scattered->steps[0].groups.groups(),
            (std::vector<std::vector<int64_t>>{{0, 4, 1, 5, 2, 6, 3, 7}}));
  // 6 rows over 8 is uneven: the general gather-then-slice path.
  absl::StatusOr<ReshardPlan> uneven =
      PlanReshard(rows8, S("{devices=[2,4]<=[8]}"), Shape(DType::kF32, {6, 8}), 8);
  ASSERT_TRUE(uneven.ok());
  EXPECT_EQ(uneven->steps[0].kind, ReshardStep::Kind::kAllGather);
}

// A GQA-style split of a feature dim tiled 4 ways into [2 heads, 8]: the feature group cannot
// keep its tiling, the batch group keeps its own.
TEST(ReshapeTest, PartialReshapeShardingKeepsTheGroupsThatSurvive) {
  const Shape from(DType::kF32, {8, 24, 16});
  const Shape to(DType::kF32, {8, 24, 2, 8});
  const Sharding s = S("{devices=[2,1,4]0,1,2,3,4,5,6,7}");
  EXPECT_FALSE(internal::ReshapeSharding(s, from, to).has_value());
  auto partial = internal::PartialReshapeSharding(s, from, to);
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->first, S("{devices=[2,1,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
  EXPECT_EQ(partial->second, S("{devices=[2,1,1,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
  // Nothing survives when only the failing group was tiled.
  EXPECT_FALSE(
      internal::PartialReshapeSharding(S("{devices=[1,1,4]0,1,2,3}"), from, to).has_value());
}

TEST(CostTest, DefaultCostModelIsAV5pRing) {
  absl::StatusOr<mesh::CostModel> model = DefaultCostModel(8);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->topology().num_devices(), 8);
  EXPECT_DOUBLE_EQ(model->PeakFlopsPerSecond(DType::kBF16), 459e12);
  EXPECT_THAT(DefaultCostModel(0).status().message(), HasSubstr("num_devices must be in 1.."));
}

// x [8,16] batch over data, w1 column-parallel, w2 row-parallel on a 2x2 (data, model) mesh.
std::unique_ptr<Graph> MegatronMlp() {
  auto g = std::make_unique<Graph>("mlp");
  Node* x = g->AddParameter(0, Shape(DType::kF32, {8, 16}), "x").value();
  Node* w1 = g->AddParameter(1, Shape(DType::kF32, {16, 32}), "w1").value();
  Node* w2 = g->AddParameter(2, Shape(DType::kF32, {32, 16}), "w2").value();
  x->set_sharding("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  w1->set_sharding("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  w2->set_sharding("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  Node* h = g->AddNode(Opcode::kDot, {x, w1}, dot, "h").value();
  Node* zero = g->AddConstant(Literal::Scalar<float>(0));
  Node* zeros = g->AddNode(Opcode::kBroadcast, h->shape(), {zero}).value();
  Node* relu = g->AddNode(Opcode::kMaximum, {h, zeros}, {}, "relu").value();
  Node* y = g->AddNode(Opcode::kDot, {relu, w2}, dot, "y").value();
  y->set_sharding("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  return g;
}

TEST(PropagationTest, MegatronHiddenIsShardedBothWays) {
  auto g = MegatronMlp();
  ASSERT_TRUE(PropagateShardings(*g, 4).ok());
  EXPECT_EQ(S(g->FindNode("h")->sharding()), S("{devices=[2,2]0,1,2,3}"));
  EXPECT_EQ(S(g->FindNode("relu")->sharding()), S("{devices=[2,2]0,1,2,3}"));
  // The user's annotation is kept.
  EXPECT_EQ(S(g->FindNode("y")->sharding()), S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"));
}

TEST(PartitionTest, MegatronMlpHasOneAllReduceAndNoGather) {
  auto g = MegatronMlp();
  absl::StatusOr<SpmdProgram> program = Partition(*g, 4);
  ASSERT_TRUE(program.ok()) << program.status();
  auto counts = CountCollectives(*program->program);
  EXPECT_EQ(counts["all-reduce"].count, 1);
  EXPECT_EQ(counts.count("all-gather"), 0u);
  EXPECT_EQ(program->program->root()->shape(), Shape(DType::kF32, {4, 16}));
  bool found = false;
  for (const Node* node : program->program->nodes()) {
    if (node->opcode() == Opcode::kAllReduce) {
      found = true;
      EXPECT_EQ(node->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    }
  }
  EXPECT_TRUE(found);
}

// Four identical Megatron blocks on a 1024-device mesh (data=256 x model=4): the program keeps
// one replica-group list per distinct set of groups, shared by the collectives over it, and the
// partitioned parameters carry XLA's iota spelling, so nothing is repeated per layer x device.
TEST(PartitionTest, RepeatedLayersShareOneReplicaGroupListAtScale) {
  const int64_t n = 1024;
  auto g = std::make_unique<Graph>("blocks");
  Node* x = g->AddParameter(0, Shape(DType::kF32, {512, 16}), "x").value();
  x->set_sharding("{devices=[256,1,4]<=[1024] last_tile_dim_replicate}");
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  for (int layer = 0; layer < 4; ++layer) {
    Node* w1 = g->AddParameter(1 + 2 * layer, Shape(DType::kF32, {16, 32})).value();
    Node* w2 = g->AddParameter(2 + 2 * layer, Shape(DType::kF32, {32, 16})).value();
    w1->set_sharding("{devices=[1,4,256]<=[256,4]T(1,0) last_tile_dim_replicate}");
    w2->set_sharding("{devices=[4,1,256]<=[256,4]T(1,0) last_tile_dim_replicate}");
    Node* h = g->AddNode(Opcode::kDot, {x, w1}, dot).value();
    x = g->AddNode(Opcode::kDot, {h, w2}, dot).value();
    x->set_sharding("{devices=[256,1,4]<=[1024] last_tile_dim_replicate}");
  }
  absl::StatusOr<SpmdProgram> program = Partition(*g, n);
  ASSERT_TRUE(program.ok()) << program.status();
  std::set<const void*> identities;
  std::set<std::vector<std::vector<int64_t>>> contents;
  int64_t all_reduces = 0;
  for (const Node* node : program->program->nodes()) {
    if (node->opcode() == Opcode::kParameter) {
      EXPECT_THAT(node->sharding(), HasSubstr("<=[")) << node->name();
    }
    if (!IsCollective(node->opcode())) continue;
    identities.insert(node->attrs().replica_groups.identity());
    contents.insert(node->attrs().replica_groups.groups());
    all_reduces += node->opcode() == Opcode::kAllReduce ? 1 : 0;
  }
  EXPECT_EQ(all_reduces, 4);  // one per block, over the model groups
  EXPECT_EQ(identities.size(), contents.size());
  const std::vector<std::vector<int64_t>>& groups = *contents.begin();
  EXPECT_EQ(groups.size(), 256u);
  EXPECT_EQ(groups[255], (std::vector<int64_t>{1020, 1021, 1022, 1023}));
}

TEST(PartitionTest, WrongMeshAndBadAnnotationsAreErrorsNamingTheInstruction) {
  auto g = std::make_unique<Graph>("bad");
  Node* x = g->AddParameter(0, Shape(DType::kF32, {8}), "x").value();
  x->set_sharding("{devices=[2]0,1}");
  absl::StatusOr<SpmdProgram> p = Partition(*g, 4);  // devices 2 and 3 missing
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("%x"));
  x->set_sharding("{devices=[2,2]0,1,2,3}");  // rank 2 on a rank-1 value
  p = Partition(*g, 4);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("%x"));
  x->set_sharding("{devices=[2]0,7}");  // device outside the mesh
  EXPECT_FALSE(Partition(*g, 2).ok());
  x->set_sharding("{devices=[2");  // does not parse
  p = Partition(*g, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessel::partitioner
