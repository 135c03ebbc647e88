#include "tessel/nn/functional.h"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/nn/testing/tensors.h"

namespace tessel::nn {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

Tensor S32(std::vector<int64_t> dims, std::vector<int32_t> values) {
  return Tensor::FromLiteral(Literal::FromVector<int32_t>(std::move(dims), values));
}

// f64 literal of `dims` with values uniform in [-2, 2) from a fixed seed.
Literal RandomF64(std::vector<int64_t> dims, uint64_t seed) {
  Literal lit(Shape(DType::kF64, std::move(dims)));
  std::mt19937_64 rng(seed);
  for (double& v : lit.data<double>()) {
    v = -2.0 + 4.0 * static_cast<double>(rng() >> 11) * 0x1.0p-53;
  }
  return lit;
}

using ScalarFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Compares Grad(fn(inputs), inputs) with central finite differences (f64, step 1e-6) for every
// element of every input.
void ExpectGradientsMatchFiniteDifferences(const ScalarFn& fn, const std::vector<Literal>& inputs,
                                           double tolerance = 1e-6) {
  auto evaluate = [&](const std::vector<Literal>& values) {
    std::vector<Tensor> tensors;
    for (const Literal& v : values) tensors.push_back(Tensor::FromLiteral(v));
    absl::StatusOr<Literal> out = fn(tensors).ToLiteral();
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->GetAsDouble(0) : NAN;
  };
  std::vector<Tensor> tensors;
  for (const Literal& v : inputs) tensors.push_back(Tensor::FromLiteral(v));
  Tensor loss = fn(tensors);
  ASSERT_TRUE(loss.status().ok()) << loss.status();
  std::vector<Tensor> grads = Grad(loss, tensors);
  constexpr double kStep = 1e-6;
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::vector<double> analytic = Values(grads[k]);
    ASSERT_EQ(static_cast<int64_t>(analytic.size()), inputs[k].num_elements());
    for (int64_t i = 0; i < inputs[k].num_elements(); ++i) {
      std::vector<Literal> plus = inputs, minus = inputs;
      const double x = inputs[k].GetAsDouble(i);
      plus[k].SetFromDouble(i, x + kStep);
      minus[k].SetFromDouble(i, x - kStep);
      const double numeric = (evaluate(plus) - evaluate(minus)) / (2 * kStep);
      EXPECT_NEAR(analytic[i], numeric, tolerance * (1 + std::abs(numeric)))
          << "input " << k << " element " << i;
    }
  }
}

// sum(weights * y): a scalar that depends on every element of y with distinct weights.
Tensor WeightedSum(const Tensor& y, uint64_t seed) {
  Tensor weights = Tensor::Constant(RandomF64(y.shape().dims(), seed));
  std::vector<int64_t> all;
  for (int64_t d = 0; d < y.rank(); ++d) all.push_back(d);
  return ReduceSum(y * weights, all);
}

TEST(ReluTest, ClampsNegativesAndHasZeroGradientAtZero) {
  Tensor x = F32({5}, {-2, -0.5f, 0, 0.5f, 3});
  EXPECT_THAT(Values(Relu(x)), ElementsAre(0, 0, 0, 0.5, 3));
  std::vector<Tensor> grad = Grad(ReduceSum(Relu(x), {0}), {x});
  EXPECT_THAT(Values(grad[0]), ElementsAre(0, 0, 0, 1, 1));
}

TEST(GeluTest, MatchesTanhApproximation) {
  // Reference values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) computed in double.
  Tensor x = F32({7}, {-3, -1, -0.5f, 0, 0.5f, 1, 2});
  EXPECT_THAT(Values(Gelu(x)),
              Pointwise(DoubleNear(1e-6),
                        {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                         0.34571400982514394, 0.8411919906082768, 1.954597694087775}));
}

TEST(GeluTest, GradientMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(
      [](const std::vector<Tensor>& in) { return WeightedSum(Gelu(in[0]), 7); },
      {RandomF64({3, 4}, 1)});
}

TEST(SoftmaxTest, MatchesHandComputation) {
  Tensor x = F32({2, 3}, {1, 2, 3, 0, 0, 0});
  const double denom = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_THAT(Values(Softmax(x)),
              Pointwise(DoubleNear(1e-6), {std::exp(1.0) / denom, std::exp(2.0) / denom,
                                           std::exp(3.0) / denom, 1 / 3.0, 1 / 3.0, 1 / 3.0}));
  // Along dim 0 (columns): each column of [[1,2,3],[0,0,0]] is [e^a, 1] / (e^a + 1).
  std::vector<double> by_column = Values(Softmax(x, 0));
  EXPECT_NEAR(by_column[0], std::exp(1.0) / (std::exp(1.0) + 1), 1e-6);
  EXPECT_NEAR(by_column[5], 1 / (std::exp(3.0) + 1), 1e-6);
}

