// The small ops of Tessel issue 17: xor, shifts, remainder, atan2, erf, is-finite, popcnt, sort
// and topk: executor numerics against hand values and the C++ standard library, shape rules,
// HLO text round trips (JAX's total-order sort comparator included), errors, and autodiff of
// remainder, atan2 and erf against central differences.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/tensor.h"
#include "tessel/core/testing/graphs.h"
#include "tessel/core/testing/run_op.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

TEST(SmallOpsTest, IntegerBitOps) {
  Literal a =
      Literal::FromVector<int32_t>({6}, {-8, 1, 255, std::numeric_limits<int32_t>::min(), 7, -1});
  Literal b = Literal::FromVector<int32_t>({6}, {1, 31, 4, 1, 32, -1});
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kXor, {a, b})[0]),
            (std::vector<int32_t>{-8 ^ 1, 1 ^ 31, 255 ^ 4, std::numeric_limits<int32_t>::min() ^ 1,
                                  7 ^ 32, 0}));
  // Amounts >= 32 (and negative ones, read as unsigned) shift everything out.
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kShiftLeft, {a, b})[0]),
            (std::vector<int32_t>{-16, std::numeric_limits<int32_t>::min(), 4080, 0, 0, 0}));
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kShiftRightLogical, {a, b})[0]),
            (std::vector<int32_t>{0x7FFFFFFC, 0, 15, 0x40000000, 0, 0}));
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kShiftRightArithmetic, {a, b})[0]),
            (std::vector<int32_t>{-4, 0, 15, -1073741824, 0, -1}));
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kPopcnt, {a})[0]),
            (std::vector<int32_t>{29, 1, 8, 1, 3, 32}));
  Literal p = Literal::FromVector<bool>({4}, {true, true, false, false});
  Literal q = Literal::FromVector<bool>({4}, {true, false, true, false});
  EXPECT_EQ(Values<bool>(RunOp(Opcode::kXor, {p, q})[0]),
            (std::vector<bool>{false, true, true, false}));
  Literal u = Literal::FromVector<uint8_t>({3}, {0x81, 0xFF, 3});
  Literal s = Literal::FromVector<uint8_t>({3}, {1, 8, 7});
  EXPECT_EQ(Values<uint8_t>(RunOp(Opcode::kShiftRightArithmetic, {u, s})[0]),
            (std::vector<uint8_t>{0xC0, 0xFF, 0}));
}

TEST(SmallOpsTest, RemainderFollowsTheDividendsSign) {
  Literal a = Literal::FromVector<int32_t>({5}, {7, -7, 7, 5, std::numeric_limits<int32_t>::min()});
  Literal b = Literal::FromVector<int32_t>({5}, {3, 3, -3, 0, -1});
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kRemainder, {a, b})[0]),
            (std::vector<int32_t>{1, -1, 1, 5, 0}));
  Literal x = Literal::FromVector<float>({4}, {5.5f, -5.5f, 1.0f, 3.0f});
  Literal y =
      Literal::FromVector<float>({4}, {2.0f, 2.0f, 0.0f, -std::numeric_limits<float>::infinity()});
  std::vector<float> got = Values<float>(RunOp(Opcode::kRemainder, {x, y})[0]);
  EXPECT_EQ(got[0], std::fmod(5.5f, 2.0f));
  EXPECT_EQ(got[1], std::fmod(-5.5f, 2.0f));
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_EQ(got[3], 3.0f);
}

