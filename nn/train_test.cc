#include "tessel/nn/train.h"

#include <cstdlib>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::nn {
namespace {

using ::testing::HasSubstr;

// A separable 3-class problem on 2x2 "images": class c has pixel c bright (around 200) and the
// others dark (around 40), with uniform noise of +-30.
Dataset SeparableDataset(int64_t n, uint64_t seed) {
  Dataset d;
  d.num_examples = n;
  d.rows = 2;
  d.cols = 2;
  d.num_classes = 3;
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % 3);
    for (int k = 0; k < 4; ++k) {
      const int noise = static_cast<int>(rng() % 61) - 30;
      d.pixels.push_back(static_cast<uint8_t>((k == label ? 200 : 40) + noise));
    }
    d.labels.push_back(static_cast<uint8_t>(label));
  }
  return d;
}

struct RunSummary {
  double first_epoch_loss = 0;
  double last_epoch_loss = 0;
  double last_epoch_accuracy = 0;
  int64_t compiles = 0;
  int64_t cache_hits = 0;
  int64_t steps = 0;
};

RunSummary Train(Module& model, Optimizer& optimizer, const Dataset& data, int epochs) {
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(&data, {.batch_size = 16, .shuffle = true, .drop_last = true, .seed = 1});
  EXPECT_TRUE(loader.ok()) << loader.status();
  RunSummary summary;
  ResetLazyMetrics();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader->StartEpoch(epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      absl::StatusOr<StepResult> step = TrainStep(model, optimizer, loader->GetBatch(i));
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) return summary;
      loss_sum += step->loss;
      correct += step->num_correct;
      seen += step->batch_size;
      ++summary.steps;
    }
    const double mean_loss = loss_sum / static_cast<double>(loader->num_batches());
    if (epoch == 0) summary.first_epoch_loss = mean_loss;
    summary.last_epoch_loss = mean_loss;
    summary.last_epoch_accuracy = static_cast<double>(correct) / static_cast<double>(seen);
  }
  summary.compiles = GetLazyMetrics().compiles;
  summary.cache_hits = GetLazyMetrics().cache_hits;
  return summary;
}

TEST(TrainTest, AdamLearnsSeparableProblemAndCompilesTheStepOnce) {
  Dataset data = SeparableDataset(160, 3);
  absl::StatusOr<Mlp> model = Mlp::Create({4, 16, 3}, /*seed=*/0);
  ASSERT_TRUE(model.ok());
  Adam adam({.lr = 0.02});
  RunSummary run = Train(*model, adam, data, 8);
  EXPECT_EQ(run.steps, 80);
  EXPECT_LT(run.last_epoch_loss, 0.5 * run.first_epoch_loss);
  EXPECT_LT(run.last_epoch_loss, 0.1);
  EXPECT_GE(run.last_epoch_accuracy, 0.97);
  // One graph per step, identical every step: compiled once, then cache hits.
  EXPECT_EQ(run.compiles, 1);
  EXPECT_EQ(run.cache_hits, run.steps - 1);
  for (Tensor* p : model->parameters()) EXPECT_TRUE(p->is_data());
  for (const Tensor& m : adam.first_moments()) EXPECT_TRUE(m.is_data());

  // Evaluation: 160 = 3 batches of 50 + one of 10, so two graph shapes.
  absl::StatusOr<DataLoader> eval_loader = DataLoader::Create(&data, {.batch_size = 50});
  ASSERT_TRUE(eval_loader.ok());
  ResetLazyMetrics();
  absl::StatusOr<EvalResult> eval = Evaluate(*model, *eval_loader);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->num_examples, 160);
  EXPECT_GE(eval->accuracy, 0.97);
  EXPECT_LT(eval->loss, 0.1);
  EXPECT_EQ(GetLazyMetrics().compiles, 2);
  EXPECT_EQ(GetLazyMetrics().syncs, 4);
}

