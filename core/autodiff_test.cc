// Every gradient rule against central finite differences in f64.
#include <cmath>
#include <functional>
#include <random>

#include "gtest/gtest.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/tensor.h"
#include "tessel/core/testing/graphs.h"
#include "tessel/core/window.h"

namespace tessel {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Input {
  std::vector<int64_t> dims;
  double low = -1.0;  // values drawn uniformly from [low, high]
  double high = 1.0;
};

struct GradCase {
  std::string name;
  std::vector<Input> inputs;
  Fn fn;
};

Literal RandomLiteral(const Input& in, std::mt19937_64& gen) {
  Literal lit(Shape(DType::kF64, in.dims));
  std::uniform_real_distribution<double> dist(in.low, in.high);
  for (double& v : lit.data<double>()) v = dist(gen);
  return lit;
}

// loss = sum(fn(inputs) * weights) with fixed random weights, so every output element matters.
double EvalLoss(const GradCase& c, const std::vector<Literal>& values, const Literal& weights) {
  std::vector<Tensor> inputs;
  for (const Literal& v : values) inputs.push_back(Tensor::FromLiteral(v));
  Tensor out = c.fn(inputs);
  Tensor loss = ReduceSum(out * Tensor::FromLiteral(weights), [&] {
    std::vector<int64_t> all;
    for (int64_t d = 0; d < out.rank(); ++d) all.push_back(d);
    return all;
  }());
  absl::StatusOr<Literal> l = loss.ToLiteral();
  EXPECT_TRUE(l.ok()) << c.name << ": " << l.status();
  return l.ok() ? l->data<double>()[0] : NAN;
}

void CheckGradient(const GradCase& c) {
  SCOPED_TRACE(c.name);
  std::mt19937_64 gen(1234);
  std::vector<Literal> values;
  for (const Input& in : c.inputs) values.push_back(RandomLiteral(in, gen));
  std::vector<Tensor> inputs;
  for (const Literal& v : values) inputs.push_back(Tensor::FromLiteral(v));
  Tensor out = c.fn(inputs);
  ASSERT_TRUE(out.status().ok()) << out.status();
  Literal weights = RandomLiteral(Input{out.shape().dims(), -1, 1}, gen);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < out.rank(); ++d) all.push_back(d);
  Tensor loss = ReduceSum(out * Tensor::FromLiteral(weights), all);
  std::vector<Tensor> grads = Grad(loss, inputs);
  ASSERT_EQ(grads.size(), inputs.size());
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<Literal> analytic = grads[i].ToLiteral();
    ASSERT_TRUE(analytic.ok()) << analytic.status();
    ASSERT_EQ(analytic->shape(), values[i].shape());
    for (int64_t j = 0; j < values[i].num_elements(); ++j) {
      std::vector<Literal> plus = values, minus = values;
      plus[i].data<double>()[j] += eps;
      minus[i].data<double>()[j] -= eps;
      double numeric = (EvalLoss(c, plus, weights) - EvalLoss(c, minus, weights)) / (2 * eps);
      double got = analytic->data<double>()[j];
      EXPECT_NEAR(got, numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << "input " << i << " element " << j;
    }
  }
}

Tensor S64(int64_t v) { return Scalar(DType::kS64, static_cast<double>(v)); }

// s32[n,1] row ids for the gather and scatter cases.
Tensor RowIds(std::vector<int32_t> ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  return Tensor::FromLiteral(Literal::FromVector<int32_t>({n, 1}, ids));
}

// One row of a [rows, 3] operand per index: jnp.take(x, ids, axis=0).
GatherDimensionNumbers Rows() {
  GatherDimensionNumbers g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  g.slice_sizes = {1, 3};
  return g;
}

