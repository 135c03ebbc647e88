// Unit tests of the sharding algebra, reshard plans, propagation and the partitioner's output
// structure. Numerical correctness is tests/integration/partition_property_test.cc.
#include "partitioner/partitioner.h"

#include "core/graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitioner/propagation.h"
#include "partitioner/reshard.h"
#include "partitioner/sharding_util.h"

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