TEST(TrainTest, SgdWithMomentumLossDecreases) {
  Dataset data = SeparableDataset(160, 4);
  absl::StatusOr<Mlp> model = Mlp::Create({4, 16, 3}, /*seed=*/1, Activation::kGelu);
  ASSERT_TRUE(model.ok());
  Sgd sgd({.lr = 0.2, .momentum = 0.9});
  RunSummary run = Train(*model, sgd, data, 8);
  EXPECT_LT(run.last_epoch_loss, 0.5 * run.first_epoch_loss);
  EXPECT_GE(run.last_epoch_accuracy, 0.9);
  EXPECT_EQ(run.compiles, 1);
}

TEST(TrainTest, SameSeedSameTrajectory) {
  Dataset data = SeparableDataset(64, 5);
  std::vector<double> losses[2];
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<Mlp> model = Mlp::Create({4, 8, 3}, /*seed=*/9);
    ASSERT_TRUE(model.ok());
    Adam adam({.lr = 0.01});
    absl::StatusOr<DataLoader> loader =
        DataLoader::Create(&data, {.batch_size = 16, .shuffle = true, .drop_last = true});
    ASSERT_TRUE(loader.ok());
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      absl::StatusOr<StepResult> step = TrainStep(*model, adam, loader->GetBatch(i));
      ASSERT_TRUE(step.ok()) << step.status();
      losses[run].push_back(step->loss);
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
}

// Buffer donation (core/tensor.h Sync): each step's new parameters and Adam moments are written
// into the buffers of the old ones, which nothing reads after the step; the trajectory is
// bitwise the one without donation (TESSEL_DONATE_PARAMS=0).
TEST(TrainTest, AdamStepWritesParametersAndMomentsInPlace) {
  Dataset data = SeparableDataset(64, 6);
  std::vector<Literal> finals[2];
  for (int donate = 0; donate < 2; ++donate) {
    if (donate == 0) setenv("TESSEL_DONATE_PARAMS", "0", 1);
    absl::StatusOr<Mlp> model = Mlp::Create({4, 16, 3}, /*seed=*/2);
    ASSERT_TRUE(model.ok());
    Adam adam({.lr = 0.01});
    absl::StatusOr<DataLoader> loader = DataLoader::Create(&data, {.batch_size = 16});
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE(TrainStep(*model, adam, loader->GetBatch(0)).ok());  // makes the moments
    auto buffer = [](const Tensor& t) {
      return dynamic_cast<const LiteralData&>(*t.device_data()).literal().raw_data();
    };
    const std::byte* weight = buffer(*model->parameters()[0]);
    const std::byte* moment = buffer(adam.first_moments()[0]);
    ResetLazyMetrics();
    for (int64_t i = 1; i < loader->num_batches(); ++i) {
      ASSERT_TRUE(TrainStep(*model, adam, loader->GetBatch(i)).ok());
    }
    unsetenv("TESSEL_DONATE_PARAMS");
    const int64_t steps = loader->num_batches() - 1;
    const int64_t params = static_cast<int64_t>(model->parameters().size());
    // p, m and v of every parameter each step (the batch is donated too, but no output has its
    // shape); without donation, none.
    EXPECT_EQ(GetLazyMetrics().donated_in_place, donate * steps * 3 * params);
    if (donate == 1) {  // (without donation the allocator may hand back the same address)
      EXPECT_EQ(buffer(*model->parameters()[0]), weight);
      EXPECT_EQ(buffer(adam.first_moments()[0]), moment);
    }
    for (Tensor* p : model->parameters()) finals[donate].push_back(*p->ToLiteral());
    for (const Tensor& v : adam.second_moments()) finals[donate].push_back(*v.ToLiteral());
  }
  EXPECT_EQ(finals[0], finals[1]);
}

TEST(TrainTest, WrongInputWidthIsAnError) {
  Dataset data = SeparableDataset(16, 6);
  absl::StatusOr<Mlp> model = Mlp::Create({5, 3}, /*seed=*/0);
  ASSERT_TRUE(model.ok());
  Adam adam({});
  absl::StatusOr<DataLoader> loader = DataLoader::Create(&data, {.batch_size = 16});
  ASSERT_TRUE(loader.ok());
  absl::StatusOr<StepResult> step = TrainStep(*model, adam, loader->GetBatch(0));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("in_features=5"));
  EXPECT_EQ(adam.step_count(), 0);
}

}  // namespace
}  // namespace tessel::nn