std::vector<GradCase> Cases() {
  using V = std::vector<Tensor>;
  const Input a23{{2, 3}}, pos23{{2, 3}, 0.5, 2.0};
  return {
      {"add", {a23, a23}, [](const V& x) { return x[0] + x[1]; }},
      {"subtract", {a23, a23}, [](const V& x) { return x[0] - x[1]; }},
      {"multiply", {a23, a23}, [](const V& x) { return x[0] * x[1]; }},
      {"divide", {a23, pos23}, [](const V& x) { return x[0] / x[1]; }},
      {"maximum", {a23, a23}, [](const V& x) { return Max(x[0], x[1]); }},
      {"minimum", {a23, a23}, [](const V& x) { return Min(x[0], x[1]); }},
      {"power", {pos23, a23}, [](const V& x) { return Pow(x[0], x[1]); }},
      {"negate", {a23}, [](const V& x) { return -x[0]; }},
      {"abs", {a23}, [](const V& x) { return Abs(x[0]); }},
      {"exponential", {a23}, [](const V& x) { return Exp(x[0]); }},
      {"log", {pos23}, [](const V& x) { return Log(x[0]); }},
      {"tanh", {a23}, [](const V& x) { return Tanh(x[0]); }},
      {"logistic", {a23}, [](const V& x) { return Logistic(x[0]); }},
      {"sqrt", {pos23}, [](const V& x) { return Sqrt(x[0]); }},
      {"rsqrt", {pos23}, [](const V& x) { return Rsqrt(x[0]); }},
      {"sine", {a23}, [](const V& x) { return Sin(x[0]); }},
      {"cosine", {a23}, [](const V& x) { return Cos(x[0]); }},
      // An embedding lookup; id 7 is clamped to row 4, which then gets two contributions.
      {"gather",
       {Input{{5, 3}}},
       [](const V& x) {
         return Gather(x[0], RowIds({4, 0, 7, 2}), Rows());
       }},
      // scatter-add of four rows; id 6 is out of bounds, so its update is skipped and gets no
      // gradient, and row 1 is updated twice.
      {"scatter_add",
       {Input{{5, 3}}, Input{{4, 3}}},
       [](const V& x) {
         return Scatter(x[0], RowIds({1, 6, 1, 4}), x[1], GatherAsScatter(Rows()));
       }},
      {"copy", {a23}, [](const V& x) { return Copy(x[0]); }},
      {"convert_f32_roundtrip",
       {a23},
       [](const V& x) { return Convert(Convert(x[0], DType::kF32), DType::kF64) * 0 + x[0]; }},
      {"select",
       {a23, a23, a23},
       [](const V& x) {
         return Select(Compare(x[0], Zeros(x[0].shape()), ComparisonDirection::kGt), x[1], x[2]);
       }},
      {"clamp_scalar_bounds",
       {{{}, -0.9, -0.8}, a23, {{}, 0.8, 0.9}},
       [](const V& x) { return Clamp(x[0], x[1], x[2]); }},
      {"clamp_array_bounds",
       {{{2, 3}, -0.5, -0.2}, a23, {{2, 3}, 0.2, 0.5}},
       [](const V& x) { return Clamp(x[0], x[1], x[2]); }},
      {"broadcast",
       {{{3}}},
       [](const V& x) {
         return Broadcast(x[0], {2, 3, 4}, {1});
       }},
      {"broadcast_to",
       {{{1, 3}}},
       [](const V& x) {
         return BroadcastTo(x[0], {4, 2, 3});
       }},
      {"reshape",
       {a23},
       [](const V& x) {
         return Reshape(x[0], {3, 2});
       }},
      {"transpose",
       {{{2, 3, 4}}},
       [](const V& x) {
         return Transpose(x[0], {2, 0, 1});
       }},
      {"slice_strided",
       {{{5, 7}}},
       [](const V& x) {
         return Slice(x[0], {1, 0}, {5, 7}, {2, 3});
       }},
      {"pad_interior_negative",
       {{{3, 4}}, {{}}},
       [](const V& x) {
         return Pad(x[0], x[1], {{1, -1, 1}, {-1, 2, 0}});
       }},
      {"concatenate",
       {a23, {{2, 1}}, {{2, 2}}},
       [](const V& x) {
         return Concatenate({x[0], x[1], x[2]}, 1);
       }},
      {"dynamic_slice_clamped",
       {{{5, 4}}},
       [](const V& x) {
         return DynamicSlice(x[0], {S64(4), S64(1)}, {2, 3});
       }},
      {"dynamic_update_slice",
       {{{5, 4}}, a23},
       [](const V& x) {
         return DynamicUpdateSlice(x[0], x[1], {S64(1), S64(1)});
       }},
      {"reduce_sum",
       {{{3, 4, 2}}},
       [](const V& x) {
         return ReduceSum(x[0], {0, 2});
       }},
      {"reduce_max", {{{3, 5}}}, [](const V& x) { return ReduceMax(x[0], {1}); }},
      {"reduce_min", {{{3, 5}}}, [](const V& x) { return ReduceMin(x[0], {0}); }},
      {"reduce_multiply",
       {{{3, 4}, 0.5, 1.5}},
       [](const V& x) { return Reduce(x[0], Scalar(DType::kF64, 1), {1}, ReduceKind::kMultiply); }},
      {"dot_matmul", {{{3, 5}}, {{5, 4}}}, [](const V& x) { return MatMul(x[0], x[1]); }},
      {"dot_transposed_contracting",
       {{{5, 3}}, {{4, 5}}},
       [](const V& x) { return Dot(x[0], x[1], Dn({}, {}, {0}, {1})); }},
      {"dot_batched_two_contracting",
       {{{2, 3, 4, 5}}, {{5, 2, 3, 6}}},
       [](const V& x) {
         return Dot(x[0], x[1], Dn({0}, {1}, {3, 1}, {0, 2}));
       }},
      {"dot_vector",
       {{{7}}, {{7}}},
       [](const V& x) { return Dot(x[0], x[1], Dn({}, {}, {0}, {0})); }},
      {"chain_mlp",
       {{{4, 3}}, {{3, 5}}, {{5}}},
       [](const V& x) {
         Tensor h = MatMul(x[0], x[1]) + BroadcastTo(x[2], {4, 5});
         return Tanh(h) * Logistic(h);
       }},
  };
}

