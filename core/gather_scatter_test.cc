// gather and scatter in the executor: hand-computed cases (embedding lookup, batching dims,
// index_vector_dim in the middle and implicit at the end, clamping, skipped out-of-bounds
// windows, overwrite in index order), and random dimension numbers against the naive reference
// of core/testing/gather_scatter.h.
#include "tessel/core/testing/gather_scatter.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/testing/graphs.h"

namespace tessel {
namespace {

Literal RunOne(Opcode opcode, const std::vector<Literal>& inputs, const OpAttributes& attrs,
               int num_threads = 1) {
  Graph g("op");
  std::vector<Node*> params;
  for (size_t i = 0; i < inputs.size(); ++i) {
    params.push_back(Must(g.AddParameter(static_cast<int64_t>(i), inputs[i].shape())));
  }
  Must(g.AddNode(opcode, params, attrs));
  ExecutorOptions options;
  options.num_threads = num_threads;
  Executor executor(options);
  absl::StatusOr<std::vector<Literal>> out = executor.Run(g, inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::move((*out)[0]) : Literal();
}

GatherDimensionNumbers RowLookup(int64_t index_vector_dim, int64_t offset_dim, int64_t width) {
  GatherDimensionNumbers g;
  g.offset_dims = {offset_dim};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = index_vector_dim;
  g.slice_sizes = {1, width};
  return g;
}

TEST(GatherTest, EmbeddingLookupWithIndexVectorAtEndAndImplicit) {
  Literal table = Literal::FromVector<float>({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  Literal want = Literal::FromVector<float>({3, 2}, {20, 21, 0, 1, 30, 31});
  for (DType type : {DType::kS32, DType::kS64}) {
    // Explicit vector dim (s[3,1], index_vector_dim=1) and implicit (s[3], index_vector_dim=1).
    Literal explicit_ids = Literal(Shape(type, {3, 1}));
    Literal implicit_ids = Literal(Shape(type, {3}));
    const double ids[] = {2, 0, 3};
    for (int i = 0; i < 3; ++i) {
      explicit_ids.SetFromDouble(i, ids[i]);
      implicit_ids.SetFromDouble(i, ids[i]);
    }
    OpAttributes attrs;
    attrs.gather = RowLookup(1, 1, 2);
    EXPECT_EQ(RunOne(Opcode::kGather, {table, explicit_ids}, attrs), want);
    EXPECT_EQ(RunOne(Opcode::kGather, {table, implicit_ids}, attrs), want);
  }
}

TEST(GatherTest, IndexVectorDimFirstAndOffsetDimFirst) {
  // indices s32[2,3] with the vector along dim 0: start (row, col) pairs (0,1), (2,0), (1,2)...
  Literal x = Literal::FromVector<int32_t>({3, 4}, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
  Literal idx = Literal::FromVector<int32_t>({2, 3}, {0, 2, 1, 1, 0, 9});
  OpAttributes attrs;
  attrs.gather.offset_dims = {0};  // the window (size 2 along operand dim 1) comes first
  attrs.gather.collapsed_slice_dims = {0};
  attrs.gather.start_index_map = {0, 1};
  attrs.gather.index_vector_dim = 0;
  attrs.gather.slice_sizes = {1, 2};
  // Starts: (0,1), (2,0), (1, clamp(9) = 2).
  Literal want = Literal::FromVector<int32_t>({2, 3}, {1, 20, 12, 2, 21, 13});
  EXPECT_EQ(RunOne(Opcode::kGather, {x, idx}, attrs), want);
}

TEST(GatherTest, ClampsStartsSoTheSliceStaysInBounds) {
  Literal x = Literal::FromVector<float>({5}, {0, 1, 2, 3, 4});
  Literal idx = Literal::FromVector<int64_t>({4}, {-7, 1, 4, 100});
  OpAttributes attrs;
  attrs.gather.offset_dims = {1};
  attrs.gather.start_index_map = {0};
  attrs.gather.index_vector_dim = 1;
  attrs.gather.slice_sizes = {2};
  Literal want = Literal::FromVector<float>({4, 2}, {0, 1, 1, 2, 3, 4, 3, 4});
  EXPECT_EQ(RunOne(Opcode::kGather, {x, idx}, attrs), want);
}

TEST(GatherTest, BatchingDimsPickOneElementPerRow) {
  // take_along_axis: logits f32[2,3], labels s32[2,1] -> f32[2,1] (as the GPT loss does).
  Literal logits = Literal::FromVector<float>({2, 3}, {0, 1, 2, 10, 11, 12});
  Literal labels = Literal::FromVector<int32_t>({2, 1}, {2, 0});
  OpAttributes attrs;
  attrs.gather.collapsed_slice_dims = {1};
  attrs.gather.start_index_map = {1};
  attrs.gather.operand_batching_dims = {0};
  attrs.gather.start_indices_batching_dims = {0};
  attrs.gather.index_vector_dim = 1;
  attrs.gather.slice_sizes = {1, 1};
  EXPECT_EQ(RunOne(Opcode::kGather, {logits, labels}, attrs),
            Literal::FromVector<float>({2}, {2, 10}));
}

TEST(ScatterTest, AddAccumulatesDuplicatesAndSkipsOutOfBounds) {
  Literal zeros(Shape(DType::kF32, {4, 2}));
  Literal ids = Literal::FromVector<int32_t>({4, 1}, {1, 3, 1, 4});
  Literal updates = Literal::FromVector<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  OpAttributes attrs;
  attrs.scatter = GatherAsScatter(RowLookup(1, 1, 2));
  Literal want = Literal::FromVector<float>({4, 2}, {0, 0, 6, 8, 0, 0, 3, 4});
  EXPECT_EQ(RunOne(Opcode::kScatter, {zeros, ids, updates}, attrs), want);
}

TEST(ScatterTest, WindowPartlyOutsideIsSkippedWhole) {
  Literal x = Literal::FromVector<int32_t>({5}, {0, 0, 0, 0, 0});
  Literal idx = Literal::FromVector<int32_t>({3}, {0, 4, -1});
  Literal updates = Literal::FromVector<int32_t>({3, 2}, {1, 2, 3, 4, 5, 6});
  OpAttributes attrs;
  attrs.scatter.update_window_dims = {1};
  attrs.scatter.scatter_dims_to_operand_dims = {0};
  attrs.scatter.index_vector_dim = 1;
  EXPECT_EQ(RunOne(Opcode::kScatter, {x, idx, updates}, attrs),
            Literal::FromVector<int32_t>({5}, {1, 2, 0, 0, 0}));
}

TEST(ScatterTest, OverwriteAppliesUpdatesInIndexOrder) {
  Literal x = Literal::FromVector<float>({3}, {9, 9, 9});
  Literal idx = Literal::FromVector<int64_t>({3, 1}, {2, 0, 2});
  Literal updates = Literal::FromVector<float>({3}, {1, 2, 3});
  OpAttributes attrs;
  attrs.scatter.inserted_window_dims = {0};
  attrs.scatter.scatter_dims_to_operand_dims = {0};
  attrs.scatter.index_vector_dim = 1;
  attrs.scatter_overwrite = true;
  EXPECT_EQ(RunOne(Opcode::kScatter, {x, idx, updates}, attrs),
            Literal::FromVector<float>({3}, {2, 9, 3}));
  attrs.scatter_overwrite = false;
  attrs.reduce_kind = ReduceKind::kMaximum;
  EXPECT_EQ(RunOne(Opcode::kScatter, {x, idx, updates}, attrs),
            Literal::FromVector<float>({3}, {9, 9, 9}));
}

TEST(ScatterTest, BatchingDims) {
  Literal x(Shape(DType::kF32, {2, 3}));
  Literal labels = Literal::FromVector<int32_t>({2, 1}, {2, 0});
  Literal g = Literal::FromVector<float>({2}, {5, 7});
  OpAttributes attrs;
  attrs.scatter.inserted_window_dims = {1};
  attrs.scatter.scatter_dims_to_operand_dims = {1};
  attrs.scatter.input_batching_dims = {0};
  attrs.scatter.scatter_indices_batching_dims = {0};
  attrs.scatter.index_vector_dim = 1;
  EXPECT_EQ(RunOne(Opcode::kScatter, {x, labels, g}, attrs),
            Literal::FromVector<float>({2, 3}, {0, 0, 5, 7, 0, 0}));
}

TEST(GatherScatterTest, RandomDimensionNumbersMatchReference) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    DType index_type = trial % 2 == 0 ? DType::kS32 : DType::kS64;
    testing::RandomGather r = testing::MakeRandomGather(rng, 5, DType::kF32, index_type);
    SCOPED_TRACE(trial);
    Literal operand(r.operand);
    for (int64_t i = 0; i < operand.num_elements(); ++i) operand.SetFromDouble(i, i % 13 - 6);
    Literal indices = testing::RandomIndices(rng, r.indices, r.operand);
    OpAttributes gather;
    gather.gather = r.dnums;
    Literal want = testing::ReferenceGather(operand, indices, r.dnums, r.output);
    EXPECT_EQ(RunOne(Opcode::kGather, {operand, indices}, gather, 1 + trial % 3), want)
        << "operand " << r.operand.ToString() << " indices " << r.indices.ToString();
    Literal updates(r.output);
    for (int64_t i = 0; i < updates.num_elements(); ++i) updates.SetFromDouble(i, i % 7 + 1);
    OpAttributes scatter;
    scatter.scatter = GatherAsScatter(r.dnums);
    scatter.scatter_overwrite = trial % 3 == 0;
    Literal want_scatter = testing::ReferenceScatter(operand, indices, updates, scatter.scatter,
                                                     scatter.scatter_overwrite);
    EXPECT_EQ(RunOne(Opcode::kScatter, {operand, indices, updates}, scatter), want_scatter)
        << "operand " << r.operand.ToString() << " indices " << r.indices.ToString();
  }
}

}  // namespace
}  // namespace tessel