TEST(SmallOpsTest, TranscendentalsMatchTheStandardLibrary) {
  const std::vector<double> ys = {1, -1, 0, -0.0, 3, -2};
  const std::vector<double> xs = {1, -1, -1, -1, 0, 5};
  Literal y = Literal::FromVector<double>({6}, ys);
  Literal x = Literal::FromVector<double>({6}, xs);
  std::vector<double> atan2 = Values<double>(RunOp(Opcode::kAtan2, {y, x})[0]);
  std::vector<double> erf = Values<double>(RunOp(Opcode::kErf, {y})[0]);
  for (size_t i = 0; i < ys.size(); ++i) {
    EXPECT_EQ(atan2[i], std::atan2(ys[i], xs[i])) << i;
    EXPECT_EQ(erf[i], std::erf(ys[i])) << i;
  }
  Literal f = Literal::FromVector<float>(
      {4}, {1.0f, std::numeric_limits<float>::infinity(), std::nanf(""), -3e38f});
  EXPECT_EQ(Values<bool>(RunOp(Opcode::kIsFinite, {f})[0]),
            (std::vector<bool>{true, false, false, true}));
}

TEST(SmallOpsTest, SortIsStableNanLastAndPermutesEveryOperand) {
  const float nan = std::nanf("");
  // Two rows along dim 1; -0 and +0 are equal keys (stable: their order is kept).
  Literal keys = Literal::FromVector<float>({2, 4}, {3, nan, -0.0f, 0.0f, 2, 2, -1, 5});
  Literal ids = Literal::FromVector<int32_t>({2, 4}, {0, 1, 2, 3, 0, 1, 2, 3});
  OpAttributes attrs;
  attrs.dimensions = {1};
  std::vector<Literal> up = RunOp(Opcode::kSort, {keys, ids}, attrs);
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(Values<int32_t>(up[1]), (std::vector<int32_t>{2, 3, 0, 1, 2, 0, 1, 3}));
  std::vector<float> sorted = Values<float>(up[0]);
  EXPECT_EQ(sorted[2], 3.0f);
  EXPECT_TRUE(std::isnan(sorted[3]));
  attrs.sort_descending = true;
  std::vector<Literal> down = RunOp(Opcode::kSort, {keys, ids}, attrs);
  EXPECT_EQ(Values<int32_t>(down[1]), (std::vector<int32_t>{1, 0, 2, 3, 3, 0, 1, 2}));
  // Along dim 0 (strided rows), one operand: an array result.
  OpAttributes dim0;
  dim0.dimensions = {0};
  Literal m = Literal::FromVector<int32_t>({3, 2}, {5, 0, 1, 9, 3, 4});
  EXPECT_EQ(Values<int32_t>(RunOp(Opcode::kSort, {m}, dim0)[0]),
            (std::vector<int32_t>{1, 0, 3, 4, 5, 9}));
}

TEST(SmallOpsTest, TopKTakesTheLargestWithLowerIndicesFirst) {
  Literal x = Literal::FromVector<float>({2, 5}, {1, 9, 3, 9, 0, -1, -2, -3, -4, -5});
  OpAttributes attrs;
  attrs.topk_k = 3;
  std::vector<Literal> out = RunOp(Opcode::kTopK, {x}, attrs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Values<float>(out[0]), (std::vector<float>{9, 9, 3, -1, -2, -3}));
  EXPECT_EQ(Values<int32_t>(out[1]), (std::vector<int32_t>{1, 3, 2, 0, 1, 2}));
  attrs.topk_largest = false;
  out = RunOp(Opcode::kTopK, {x}, attrs);
  EXPECT_EQ(Values<int32_t>(out[1]), (std::vector<int32_t>{4, 0, 2, 4, 3, 2}));
}