TEST(AutodiffTest, EveryRuleMatchesFiniteDifferences) {
  for (const GradCase& c : Cases()) CheckGradient(c);
}

// Windowed ops: convolutions in several layouts (strided, padded, dilated, grouped), the
// weight-gradient form JAX emits, reduce-window sum (cumsum, strided average pool) and max
// pool, reverse.
std::vector<WindowDim> W(const std::string& text) { return ParseWindow(text).value(); }
ConvolutionDimensionNumbers Labels(const std::string& text) { return ParseDimLabels(text).value(); }

std::vector<GradCase> WindowedCases() {
  using V = std::vector<Tensor>;
  return {
      {"convolution_nhwc_same",
       {Input{{2, 5, 4, 3}}, Input{{3, 3, 3, 2}}},
       [](const V& x) {
         return Convolution(x[0], x[1], W("size=3x3 pad=1_1x1_1"), Labels("b01f_01io->b01f"));
       }},
      {"convolution_strided_dilated",
       {Input{{2, 3, 9}}, Input{{4, 3, 3}}},
       [](const V& x) {
         return Convolution(x[0], x[1], W("size=3 stride=2 pad=2_1 lhs_dilate=2 rhs_dilate=2"),
                            Labels("bf0_oi0->bf0"));
       }},
      {"convolution_feature_groups",
       {Input{{2, 7, 4}}, Input{{3, 2, 6}}},
       [](const V& x) {
         return Convolution(x[0], x[1], W("size=3 stride=2 pad=1_0"), Labels("b0f_0io->b0f"),
                            /*feature_group_count=*/2);
       }},
      {"convolution_batch_groups",
       {Input{{4, 2, 5}}, Input{{6, 2, 2}}},
       [](const V& x) {
         return Convolution(x[0], x[1], W("size=2 pad=0_1"), Labels("bf0_oi0->bf0"), 1,
                            /*batch_group_count=*/2);
       }},
      {"convolution_weight_gradient_layout",
       {Input{{3, 6, 6, 2}}, Input{{3, 3, 3, 4}}},
       [](const V& x) {
         return Convolution(x[0], x[1], W("size=3x3 pad=0_1x0_1 rhs_dilate=2x2"),
                            Labels("f01b_i01o->01bf"));
       }},
      {"reduce_window_cumsum",
       {Input{{2, 6}}},
       [](const V& x) {
         return ReduceWindow(x[0], Scalar(DType::kF64, 0), W("size=1x6 pad=0_0x5_0"),
                             ReduceKind::kAdd);
       }},
      {"reduce_window_sum_strided_dilated",
       {Input{{7, 5}}},
       [](const V& x) {
         return ReduceWindow(x[0], Scalar(DType::kF64, 0),
                             W("size=3x2 stride=2x1 pad=1_2x0_1 lhs_dilate=1x2 rhs_dilate=2x1"),
                             ReduceKind::kAdd);
       }},
      {"reduce_window_max_pool",
       {Input{{2, 5, 5, 2}}},
       [](const V& x) {
         return ReduceWindow(x[0], Scalar(DType::kF64, -INFINITY),
                             W("size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0"),
                             ReduceKind::kMaximum);
       }},
      {"reduce_window_min",
       {Input{{6}}},
       [](const V& x) {
         return ReduceWindow(x[0], Scalar(DType::kF64, INFINITY), W("size=2 stride=2"),
                             ReduceKind::kMinimum);
       }},
      {"reverse",
       {Input{{2, 3}}},
       [](const V& x) {
         return Reverse(x[0], {0, 1}) * x[0];
       }},
  };
}

