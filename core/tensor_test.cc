#include "tessel/core/tensor.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/hlo_text.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

Literal Vec(std::vector<int64_t> dims, std::vector<float> values) {
  return Literal::FromVector<float>(std::move(dims), values);
}

TEST(TensorTest, LazyOpsRunOnToLiteral) {
  ResetLazyMetrics();
  Tensor x = Tensor::FromLiteral(Vec({2, 3}, {1, 2, 3, 4, 5, 6}));
  Tensor w = Tensor::FromLiteral(Vec({3, 2}, {1, 0, 0, 1, 1, 1}));
  Tensor y = MatMul(x, w) + 1.0;
  EXPECT_FALSE(y.is_data());
  EXPECT_EQ(y.shape(), Shape(DType::kF32, {2, 2}));
  absl::StatusOr<Literal> value = y.ToLiteral();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->ToDoubles(), (std::vector<double>{5, 6, 11, 12}));
  EXPECT_TRUE(y.is_data());
  EXPECT_EQ(GetLazyMetrics().syncs, 1);
}

TEST(TensorTest, SyncMaterializesLiveTensorsAndCachesTheGraph) {
  ResetLazyMetrics();
  Tensor w = Tensor::FromLiteral(Vec({2}, {1, 2}));
  for (int step = 0; step < 3; ++step) {
    w = w * 2.0 + 1.0;  // the same graph every step, on new data
    ASSERT_TRUE(Sync().ok());
    EXPECT_TRUE(w.is_data());
  }
  EXPECT_EQ(w.ToLiteral()->ToDoubles(), (std::vector<double>{15, 23}));
  EXPECT_EQ(GetLazyMetrics().compiles, 1);
  EXPECT_EQ(GetLazyMetrics().cache_hits, 2);
}

// Sync finds a step it has seen in the lazy cache (a key over the lazy DAG, no lowering); graphs
// that differ only in a constant's value, in which leaves are the same value, in an attribute
// or in a sharding annotation must not share an entry.
TEST(TensorTest, LazyCacheTellsApartGraphsThatDifferInOneDetail) {
  ResetLazyMetrics();
  Tensor a = Tensor::FromLiteral(Vec({2, 2}, {1, 2, 3, 4}));
  Tensor b = Tensor::FromLiteral(Vec({2, 2}, {10, 20, 30, 40}));
  auto value = [](const Tensor& t) { return t.ToLiteral()->ToDoubles(); };
  EXPECT_EQ(value(a * 2.0), (std::vector<double>{2, 4, 6, 8}));
  EXPECT_EQ(value(a * 3.0), (std::vector<double>{3, 6, 9, 12}));   // constant
  EXPECT_EQ(value(a + a), (std::vector<double>{2, 4, 6, 8}));      // one leaf twice
  EXPECT_EQ(value(a + b), (std::vector<double>{11, 22, 33, 44}));  // two leaves
  EXPECT_EQ(value(Transpose(a, {1, 0}) + b), (std::vector<double>{11, 23, 32, 44}));
  EXPECT_EQ(value(Transpose(a, {0, 1}) + b), (std::vector<double>{11, 22, 33, 44}));
  EXPECT_EQ(GetLazyMetrics().compiles, 6);
  EXPECT_EQ(GetLazyMetrics().cache_hits, 0);
  // The same DAG over new values: a hit.
  EXPECT_EQ(value(b * 2.0), (std::vector<double>{20, 40, 60, 80}));
  EXPECT_EQ(GetLazyMetrics().cache_hits, 1);
  // A sharding annotation is part of the graph.
  Tensor annotated = b * 2.0;
  annotated.SetSharding("{replicated}");
  EXPECT_EQ(value(annotated), (std::vector<double>{20, 40, 60, 80}));
  EXPECT_EQ(GetLazyMetrics().compiles, 7);
}

TEST(TensorTest, ErrorsPropagateAsStatusNotCrash) {
  Tensor a = Tensor::FromLiteral(Vec({2, 3}, {1, 2, 3, 4, 5, 6}));
  Tensor b = Tensor::FromLiteral(Vec({2, 3}, {1, 2, 3, 4, 5, 6}));
  Tensor bad = MatMul(a, b);
  EXPECT_FALSE(bad.status().ok());
  Tensor worse = Exp(bad) + 1.0;
  absl::StatusOr<Literal> value = worse.ToLiteral();
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(value.status().message(), HasSubstr("dot: lhs contracting dim 1 has size 3"));
  EXPECT_FALSE(Sync({worse}).ok());
}

TEST(TensorTest, TraceGraphKeepsShardingsAndParameters) {
  Tensor x = Tensor::FromLiteral(Vec({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  x.SetSharding("{devices=[2,1]0,1}");
  Tensor y = ReduceSum(Tanh(x), {1});
  absl::StatusOr<TracedGraph> traced = TraceGraph({y}, "t");
  ASSERT_TRUE(traced.ok());
  ASSERT_EQ(traced->parameters.size(), 1u);
  EXPECT_TRUE(traced->parameters[0].SameAs(traced->parameters[0]));
  EXPECT_EQ(traced->graph->parameters()[0]->sharding(), "{devices=[2,1]0,1}");
  EXPECT_EQ(traced->graph->root()->opcode(), Opcode::kReduce);
}

TEST(TensorTest, FingerprintIgnoresNamesButNotStructure) {
  auto build = [](std::string name, float c) {
    auto g = std::make_unique<Graph>(name);
    Node* p = g->AddParameter(0, Shape(DType::kF32, {3})).value();
    Node* k = g->AddConstant(Vec({3}, {c, c, c}));
    g->AddNode(Opcode::kAdd, {p, k}).value();
    return g;
  };
  EXPECT_EQ(GraphFingerprint(*build("a", 1)), GraphFingerprint(*build("b", 1)));
  EXPECT_NE(GraphFingerprint(*build("a", 1)), GraphFingerprint(*build("a", 2)));
}

TEST(TensorTest, RngIsAPureFunctionOfSeedAndIndex) {
  ManualSeed(7);
  Literal a = *RngUniform(Shape(DType::kF32, {64}), 0, 1).ToLiteral();
  ManualSeed(7);
  Literal b = *RngUniform(Shape(DType::kF32, {8, 8}), 0, 1).ToLiteral();
  EXPECT_EQ(a.ToDoubles(), b.ToDoubles());  // same global indices, other shape
  Literal c = *RngUniform(Shape(DType::kF32, {64}), 0, 1).ToLiteral();  // next seed
  EXPECT_NE(a.ToDoubles(), c.ToDoubles());
}

TEST(TensorTest, BroadcastToAndMean) {
  Tensor row = Tensor::FromLiteral(Vec({1, 3}, {1, 2, 3}));
  Tensor m = BroadcastTo(row, {2, 3});
  EXPECT_EQ(m.ToLiteral()->ToDoubles(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(ReduceMean(m, {0, 1}).ToLiteral()->ToDoubles(), (std::vector<double>{2}));
  EXPECT_FALSE(BroadcastTo(row, {2, 4}).status().ok());
}

}  // namespace
}  // namespace tessel