TEST(SoftmaxTest, StableForLargeLogits) {
  Tensor x = F32({1, 3}, {1000, 1001, -1000});
  const double e = std::exp(1.0);
  EXPECT_THAT(Values(Softmax(x)), Pointwise(DoubleNear(1e-6), {1 / (1 + e), e / (1 + e), 0.0}));
  std::vector<double> log_p = Values(LogSoftmax(x));
  EXPECT_NEAR(log_p[0], -std::log1p(e), 1e-4);
  EXPECT_NEAR(log_p[1], 1 - std::log1p(e), 1e-4);
  EXPECT_NEAR(log_p[2], -2000 - std::log1p(e), 1e-2);  // finite, where log(softmax) is -inf
}

TEST(SoftmaxTest, RejectsBadDim) {
  Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Softmax(x, 2).status().message(), HasSubstr("dim 2 is out of range"));
  EXPECT_THAT(LogSoftmax(x, -3).status().message(), HasSubstr("dim -3 is out of range"));
  EXPECT_FALSE(Softmax(F32({}, {1})).status().ok());
}

TEST(SoftmaxTest, GradientsMatchFiniteDifferences) {
  for (int64_t dim : {0, 1}) {
    ExpectGradientsMatchFiniteDifferences(
        [dim](const std::vector<Tensor>& in) { return WeightedSum(Softmax(in[0], dim), 3); },
        {RandomF64({3, 5}, 2)});
    ExpectGradientsMatchFiniteDifferences(
        [dim](const std::vector<Tensor>& in) { return WeightedSum(LogSoftmax(in[0], dim), 4); },
        {RandomF64({3, 5}, 5)});
  }
}

TEST(SoftmaxTest, GradientWithTiedMaximum) {
  // The max is tied in each row; the reduce-max gradient split must still cancel exactly.
  Literal x = Literal::FromVector<double>({2, 3}, {1, 1, 0.5, -1, 2, 2});
  ExpectGradientsMatchFiniteDifferences(
      [](const std::vector<Tensor>& in) { return WeightedSum(LogSoftmax(in[0]), 8); }, {x});
}

TEST(LayerNormTest, MatchesHandComputation) {
  // x = [1, 2, 4, 9]: mean 4, deviations [-3, -2, 0, 5], biased variance 9.5; eps 0.5 makes
  // the denominator sqrt(10).
  Tensor x = F32({1, 4}, {1, 2, 4, 9});
  Tensor gain = F32({4}, {1, 2, 1, 0.5f});
  Tensor bias = F32({4}, {0, 0, 1, -1});
  const double s = std::sqrt(10.0);
  EXPECT_THAT(Values(LayerNormalize(x, gain, bias, 0.5)),
              Pointwise(DoubleNear(1e-6), {-3 / s, -4 / s, 1.0, 2.5 / s - 1}));
}

TEST(LayerNormTest, RejectsMismatchedGain) {
  Tensor x = F32({2, 4}, std::vector<float>(8, 1));
  Tensor gain = F32({3}, {1, 1, 1});
  Tensor bias = F32({4}, {0, 0, 0, 0});
  EXPECT_THAT(LayerNormalize(x, gain, bias).status().message(), HasSubstr("must both be [4]"));
}

TEST(LayerNormTest, GradientsMatchFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(
      [](const std::vector<Tensor>& in) {
        return WeightedSum(LayerNormalize(in[0], in[1], in[2], 1e-3), 9);
      },
      {RandomF64({3, 5}, 10), RandomF64({5}, 11), RandomF64({5}, 12)});
}

TEST(CrossEntropyTest, MatchesHandComputation) {
  Tensor logits = F32({2, 3}, {1, 2, 3, 1, 1, 1});
  Tensor labels = S32({2}, {2, 0});
  const double log_denom = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double expected = ((log_denom - 3) + std::log(3.0)) / 2;
  EXPECT_THAT(Values(CrossEntropy(logits, labels)), ElementsAre(DoubleNear(expected, 1e-6)));
}

TEST(CrossEntropyTest, OneHotUsesCompareWithIota) {
  Tensor one_hot = OneHot(S32({3}, {2, 0, 5}), 3, DType::kF32);
  EXPECT_THAT(Values(one_hot), ElementsAre(0, 0, 1, 1, 0, 0, 0, 0, 0));  // 5 is out of range
}

TEST(CrossEntropyTest, GradientMatchesFiniteDifferences) {
  Literal labels = Literal::FromVector<int32_t>({4}, {0, 3, 2, 3});
  ExpectGradientsMatchFiniteDifferences(
      [&](const std::vector<Tensor>& in) {
        return CrossEntropy(in[0], Tensor::FromLiteral(labels));
      },
      {RandomF64({4, 5}, 13)});
}

TEST(CrossEntropyTest, GradientIsSoftmaxMinusOneHotOverBatch) {
  Tensor logits = F32({2, 3}, {1, 2, 3, 1, 1, 1});
  Tensor labels = S32({2}, {2, 0});
  std::vector<Tensor> grad = Grad(CrossEntropy(logits, labels), {logits});
  std::vector<double> p = Values(Softmax(logits));
  std::vector<double> expected = {p[0] / 2,       p[1] / 2, (p[2] - 1) / 2,
                                  (p[3] - 1) / 2, p[4] / 2, p[5] / 2};
  EXPECT_THAT(Values(grad[0]), Pointwise(DoubleNear(1e-6), expected));
}

