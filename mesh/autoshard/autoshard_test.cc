#include "tessel/mesh/autoshard/autoshard.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/mesh/sim/model_step.h"
#include "tessel/nn/transformer.h"

namespace tessel::mesh {
namespace {

using ::testing::ElementsAre;

Topology TwoSlicesOfFour() {
  absl::StatusOr<Topology> t = MakeUniformTopology(2, {2, 2, 1}, 1);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

nn::TransformerConfig SmallLlama() {
  nn::TransformerConfig c;
  c.arch = nn::TransformerArch::kLlama;
  c.layers = 4;
  c.d_model = 256;
  c.heads = 8;
  c.kv_heads = 4;
  c.ffn = 768;
  c.vocab = 1024;
  c.seq_len = 128;
  c.batch = 16;
  return c;
}

TEST(AutoshardTest, FactorizationsAreOrderedAndComplete) {
  EXPECT_THAT(Factorizations(4, 2),
              ElementsAre(std::vector<int64_t>{1, 4}, std::vector<int64_t>{2, 2},
                          std::vector<int64_t>{4, 1}));
  // 2^3 over 7 factors: C(3 + 6, 6) = 84.
  EXPECT_EQ(Factorizations(8, 7).size(), 84u);
  EXPECT_EQ(Factorizations(1, 7).size(), 1u);
}

// The optimum of a small space, found by simulating every plan of it here, is the search's.
TEST(AutoshardTest, FindsTheExhaustiveOptimum) {
  const Topology topology = TwoSlicesOfFour();
  const nn::TransformerConfig config = SmallLlama();
  AutoshardOptions options;
  options.remat_policies = {RematPolicy::kNone, RematPolicy::kFull};
  absl::StatusOr<AutoshardResult> result = Autoshard(topology, config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(result->best, 0);
  EXPECT_TRUE(result->complete);
  // 4 = 2^2 devices per slice over 7 axes: C(2 + 6, 6) = 28; 2 slices over 7 axes: 7.
  EXPECT_EQ(result->meshes_enumerated, 28 * 7);

  // Every mesh over data, stage, fsdp and tensor (the axes a dense model with dot-product
  // attention can use), every remat policy of the options, microbatches = stages: the full
  // graph, no extrapolation.
  double best_seconds = 1e30;
  for (const auto& dcn : Factorizations(2, 7)) {
    for (const auto& ici : Factorizations(4, 7)) {
      bool usable = dcn[3] == 1 && dcn[4] == 1 && dcn[5] == 1 && dcn[6] == 1 && ici[3] == 1 &&
                    ici[4] == 1 && ici[6] == 1;
      if (!usable) continue;
      ModelPlan plan;
      plan.mesh = MaxTextMeshShape(ici, dcn);
      for (RematPolicy remat : options.remat_policies) {
        plan.remat = remat;
        absl::StatusOr<ModelSimulation> s = SimulateModelPlan(topology, config, plan, {});
        if (!s.ok() || s->report.exceeds_hbm) continue;
        best_seconds = std::min(best_seconds, s->report.step_seconds);
      }
    }
  }
  const AutoshardCandidate& best = result->candidates[result->best];
  EXPECT_NEAR(best.step_seconds, best_seconds, 1e-9 * best_seconds);
  // The ranking is sorted and starts with the best.
  ASSERT_FALSE(result->ranking.empty());
  EXPECT_EQ(result->ranking[0], result->best);
  for (size_t i = 1; i < result->ranking.size(); ++i) {
    EXPECT_LE(result->candidates[result->ranking[i - 1]].step_seconds,
              result->candidates[result->ranking[i]].step_seconds);
  }
  EXPECT_EQ(
      result->meshes_enumerated, result->meshes_simulated + result->meshes_failed + [&] {
        int64_t n = 0;
        for (const auto& [reason, count] : result->pruned) n += count;
        return n;
      }());
}

// The same result on one thread and on four (the slots are read in enumeration order).
TEST(AutoshardTest, DeterministicAcrossThreadCounts) {
  const Topology topology = TwoSlicesOfFour();
  AutoshardOptions options;
  options.remat_policies = {RematPolicy::kNone, RematPolicy::kFull};
  options.threads = 1;
  absl::StatusOr<AutoshardResult> a = Autoshard(topology, SmallLlama(), options);
  options.threads = 4;
  absl::StatusOr<AutoshardResult> b = Autoshard(topology, SmallLlama(), options);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->candidates.size(), b->candidates.size());
  EXPECT_EQ(a->best, b->best);
  EXPECT_EQ(a->ranking, b->ranking);
  for (size_t i = 0; i < a->candidates.size(); ++i) {
    EXPECT_EQ(a->candidates[i].step_seconds, b->candidates[i].step_seconds);
    EXPECT_EQ(a->candidates[i].memory.total_bytes(), b->candidates[i].memory.total_bytes());
    EXPECT_EQ(a->candidates[i].ici_axes, b->candidates[i].ici_axes);
  }
}

// A model that fits in no plan: best = -1, and the memory lower bound says why.
TEST(AutoshardTest, NothingFits) {
  const Topology topology = TwoSlicesOfFour();  // 16 GiB per device
  nn::TransformerConfig config = SmallLlama();
  config.d_model = 8192;
  config.ffn = 32768;
  config.heads = 64;
  config.kv_heads = 8;
  config.layers = 64;
  AutoshardOptions options;
  options.remat_policies = {RematPolicy::kFull};
  absl::StatusOr<AutoshardResult> result = Autoshard(topology, config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->best, -1);
  EXPECT_TRUE(result->ranking.empty());
  // 51 G parameters x 16 bytes over at most 8 devices: the lower bound prunes every mesh.
  EXPECT_GT(result->state_bytes_lower_bound, 32.0 * (int64_t{1} << 30));
  EXPECT_GT(
      result->pruned.at("parameters, gradients and Adam moments alone exceed HBM (a lower bound)"),
      0);
  for (const AutoshardCandidate& c : result->candidates) EXPECT_FALSE(c.fits);
}

TEST(AutoshardTest, ParameterClassSpecsNameTheShardingAxes) {
  const Topology topology = TwoSlicesOfFour();
  ModelPlan plan;
  plan.mesh = MaxTextMeshShape({1, 1, 2, 1, 1, 2, 1}, {2, 1, 1, 1, 1, 1, 1});
  absl::StatusOr<std::vector<ParameterClassSpec>> specs =
      ParameterClassSpecs(topology, SmallLlama(), plan);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_GE(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].parameter_class, "column");
  EXPECT_EQ((*specs)[0].spec.ToString(), "fsdp,tensor");
  EXPECT_EQ((*specs)[1].spec.ToString(), "tensor,fsdp");
  // Without a tensor axis the Megatron dims stay whole.
  plan.mesh = MaxTextMeshShape({1, 1, 4, 1, 1, 1, 1}, {2, 1, 1, 1, 1, 1, 1});
  specs = ParameterClassSpecs(topology, SmallLlama(), plan);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].spec.ToString(), "fsdp,None");
}

}  // namespace
}  // namespace tessel::mesh