TEST(SmallOpsTest, ShapeRules) {
  const Shape f32(DType::kF32, {4}), s32(DType::kS32, {4}), pred(DType::kPred, {4});
  auto infer = [](Opcode op, std::vector<const Shape*> shapes, const OpAttributes& attrs = {}) {
    return InferShape(op, shapes, attrs, std::nullopt);
  };
  EXPECT_EQ(*infer(Opcode::kIsFinite, {&f32}), pred);
  EXPECT_FALSE(infer(Opcode::kIsFinite, {&s32}).ok());
  EXPECT_THAT(infer(Opcode::kShiftLeft, {&f32, &f32}).status().message(),
              HasSubstr("shift-left: operands must be integer"));
  EXPECT_FALSE(infer(Opcode::kAtan2, {&s32, &s32}).ok());
  EXPECT_FALSE(infer(Opcode::kErf, {&s32}).ok());
  EXPECT_FALSE(infer(Opcode::kXor, {&f32, &f32}).ok());
  EXPECT_FALSE(infer(Opcode::kPopcnt, {&pred}).ok());
  OpAttributes sort;
  sort.dimensions = {1};
  EXPECT_THAT(infer(Opcode::kSort, {&f32, &s32}, sort).status().message(),
              HasSubstr("dimensions must name one dim"));
  sort.dimensions = {0};
  EXPECT_EQ(*infer(Opcode::kSort, {&f32, &s32}, sort), Shape::Tuple({f32, s32}));
  OpAttributes topk;
  topk.topk_k = 5;
  EXPECT_THAT(infer(Opcode::kTopK, {&f32}, topk).status().message(),
              HasSubstr("k=5 is outside [0, 4]"));
  topk.topk_k = 2;
  EXPECT_EQ(*infer(Opcode::kTopK, {&f32}, topk),
            Shape::Tuple({Shape(DType::kF32, {2}), Shape(DType::kS32, {2})}));
}

// JAX's argsort comparator (from tests/fixtures/jax/sort_sharded.hlo): NaN and -0 canonicalized,
// then LT TOTALORDER on parameter(0) vs parameter(1).
constexpr const char* kJaxSort = R"(HloModule s
region_1.3 {
  sort.12 = s32[] parameter(2)
  sort.13 = s32[] parameter(3)
  sort.10 = f32[] parameter(0)
  ne.6 = pred[] compare(sort.10, sort.10), direction=NE
  constant.6 = f32[] constant(nan)
  constant.7 = f32[] constant(0)
  eq.6 = pred[] compare(sort.10, constant.7), direction=EQ
  select_n.12 = f32[] select(eq.6, constant.7, sort.10)
  select_n.13 = f32[] select(ne.6, constant.6, select_n.12)
  sort.11 = f32[] parameter(1)
  ne.7 = pred[] compare(sort.11, sort.11), direction=NE
  eq.7 = pred[] compare(sort.11, constant.7), direction=EQ
  select_n.14 = f32[] select(eq.7, constant.7, sort.11)
  select_n.15 = f32[] select(ne.7, constant.6, select_n.14)
  ROOT lt_to.3 = pred[] compare(select_n.13, select_n.15), direction=LT, type=TOTALORDER
}
ENTRY e {
  x = f32[4,64] parameter(0)
  i = s32[64] iota(), iota_dimension=0
  b = s32[4,64] broadcast(i), dimensions={1}
  s = (f32[4,64], s32[4,64]) sort(x, b), dimensions={1}, is_stable=true, to_apply=region_1.3
  ROOT t = s32[4,64] get-tuple-element(s), index=1
})";

