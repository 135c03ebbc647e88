#include "tessel/core/graph.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/shape_inference.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }

TEST(GraphTest, BuildsDotWithInferredShape) {
  Graph g("mlp");
  Node* x = g.AddParameter(0, F32({8, 784}), "x").value();
  Node* w = g.AddParameter(1, F32({784, 512}), "w").value();
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  Node* y = g.AddNode(Opcode::kDot, {x, w}, dot).value();
  EXPECT_EQ(y->shape(), F32({8, 512}));
  EXPECT_EQ(g.root(), y);
  EXPECT_EQ(x->users(), std::vector<Node*>{y});
  EXPECT_EQ(g.parameters(), (std::vector<Node*>{x, w}));
  EXPECT_EQ(g.FindNode("w"), w);
}

TEST(GraphTest, NamesAreUnique) {
  Graph g;
  Node* a = g.AddParameter(0, F32({2}), "a").value();
  Node* b = g.AddNode(Opcode::kAdd, {a, a}, {}, "a").value();
  EXPECT_NE(a->name(), b->name());
  EXPECT_FALSE(g.AddParameter(0, F32({2})).ok());
}

TEST(ShapeInferenceTest, DotErrorsNameDims) {
  Shape l = F32({8, 16}), r = F32({8, 4});
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  auto s = InferShape(Opcode::kDot, {&l, &r}, dot, std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(),
              HasSubstr("lhs contracting dim 1 has size 16 but rhs contracting dim 0 has size 8"));
}

TEST(ShapeInferenceTest, BatchedDotOrder) {
  Shape l = F32({2, 3, 5, 7}), r = F32({2, 7, 3, 11});
  OpAttributes dot;
  dot.dot.lhs_batch_dims = {0, 1};
  dot.dot.rhs_batch_dims = {0, 2};
  dot.dot.lhs_contracting_dims = {3};
  dot.dot.rhs_contracting_dims = {1};
  EXPECT_EQ(InferShape(Opcode::kDot, {&l, &r}, dot, std::nullopt).value(), F32({2, 3, 5, 11}));
}

TEST(ShapeInferenceTest, ElementwiseMismatch) {
  Shape a = F32({8}), b = F32({9});
  auto s = InferShape(Opcode::kAdd, {&a, &b}, {}, std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("add: operand shapes differ: f32[8] vs f32[9]"));
  EXPECT_EQ(InferShape(Opcode::kCompare, {&a, &a}, {}, std::nullopt)->dtype(), DType::kPred);
}

TEST(ShapeInferenceTest, DataMovementRules) {
  Shape x = F32({4, 6});
  OpAttributes t;
  t.dimensions = {1, 0};
  EXPECT_EQ(InferShape(Opcode::kTranspose, {&x}, t, std::nullopt).value(), F32({6, 4}));
  t.dimensions = {0, 0};
  EXPECT_FALSE(InferShape(Opcode::kTranspose, {&x}, t, std::nullopt).ok());

  OpAttributes sl;
  sl.slice = {{1, 4, 2}, {0, 6, 1}};
  EXPECT_EQ(InferShape(Opcode::kSlice, {&x}, sl, std::nullopt).value(), F32({2, 6}));
  sl.slice = {{1, 7, 1}, {0, 6, 1}};
  EXPECT_FALSE(InferShape(Opcode::kSlice, {&x}, sl, std::nullopt).ok());

  Shape zero = F32({});
  OpAttributes pad;
  pad.padding = {{1, -1, 1}, {0, 2, 0}};
  EXPECT_EQ(InferShape(Opcode::kPad, {&x, &zero}, pad, std::nullopt).value(), F32({7, 8}));

  OpAttributes red;
  red.dimensions = {1};
  EXPECT_EQ(InferShape(Opcode::kReduce, {&x, &zero}, red, std::nullopt).value(), F32({4}));

  OpAttributes bc;
  bc.dimensions = {1};
  Shape v = F32({6});
  EXPECT_TRUE(InferShape(Opcode::kBroadcast, {&v}, bc, F32({3, 6})).ok());
  EXPECT_FALSE(InferShape(Opcode::kBroadcast, {&v}, bc, F32({6, 3})).ok());
  EXPECT_FALSE(InferShape(Opcode::kReshape, {&x}, {}, F32({5, 5})).ok());

  OpAttributes cat;
  cat.dimensions = {0};
  Shape y = F32({3, 6});
  EXPECT_EQ(InferShape(Opcode::kConcatenate, {&x, &y}, cat, std::nullopt).value(), F32({7, 6}));

  Shape idx(DType::kS32, {});
  OpAttributes ds;
  ds.dynamic_slice_sizes = {2, 3};
  EXPECT_EQ(InferShape(Opcode::kDynamicSlice, {&x, &idx, &idx}, ds, std::nullopt).value(),
            F32({2, 3}));
  EXPECT_FALSE(InferShape(Opcode::kDynamicSlice, {&x, &idx}, ds, std::nullopt).ok());
}

}  // namespace
}  // namespace tessel
