#include "tessel/nn/optim.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/nn/testing/tensors.h"

namespace tessel::nn {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

TEST(SgdTest, OneStepWithoutMomentum) {
  Tensor p = F64({3}, {1, 2, 3});
  Sgd sgd({.lr = 0.1});
  ASSERT_TRUE(sgd.Step({&p}, {F64({3}, {10, -20, 0.5})}).ok());
  ASSERT_TRUE(Sync().ok());
  EXPECT_TRUE(p.is_data());
  EXPECT_THAT(Values(p), Pointwise(DoubleNear(1e-12), {0.0, 4.0, 2.95}));
  EXPECT_TRUE(sgd.momentum_buffers().empty());
  EXPECT_EQ(sgd.step_count(), 1);
}

TEST(SgdTest, MomentumAndWeightDecayMatchHandComputation) {
  Tensor p = F64({2}, {1, -2});
  Sgd sgd({.lr = 0.5, .momentum = 0.9, .weight_decay = 0.1});
  // Step 1: g = [1, 1] + 0.1 p = [1.1, 0.8]; buf = g; p = [1 - 0.55, -2 - 0.4] = [0.45, -2.4].
  ASSERT_TRUE(sgd.Step({&p}, {F64({2}, {1, 1})}).ok());
  ASSERT_TRUE(Sync().ok());
  EXPECT_THAT(Values(p), Pointwise(DoubleNear(1e-12), {0.45, -2.4}));
  // Step 2: g = [2, 0] + 0.1 p = [2.045, -0.24]; buf = 0.9 [1.1, 0.8] + g = [3.035, 0.48];
  // p = [0.45 - 1.5175, -2.4 - 0.24].
  ASSERT_TRUE(sgd.Step({&p}, {F64({2}, {2, 0})}).ok());
  ASSERT_TRUE(Sync().ok());
  EXPECT_THAT(Values(p), Pointwise(DoubleNear(1e-12), {0.45 - 1.5175, -2.64}));
  EXPECT_THAT(Values(sgd.momentum_buffers()[0]), Pointwise(DoubleNear(1e-12), {3.035, 0.48}));
}

// Reference Adam (PyTorch formulation) in double for one scalar parameter.
struct AdamReference {
  double p, m = 0, v = 0;
  int t = 0;
  void Step(double g, double lr, double b1, double b2, double eps) {
    ++t;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double m_hat = m / (1 - std::pow(b1, t));
    double v_hat = v / (1 - std::pow(b2, t));
    p -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
};

TEST(AdamTest, FirstStepMovesEachParameterByLr) {
  // With bias correction, step 1 is p -= lr * g / (|g| + eps): about lr * sign(g).
  Tensor p = F64({3}, {1, 2, 3});
  Adam adam({.lr = 0.01});
  ASSERT_TRUE(adam.Step({&p}, {F64({3}, {4, -0.001, 0})}).ok());
  ASSERT_TRUE(Sync().ok());
  EXPECT_THAT(Values(p), Pointwise(DoubleNear(1e-9), {1 - 0.01 * 4 / (4 + 1e-8),
                                                      2 + 0.01 * 0.001 / (0.001 + 1e-8), 3.0}));
}

TEST(AdamTest, ThreeStepsMatchReference) {
  const std::vector<double> init = {0.5, -1.5};
  const std::vector<std::vector<double>> grads = {{0.3, -2}, {-0.1, 1}, {0.7, 0.25}};
  Tensor p = F64({2}, init);
  Adam adam({.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3});
  std::vector<AdamReference> ref = {{init[0]}, {init[1]}};
  for (const std::vector<double>& g : grads) {
    ASSERT_TRUE(adam.Step({&p}, {F64({2}, g)}).ok());
    ASSERT_TRUE(Sync().ok());
    for (int i = 0; i < 2; ++i) ref[i].Step(g[i], 0.1, 0.8, 0.95, 1e-3);
    EXPECT_THAT(Values(p), Pointwise(DoubleNear(1e-12), {ref[0].p, ref[1].p}));
    EXPECT_THAT(Values(adam.first_moments()[0]),
                Pointwise(DoubleNear(1e-12), {ref[0].m, ref[1].m}));
    EXPECT_THAT(Values(adam.second_moments()[0]),
                Pointwise(DoubleNear(1e-12), {ref[0].v, ref[1].v}));
  }
  EXPECT_EQ(adam.step_count(), 3);
}

TEST(AdamTest, SetStateContinuesAnotherOptimizersRun) {
  const std::vector<std::vector<double>> grads = {{0.3, -2}, {-0.1, 1}, {0.7, 0.25}};
  const AdamOptions options{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3};
  Tensor straight = F64({2}, {0.5, -1.5});
  Adam uninterrupted(options);
  for (const auto& g : grads) ASSERT_TRUE(uninterrupted.Step({&straight}, {F64({2}, g)}).ok());
  ASSERT_TRUE(Sync().ok());
  // One step, then the state moves to a fresh optimizer (what a checkpoint resume does).
  Tensor p = F64({2}, {0.5, -1.5});
  Adam first(options);
  ASSERT_TRUE(first.Step({&p}, {F64({2}, grads[0])}).ok());
  ASSERT_TRUE(Sync().ok());
  Adam resumed(options);
  ASSERT_TRUE(resumed.SetState(first.first_moments(), first.second_moments(), 1).ok());
  EXPECT_EQ(resumed.step_count(), 1);
  for (size_t i = 1; i < grads.size(); ++i) {
    ASSERT_TRUE(resumed.Step({&p}, {F64({2}, grads[i])}).ok());
  }
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(Values(p), Values(straight));
  EXPECT_EQ(Values(resumed.second_moments()[0]), Values(uninterrupted.second_moments()[0]));
  // Bad state: moments of different lengths or shapes, a negative count; nothing changes.
  EXPECT_EQ(resumed.SetState({F64({2}, {0, 0})}, {}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(resumed.SetState({F64({2}, {0, 0})}, {F64({3}, {0, 0, 0})}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(resumed.SetState({}, {}, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(resumed.step_count(), 3);
  // A state for another number of parameters is caught by the next Step.
  Adam two(options);
  ASSERT_TRUE(
      two.SetState({F64({2}, {0, 0}), F64({2}, {0, 0})}, {F64({2}, {0, 0}), F64({2}, {0, 0})}, 0)
          .ok());
  EXPECT_EQ(two.Step({&p}, {F64({2}, grads[0])}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(AdamTest, WeightDecayAddsL2Gradient) {
  Tensor p = F64({1}, {2});
  Adam adam({.lr = 0.1, .weight_decay = 0.5});
  AdamReference ref{2};
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(adam.Step({&p}, {F64({1}, {0.25})}).ok());
    ASSERT_TRUE(Sync().ok());
    ref.Step(0.25 + 0.5 * ref.p, 0.1, 0.9, 0.999, 1e-8);
    EXPECT_NEAR(Values(p)[0], ref.p, 1e-12);
  }
}

TEST(AdamTest, GraphIsTheSameEveryStepAndWithNewLr) {
  // The bias corrections change each step and lr changes here; both are data, so after the
  // first step every Sync hits the compilation cache.
  Tensor p = Tensor::FromLiteral(Literal::FromVector<float>({4}, {1, 2, 3, 4}));
  Adam adam({.lr = 0.1});
  ResetLazyMetrics();
  for (int step = 0; step < 5; ++step) {
    if (step == 3) adam.set_lr(0.01);
    Tensor g = Tensor::FromLiteral(Literal::FromVector<float>({4}, {1, -1, 1, -1}));
    ASSERT_TRUE(adam.Step({&p}, {g}).ok());
    ASSERT_TRUE(Sync().ok());
  }
  EXPECT_EQ(GetLazyMetrics().compiles, 1);
  EXPECT_EQ(GetLazyMetrics().cache_hits, 4);
}

// The Adam update of a 1M-parameter model is a handful of passes over memory with loop fusion
// (core/internal/fusion.h), not one per elementwise op: m', v' and p' are one fused loop each
// (m' and v' are outputs and also read by p'). Both runs give the same values.
TEST(AdamTest, UpdateOfOneMillionParametersIsAHandfulOfKernels) {
  const Shape shape(DType::kF32, {1000, 1000});
  Literal p0(shape), g0(shape);
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    p0.data<float>()[i] = std::sin(0.001f * static_cast<float>(i));
    g0.data<float>()[i] = std::cos(0.003f * static_cast<float>(i));
  }
  Tensor p = Tensor::FromLiteral(p0);
  Adam adam({.lr = 1e-3});
  ASSERT_TRUE(adam.Step({&p}, {Tensor::FromLiteral(g0)}).ok());
  absl::StatusOr<TracedGraph> traced =
      TraceGraph({p, adam.first_moments()[0], adam.second_moments()[0]}, "adam_update");
  ASSERT_TRUE(traced.ok()) << traced.status();
  std::vector<Literal> arguments;
  for (const Tensor& argument : traced->parameters) {
    absl::StatusOr<Literal> value = argument.ToLiteral();
    ASSERT_TRUE(value.ok()) << value.status();
    arguments.push_back(*std::move(value));
  }
  ExecutionStats unfused_stats, fused_stats;
  absl::StatusOr<std::vector<Literal>> unfused =
      Executor({.fusion = false}).Run(*traced->graph, arguments, &unfused_stats);
  absl::StatusOr<std::vector<Literal>> fused =
      Executor({.fusion = true}).Run(*traced->graph, arguments, &fused_stats);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_GE(unfused_stats.kernels, 15);  // one per elementwise op and broadcast
  EXPECT_LE(fused_stats.kernels, 4);
  // One loop writing p, m and v (multi-output fusion over the 7 arrays).
  EXPECT_EQ(fused_stats.fusions, 1);
  ASSERT_EQ(fused->size(), 3u);
  for (size_t i = 0; i < fused->size(); ++i) EXPECT_EQ((*fused)[i], (*unfused)[i]) << i;
}

TEST(OptimizerTest, RejectsMismatchedArguments) {
  Tensor p = F64({2}, {1, 2});
  Sgd sgd({.lr = 0.1});
  EXPECT_THAT(sgd.Step({&p}, {}).message(), HasSubstr("1 parameters but 0 gradients"));
  EXPECT_THAT(sgd.Step({&p}, {F64({3}, {1, 2, 3})}).message(),
              HasSubstr("gradient 0 has shape f64[3] but its parameter has f64[2]"));
  Tensor q = Tensor::FromLiteral(Literal::FromVector<int32_t>({2}, {1, 2}));
  EXPECT_THAT(
      sgd.Step({&q}, {Tensor::FromLiteral(Literal::FromVector<int32_t>({2}, {1, 2}))}).message(),
      HasSubstr("only floating parameters"));
  ASSERT_TRUE(sgd.Step({&p}, {F64({2}, {1, 1})}).ok());
  Tensor r = F64({3}, {1, 2, 3});
  EXPECT_THAT(sgd.Step({&r}, {F64({3}, {1, 1, 1})}).message(),
              HasSubstr("had f64[2] at the first step"));
  Tensor error = Tensor::Error(absl::InvalidArgumentError("boom"));
  EXPECT_EQ(sgd.Step({&p}, {error}).message(), "boom");
}

TEST(AdamWTest, DecoupledDecayShrinksBeforeTheAdamUpdate) {
  // AdamW: p = p * (1 - lr * wd), then the Adam step (about lr * sign(g) on step 1).
  // Parameter 1 is masked out of the decay.
  Tensor p = F64({2}, {2, -4});
  Tensor q = F64({1}, {3});
  Adam adamw({.lr = 0.1,
              .weight_decay = 0.5,
              .decoupled_weight_decay = true,
              .decay_mask = {true, false}});
  ASSERT_TRUE(adamw.Step({&p, &q}, {F64({2}, {1, -1}), F64({1}, {2})}).ok());
  ASSERT_TRUE(Sync().ok());
  const double shrink = 1 - 0.1 * 0.5;
  const double step = 0.1 / (1 + 1e-8);  // lr * |g| / (|g| + eps) with bias correction
  EXPECT_THAT(Values(p), Pointwise(DoubleNear(1e-9), {2 * shrink - step, -4 * shrink + step}));
  EXPECT_THAT(Values(q), Pointwise(DoubleNear(1e-9), {3 - 0.1 * 2 / (2 + 1e-8)}));
  // The first moments see the raw gradient (no L2 term).
  EXPECT_THAT(Values(adamw.first_moments()[0]), Pointwise(DoubleNear(1e-12), {0.1, -0.1}));
}

TEST(AdamWTest, DecayMaskOfTheWrongLengthIsAnError) {
  Tensor p = F64({1}, {1});
  Adam adamw({.weight_decay = 0.1, .decoupled_weight_decay = true, .decay_mask = {true, true}});
  absl::Status s = adamw.Step({&p}, {F64({1}, {1})});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("decay_mask has 2 entries for 1 parameters"));
}

TEST(ClipGradNormTest, ScalesOnlyWhenTheGlobalNormExceedsTheLimit) {
  // Global norm of {[3], [4]} is 5.
  ClippedGradients big = ClipGradNorm({F64({1}, {3}), F64({1}, {4})}, 1.0);
  ASSERT_EQ(big.grads.size(), 2u);
  EXPECT_THAT(Values(big.total_norm), Pointwise(DoubleNear(1e-12), {5.0}));
  const double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_THAT(Values(big.grads[0]), Pointwise(DoubleNear(1e-12), {3 * coef}));
  EXPECT_THAT(Values(big.grads[1]), Pointwise(DoubleNear(1e-12), {4 * coef}));
  ClippedGradients small = ClipGradNorm({F64({2}, {0.3, 0.4})}, 1.0);
  EXPECT_THAT(Values(small.grads[0]), Pointwise(DoubleNear(1e-12), {0.3, 0.4}));
}

TEST(ClipGradNormTest, BadArgumentsAreErrors) {
  ClippedGradients none = ClipGradNorm({}, 1.0);
  EXPECT_EQ(none.total_norm.status().code(), absl::StatusCode::kInvalidArgument);
  ClippedGradients zero = ClipGradNorm({F64({1}, {1})}, 0.0);
  EXPECT_THAT(zero.grads[0].status().message(), HasSubstr("max_norm > 0"));
}

TEST(WarmupCosineLrTest, WarmsUpLinearlyThenAnneals) {
  EXPECT_DOUBLE_EQ(WarmupCosineLr(0, 4, 14, 1.0, 0.1), 0.25);
  EXPECT_DOUBLE_EQ(WarmupCosineLr(3, 4, 14, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(WarmupCosineLr(4, 4, 14, 1.0, 0.1), 1.0);     // cosine starts at the peak
  EXPECT_NEAR(WarmupCosineLr(9, 4, 14, 1.0, 0.1), 0.55, 1e-12);  // halfway: the midpoint
  EXPECT_NEAR(WarmupCosineLr(14, 4, 14, 1.0, 0.1), 0.1, 1e-12);
  EXPECT_NEAR(WarmupCosineLr(20, 4, 14, 1.0, 0.1), 0.1, 1e-12);  // past the end: min_lr
  // No warmup and min 0: torch CosineAnnealingLR.
  EXPECT_NEAR(WarmupCosineLr(5, 0, 10, 2.0), 1.0, 1e-12);
}

}  // namespace
}  // namespace tessel::nn