TEST(SmallOpsTest, ParsesJaxSortAndRoundTrips) {
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(kJaxSort);
  ASSERT_TRUE(g.ok()) << g.status();
  const Node* s = (*g)->FindNode("s");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->attrs().sort_descending);
  EXPECT_TRUE(s->attrs().is_stable);
  const std::string text = PrintHloModule(**g);
  EXPECT_THAT(text, HasSubstr("dimensions={1}, is_stable=true, to_apply=%compare_lt_f32_s32"));
  EXPECT_THAT(text, HasSubstr("compare(%p0, %p1), direction=LT, type=TOTALORDER"));
  absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(PrintHloModule(**again), text);

  // Swapping the compared parameters sorts descending.
  std::string swapped = kJaxSort;
  swapped.replace(swapped.find("compare(select_n.13, select_n.15)"),
                  std::string("compare(select_n.13, select_n.15)").size(),
                  "compare(select_n.15, select_n.13)");
  absl::StatusOr<std::unique_ptr<Graph>> down = ParseHloModule(swapped);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_TRUE((*down)->FindNode("s")->attrs().sort_descending);

  absl::StatusOr<std::unique_ptr<Graph>> topk = ParseHloModule(R"(HloModule t
ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT k = (f32[4,2], s32[4,2]) topk(x), k=2, largest=true
})");
  ASSERT_TRUE(topk.ok()) << topk.status();
  EXPECT_EQ((*topk)->FindNode("k")->attrs().topk_k, 2);
  EXPECT_THAT(PrintHloModule(**topk), HasSubstr("topk(%x), k=2, largest=true"));
  absl::StatusOr<std::unique_ptr<Graph>> ops = ParseHloModule(R"(HloModule o
ENTRY e {
  a = s32[4] parameter(0)
  b = s32[4] parameter(1)
  x = s32[4] xor(a, b)
  l = s32[4] shift-left(x, b)
  r = s32[4] shift-right-logical(l, b)
  q = s32[4] shift-right-arithmetic(r, b)
  m = s32[4] remainder(q, b)
  ROOT p = s32[4] popcnt(m)
})");
  ASSERT_TRUE(ops.ok()) << ops.status();
  absl::StatusOr<std::unique_ptr<Graph>> ops_again = ParseHloModule(PrintHloModule(**ops));
  ASSERT_TRUE(ops_again.ok()) << ops_again.status();
  EXPECT_EQ(PrintHloModule(**ops_again), PrintHloModule(**ops));
}

TEST(SmallOpsTest, UnsupportedComparatorsAreNamed) {
  std::string two_keys = kJaxSort;
  // Comparing parameter(0) with parameter(2): not an order on operand 0 alone.
  two_keys.replace(two_keys.find("sort.11 = f32[] parameter(1)"),
                   std::string("sort.11 = f32[] parameter(1)").size(),
                   "sort.11 = f32[] parameter(2)");
  two_keys.replace(two_keys.find("sort.12 = s32[] parameter(2)"),
                   std::string("sort.12 = s32[] parameter(2)").size(),
                   "sort.12 = s32[] parameter(1)");
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(two_keys);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("sort comparator \"region_1.3\""));
  absl::StatusOr<std::unique_ptr<Graph>> eq = ParseHloModule(R"(HloModule s
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=EQ
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT s = f32[4] sort(x), dimensions={0}, to_apply=cmp
})");
  EXPECT_EQ(eq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(eq.status().message(), HasSubstr("direction \"EQ\""));
}

// d/dx of a scalar function through Grad, against a central difference.
double Derivative(Tensor (*f)(const Tensor&, const Tensor&), int wrt, double a, double b) {
  Tensor ta = Tensor::FromLiteral(Literal::Scalar<double>(a));
  Tensor tb = Tensor::FromLiteral(Literal::Scalar<double>(b));
  std::vector<Tensor> grads = Grad(f(ta, tb), {ta, tb});
  absl::StatusOr<Literal> g = grads[wrt].ToLiteral();
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? g->GetAsDouble(0) : 0;
}

double Numeric(double (*f)(double, double), int wrt, double a, double b) {
  const double h = 1e-6;
  return wrt == 0 ? (f(a + h, b) - f(a - h, b)) / (2 * h) : (f(a, b + h) - f(a, b - h)) / (2 * h);
}

TEST(SmallOpsTest, GradientsOfRemainderAtan2AndErf) {
  for (int wrt : {0, 1}) {
    EXPECT_NEAR(Derivative(Remainder, wrt, 5.3, 1.7),
                Numeric([](double a, double b) { return std::fmod(a, b); }, wrt, 5.3, 1.7), 1e-6);
    EXPECT_NEAR(Derivative(Atan2, wrt, 0.7, -1.3),
                Numeric([](double a, double b) { return std::atan2(a, b); }, wrt, 0.7, -1.3), 1e-6);
  }
  auto erf = [](const Tensor& a, const Tensor&) { return Erf(a); };
  EXPECT_NEAR(Derivative(erf, 0, 0.4, 0),
              Numeric([](double a, double) { return std::erf(a); }, 0, 0.4, 0), 1e-6);
}

}  // namespace
}  // namespace tessel