TEST(AutodiffTest, WindowedOpsMatchFiniteDifferences) {
  for (const GradCase& c : WindowedCases()) CheckGradient(c);
}

TEST(AutodiffTest, ScatterThatOverwritesHasNoGradient) {
  Tensor operand =
      Tensor::FromLiteral(Literal::FromVector<double>({3, 3}, std::vector<double>(9, 1)));
  Tensor updates =
      Tensor::FromLiteral(Literal::FromVector<double>({2, 3}, std::vector<double>(6, 2)));
  Tensor out =
      Scatter(operand, RowIds({0, 2}), updates, GatherAsScatter(Rows()), ReduceKind::kMaximum);
  std::vector<Tensor> g = Grad(ReduceSum(out, {0, 1}), {operand, updates});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[1].status().code(), absl::StatusCode::kUnimplemented) << g[1].status();
  EXPECT_NE(std::string(g[1].status().message()).find("maximum"), std::string::npos)
      << g[1].status();
}

TEST(AutodiffTest, UnrelatedInputGetsZeros) {
  Tensor a = Tensor::FromLiteral(Literal::FromVector<double>({2}, {1, 2}));
  Tensor b = Tensor::FromLiteral(Literal::FromVector<double>({3}, {1, 2, 3}));
  std::vector<Tensor> g = Grad(ReduceSum(a * a, {0}), {a, b});
  EXPECT_EQ(g[0].ToLiteral()->ToDoubles(), (std::vector<double>{2, 4}));
  EXPECT_EQ(g[1].ToLiteral()->ToDoubles(), (std::vector<double>{0, 0, 0}));
}

TEST(AutodiffTest, NonScalarLossIsAnError) {
  Tensor a = Tensor::FromLiteral(Literal::FromVector<double>({2}, {1, 2}));
  std::vector<Tensor> g = Grad(a * a, {a});
  EXPECT_EQ(g[0].status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessel
