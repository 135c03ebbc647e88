#include "tessel/nn/layers.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/nn/functional.h"
#include "tessel/nn/testing/tensors.h"

namespace tessel::nn {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

TEST(LinearTest, ForwardIsMatmulPlusBias) {
  // x [2,3] @ w [3,2] + b [2].
  Linear layer(F32({3, 2}, {1, 0, 0, 1, 1, 1}), F32({2}, {0.5f, -1}));
  Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Values(layer.Forward(x)),
              ElementsAre(1 + 3 + 0.5, 2 + 3 - 1, 4 + 6 + 0.5, 5 + 6 - 1));
  EXPECT_EQ(layer.in_features(), 3);
  EXPECT_EQ(layer.out_features(), 2);
}

TEST(LinearTest, ForwardAcceptsLeadingDims) {
  Linear layer(F32({2, 1}, {1, 1}), F32({1}, {0}));
  Tensor x = F32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor y = layer.Forward(x);
  EXPECT_EQ(y.shape().ToString(), "f32[2,2,1]");
  EXPECT_THAT(Values(y), ElementsAre(3, 7, 11, 15));
}

TEST(LinearTest, RejectsWrongInputWidth) {
  Linear layer(F32({3, 2}, {1, 0, 0, 1, 1, 1}), F32({2}, {0, 0}));
  EXPECT_THAT(layer.Forward(F32({1, 2}, {1, 2})).status().message(),
              HasSubstr("does not end in in_features=3"));
}

TEST(LinearTest, InitIsUniformInPyTorchBoundAndDeterministic) {
  std::mt19937_64 rng_a(42), rng_b(42), rng_c(43);
  Linear a(16, 8, rng_a), b(16, 8, rng_b), c(16, 8, rng_c);
  std::vector<double> wa = Values(a.weight()), wb = Values(b.weight()), wc = Values(c.weight());
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
  EXPECT_EQ(Values(a.bias()), Values(b.bias()));
  const double bound = 1 / std::sqrt(16.0);  // U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  double max_abs = 0, sum = 0;
  for (double w : wa) {
    EXPECT_LE(std::abs(w), bound);
    max_abs = std::max(max_abs, std::abs(w));
    sum += w;
  }
  for (double v : Values(a.bias())) EXPECT_LE(std::abs(v), bound);
  EXPECT_GT(max_abs, 0.8 * bound);       // spread over the range, not all near 0
  EXPECT_LT(std::abs(sum / 128), 0.05);  // mean near 0
  EXPECT_EQ(a.weight().shape().ToString(), "f32[16,8]");
  EXPECT_EQ(a.bias().shape().ToString(), "f32[8]");
}

TEST(LinearTest, UniformDoubleIsPortable) {
  // Pins the conversion from mt19937_64's raw output (the 10000th output of the default seed
  // is fixed by the C++ standard: 9981545732273789042).
  std::mt19937_64 rng;
  rng.discard(9999);
  EXPECT_DOUBLE_EQ(UniformDouble(rng, 0, 1),
                   static_cast<double>(9981545732273789042ULL >> 11) * 0x1.0p-53);
}

TEST(LinearTest, GradientsMatchHandComputation) {
  // f64 weights: loss = sum(c * (x @ w + b)); dw = x^T c, db = sum over rows of c.
  Literal w = Literal::FromVector<double>({3, 2}, {0.1, -0.2, 0.3, 0.4, -0.5, 0.6});
  Literal b = Literal::FromVector<double>({2}, {0.7, -0.8});
  Literal x = Literal::FromVector<double>({2, 3}, {1, 2, 3, -1, 0.5, 2});
  Literal c = Literal::FromVector<double>({2, 2}, {1, 2, -3, 0.5});
  Tensor tw = Tensor::FromLiteral(w), tb = Tensor::FromLiteral(b);
  Linear layer(tw, tb);
  Tensor loss = ReduceSum(layer.Forward(Tensor::FromLiteral(x)) * Tensor::FromLiteral(c), {0, 1});
  std::vector<Tensor> grads = Grad(loss, {tw, tb});
  // dw[i][j] = sum_r x[r][i] c[r][j].
  EXPECT_THAT(Values(grads[0]),
              Pointwise(DoubleNear(1e-12),
                        std::vector<double>{1 * 1 + -1 * -3, 1 * 2 + -1 * 0.5, 2 * 1 + 0.5 * -3,
                                            2 * 2 + 0.5 * 0.5, 3 * 1 + 2 * -3, 3 * 2 + 2 * 0.5}));
  EXPECT_THAT(Values(grads[1]), Pointwise(DoubleNear(1e-12), std::vector<double>{1 - 3, 2 + 0.5}));
}

TEST(LayerNormModuleTest, StartsAsPlainNormalization) {
  LayerNorm norm(4, 0.5);
  EXPECT_THAT(Values(norm.gain()), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(Values(norm.bias()), ElementsAre(0, 0, 0, 0));
  const double s = std::sqrt(10.0);
  EXPECT_THAT(Values(norm.Forward(F32({4}, {1, 2, 4, 9}))),
              Pointwise(DoubleNear(1e-6), {-3 / s, -2 / s, 0.0, 5 / s}));
  EXPECT_EQ(norm.parameters().size(), 2u);
}

TEST(MlpTest, BuildsLayersAndCountsParameters) {
  absl::StatusOr<Mlp> mlp = Mlp::Create({784, 512, 256, 10}, 0);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ASSERT_EQ(mlp->layers().size(), 3u);
  EXPECT_EQ(mlp->num_parameters(), 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  std::vector<Tensor*> params = mlp->parameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0]->shape().ToString(), "f32[784,512]");
  EXPECT_EQ(params[5]->shape().ToString(), "f32[10]");
  Tensor logits = mlp->Forward(Tensor::FromLiteral(Literal(Shape(DType::kF32, {3, 784}))));
  EXPECT_EQ(logits.shape().ToString(), "f32[3,10]");
}

TEST(MlpTest, ForwardIsLinearReluLinear) {
  absl::StatusOr<Mlp> mlp = Mlp::Create({2, 2, 1}, 0);
  ASSERT_TRUE(mlp.ok());
  mlp->layers()[0] = Linear(F32({2, 2}, {1, -1, 1, -1}), F32({2}, {0, 0}));
  mlp->layers()[1] = Linear(F32({2, 1}, {1, 10}), F32({1}, {0.5f}));
  // x = [1, 2]: hidden = relu([3, -3]) = [3, 0]; out = 3 + 0.5.
  EXPECT_THAT(Values(mlp->Forward(F32({1, 2}, {1, 2}))), ElementsAre(3.5));
}

TEST(MlpTest, SameSeedSameParameters) {
  absl::StatusOr<Mlp> a = Mlp::Create({5, 4, 3}, 7), b = Mlp::Create({5, 4, 3}, 7);
  absl::StatusOr<Mlp> c = Mlp::Create({5, 4, 3}, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Values(*a->parameters()[i]), Values(*b->parameters()[i]));
  }
  EXPECT_NE(Values(*a->parameters()[0]), Values(*c->parameters()[0]));
}

TEST(MlpTest, RejectsBadSizes) {
  EXPECT_THAT(Mlp::Create({784}, 0).status().message(), HasSubstr("at least 2 positive"));
  absl::Status status = Mlp::Create({784, 0, 10}, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("[784, 0, 10]"));
}

}  // namespace
}  // namespace tessel::nn