TEST(CrossEntropyTest, RejectsBadShapes) {
  Tensor logits = F32({2, 3}, {1, 2, 3, 1, 1, 1});
  EXPECT_THAT(CrossEntropy(logits, S32({3}, {0, 1, 2})).status().message(),
              HasSubstr("do not match the batch"));
  EXPECT_THAT(CrossEntropy(logits, F32({2}, {0, 1})).status().message(),
              HasSubstr("labels must be integer"));
  EXPECT_THAT(CrossEntropy(F32({6}, {1, 2, 3, 4, 5, 6}), S32({2}, {0, 1})).status().message(),
              HasSubstr("logits must be floating [batch, classes]"));
}

TEST(NumCorrectTest, CountsArgmaxHits) {
  Tensor logits = F32({4, 3}, {1, 5, 2,    // argmax 1
                               3, 0, 0,    // argmax 0
                               0, 0, 9,    // argmax 2
                               4, 4, 0});  // tie between 0 and 1
  EXPECT_THAT(Values(NumCorrect(logits, S32({4}, {1, 2, 2, 1}))), ElementsAre(3));
  EXPECT_THAT(Values(NumCorrect(logits, S32({4}, {0, 0, 0, 2}))), ElementsAre(1));
}

TEST(RotaryTest, TablesAndIdentityAtPositionZero) {
  RotaryTables t = MakeRotaryTables(2, 4, DType::kF64);
  EXPECT_EQ(t.cos.shape().ToString(), "f64[2,4]");
  // Row 0: angle 0. Row 1: angles 1, 0.01 (base^(-2*1/4) = 1/100), repeated in both halves.
  EXPECT_THAT(t.cos.ToDoubles(),
              Pointwise(DoubleNear(1e-15), {1.0, 1.0, 1.0, 1.0, std::cos(1.0), std::cos(0.01),
                                            std::cos(1.0), std::cos(0.01)}));
  EXPECT_THAT(t.sin.ToDoubles(),
              Pointwise(DoubleNear(1e-15), {0.0, 0.0, 0.0, 0.0, std::sin(1.0), std::sin(0.01),
                                            std::sin(1.0), std::sin(0.01)}));
  // x [1, 1, 2, 4]: position 0 unchanged; position 1 rotates the pairs (x_i, x_{i+2}).
  Tensor x = F64({1, 1, 2, 4}, {1, 2, 3, 4, 1, 0, 0, 0});
  std::vector<double> y =
      Values(ApplyRotary(x, Tensor::FromLiteral(t.cos), Tensor::FromLiteral(t.sin)));
  EXPECT_THAT(y, Pointwise(DoubleNear(1e-12),
                           {1.0, 2.0, 3.0, 4.0, std::cos(1.0), 0.0, std::sin(1.0), 0.0}));
  EXPECT_THAT(ApplyRotary(F64({1, 1, 2, 3}, std::vector<double>(6, 0)), Tensor::FromLiteral(t.cos),
                          Tensor::FromLiteral(t.sin))
                  .status()
                  .message(),
              HasSubstr("even Dh"));
}

TEST(SplitHeadsTest, HeadIndexIsTheMajorPartOfTheFeatureDim) {
  // x [1, 2, 4] with 2 heads: head h of position s holds features [2h, 2h + 2).
  Tensor x = F64({1, 2, 4}, {0, 1, 2, 3, 10, 11, 12, 13});
  Tensor heads = SplitHeads(x, 2);
  EXPECT_EQ(heads.shape().ToString(), "f64[1,2,2,2]");
  EXPECT_THAT(Values(heads), ElementsAre(0, 1, 10, 11, 2, 3, 12, 13));
  EXPECT_THAT(SplitHeads(x, 3).status().message(), HasSubstr("3 heads"));
}

TEST(CausalSelfAttentionTest, FirstPositionAttendsToItselfOnly) {
  // One head, Dh 1: position 0 returns v[0]; position 1 a softmax-weighted mix of v[0], v[1].
  Tensor q = F64({1, 1, 2, 1}, {1, 2});
  Tensor k = F64({1, 1, 2, 1}, {3, 4});
  Tensor v = F64({1, 1, 2, 1}, {5, 7});
  std::vector<double> out = Values(CausalSelfAttention(q, k, v));
  ASSERT_EQ(out.size(), 2u);
  const double w0 = std::exp(2 * 3.0), w1 = std::exp(2 * 4.0);
  EXPECT_NEAR(out[0], 5, 1e-12);
  EXPECT_NEAR(out[1], (5 * w0 + 7 * w1) / (w0 + w1), 1e-12);
  EXPECT_THAT(CausalSelfAttention(q, F64({1, 1, 3, 1}, {1, 2, 3}), v).status().message(),
              HasSubstr("causal_self_attention"));
}

}  // namespace
}  // namespace tessel::nn
