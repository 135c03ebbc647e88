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
  c.layers = 2;
  c.d_model = 256;
  c.heads = 8;
  c.kv_heads = 4;
  c.ffn = 768;
  c.vocab = 1024;
  c.seq_len = 128;
  c.batch = 8;
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
  // attention can use), every remat policy of the options, with a pipeline every microbatch
  // count from 1 to the global batch that the stages and a rank's batch allow: the full graph,
  // no extrapolation.
  double best_seconds = 1e30;
  for (const auto& dcn : Factorizations(2, 7)) {
    for (const auto& ici : Factorizations(4, 7)) {
      bool usable = dcn[3] == 1 && dcn[4] == 1 && dcn[5] == 1 && dcn[6] == 1 && ici[3] == 1 &&
                    ici[4] == 1 && ici[6] == 1;
      if (!usable) continue;
      const int64_t stages = ici[1] * dcn[1];
      const int64_t rank_batch = config.batch / (ici[0] * dcn[0] * ici[2] * dcn[2]);
      std::vector<int64_t> microbatches = {0};
      if (stages > 1) {
        microbatches.clear();
        for (int64_t m = 1; m <= config.batch; ++m) {
          if (m % stages == 0 && rank_batch % m == 0) microbatches.push_back(m);
        }
      }
      ModelPlan plan;
      plan.mesh = MaxTextMeshShape(ici, dcn);
      for (RematPolicy remat : options.remat_policies) {
        for (int64_t m : microbatches) {
          plan.remat = remat;
          plan.microbatches = m;
          absl::StatusOr<ModelSimulation> s = SimulateModelPlan(topology, config, plan, {});
          if (!s.ok() || s->report.exceeds_hbm) continue;
          best_seconds = std::min(best_seconds, s->report.step_seconds);
        }
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

// With a stage axis every multiple of the stages that divides a rank's batch is searched (not
// only a few): Megatron-LM's published layouts use e.g. 6 x stages.
TEST(AutoshardTest, SearchesEveryMicrobatchCountOfAPipeline) {
  const Topology topology = TwoSlicesOfFour();
  nn::TransformerConfig config = SmallLlama();
  config.batch = 24;
  AutoshardOptions options;
  options.remat_policies = {RematPolicy::kNone};
  options.axes = {"data", "stage"};
  absl::StatusOr<AutoshardResult> result = Autoshard(topology, config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<int64_t> seen;
  for (const AutoshardCandidate& c : result->candidates) {
    // ici stage=2 x dcn data=2 x ici data=2: a rank's batch is 24 / 4 = 6.
    if (c.ici_axes == std::vector<int64_t>{2, 2, 1, 1, 1, 1, 1} &&
        c.dcn_axes == std::vector<int64_t>{2, 1, 1, 1, 1, 1, 1}) {
      seen.push_back(c.plan.microbatches);
    }
  }
  EXPECT_THAT(seen, ElementsAre(2, 6));
  // Explicit factors restrict the counts.
  options.microbatch_factors = {1};
  result = Autoshard(topology, config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const AutoshardCandidate& c : result->candidates) {
    const int64_t stages = c.ici_axes[1] * c.dcn_axes[1];
    EXPECT_EQ(c.plan.microbatches, stages > 1 ? stages : 0);
  }
}

// AutoshardOptions::axes keeps every other axis at size 1; an unknown name is an error.
TEST(AutoshardTest, AxesRestrictTheMeshes) {
  const Topology topology = TwoSlicesOfFour();
  AutoshardOptions options;
  options.remat_policies = {RematPolicy::kNone};
  options.axes = {"data", "fsdp", "tensor"};
  absl::StatusOr<AutoshardResult> result = Autoshard(topology, SmallLlama(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(result->best, 0);
  EXPECT_GT(result->pruned.at("axis outside the allowed axes (--axes)"), 0);
  for (const AutoshardCandidate& c : result->candidates) {
    for (int a : {1, 3, 4, 6}) {
      EXPECT_EQ(c.ici_axes[a] * c.dcn_axes[a], 1) << kMaxTextAxes[a];
    }
  }
  options.axes = {"data", "pipeline"};
  result = Autoshard(topology, SmallLlama(), options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), ::testing::HasSubstr("\"pipeline\""));
}

// AutoshardOptions::hbm_bytes replaces the device's HBM as the limit: below the best plan's
// memory the best is another plan that fits under it, no faster; above a plan's memory that
// plan fits though the device's HBM is smaller.
TEST(AutoshardTest, MemoryLimitReplacesTheHbm) {
  const Topology topology = TwoSlicesOfFour();
  AutoshardOptions options;
  options.remat_policies = {RematPolicy::kNone, RematPolicy::kFull};
  absl::StatusOr<AutoshardResult> free = Autoshard(topology, SmallLlama(), options);
  ASSERT_TRUE(free.ok() && free->best >= 0);
  const AutoshardCandidate& best = free->candidates[free->best];
  options.hbm_bytes = best.memory.total_bytes() - 1;
  absl::StatusOr<AutoshardResult> tight = Autoshard(topology, SmallLlama(), options);
  ASSERT_TRUE(tight.ok() && tight->best >= 0);
  const AutoshardCandidate& second = tight->candidates[tight->best];
  EXPECT_LE(second.memory.total_bytes(), options.hbm_bytes);
  EXPECT_EQ(second.hbm_bytes, options.hbm_bytes);
  EXPECT_GE(second.step_seconds, best.step_seconds);
  EXPECT_NE(second.order, best.order);

  nn::TransformerConfig big = SmallLlama();
  big.d_model = 8192;
  big.ffn = 32768;
  big.heads = 64;
  big.kv_heads = 8;
  // 16 layers: 15.3 G parameters x 16 bytes over at most 8 devices is 28 GiB a device.
  big.layers = 16;
  options.remat_policies = {RematPolicy::kFull};
  options.hbm_bytes = int64_t{1} << 50;  // 1 PiB per device
  absl::StatusOr<AutoshardResult> roomy = Autoshard(topology, big, options);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  ASSERT_GE(roomy->best, 0);  // none fits in the device's 16 GiB
  EXPECT_GT(roomy->candidates[roomy->best].memory.total_bytes(), topology.device_spec().hbm_bytes);
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
