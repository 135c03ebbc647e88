#include "tessel/mesh/sim/training_step.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/nn/transformer.h"
#include "tessel/spmd/mesh.h"

namespace tessel::mesh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using O = LayerOp;
using V = LayerValue;

TEST(RematPlanTest, EachPolicyRecomputesWhatItDoesNotSave) {
  // The closure by hand (header comment): the backward reads a, q, k, v, context, the attention
  // residual, x1, m, wi, h; mlp_out's output is read by nobody.
  EXPECT_TRUE(PlanRemat(RematPolicy::kNone, false).recomputed.empty());
  EXPECT_THAT(
      PlanRemat(RematPolicy::kNone, false).kept,
      ElementsAre(V::kInput, V::kNormOut, V::kQuery, V::kKey, V::kValue, V::kAttentionResidual,
                  V::kContext, V::kResidual, V::kMlpNormOut, V::kMlpIn, V::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kFull, false).recomputed,
              ElementsAre(O::kNorm1, O::kQkvProj, O::kAttention, O::kOutProj, O::kResidualAdd,
                          O::kNorm2, O::kMlpIn, O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kFull, false).kept, ElementsAre(V::kInput));
  // minimal saves every dot without batch dims; the attention core is recomputed from q, k, v
  // and x1 from x and the saved out_proj. mlpwo is never read, so it is not kept.
  EXPECT_THAT(PlanRemat(RematPolicy::kMinimal, false).recomputed,
              ElementsAre(O::kNorm1, O::kAttention, O::kResidualAdd, O::kNorm2, O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kMinimal, false).kept,
              ElementsAre(V::kInput, V::kQuery, V::kKey, V::kValue, V::kOutProj, V::kMlpIn));
  EXPECT_THAT(PlanRemat(RematPolicy::kMinimalWithContext, false).recomputed,
              ElementsAre(O::kNorm1, O::kAttention, O::kResidualAdd, O::kNorm2, O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kSaveDotWithContextExceptMlp, false).recomputed,
              ElementsAre(O::kNorm1, O::kAttention, O::kResidualAdd, O::kNorm2, O::kMlpIn,
                          O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kSaveDotExceptMlp, false).recomputed,
              ElementsAre(O::kNorm1, O::kAttention, O::kResidualAdd, O::kNorm2, O::kMlpIn,
                          O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kSaveQkvProj, false).recomputed,
              ElementsAre(O::kNorm1, O::kAttention, O::kOutProj, O::kResidualAdd, O::kNorm2,
                          O::kMlpIn, O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kSaveOutProj, false).recomputed,
              ElementsAre(O::kNorm1, O::kQkvProj, O::kAttention, O::kResidualAdd, O::kNorm2,
                          O::kMlpIn, O::kMlpActivation));
  EXPECT_THAT(PlanRemat(RematPolicy::kSelective, false).recomputed, ElementsAre(O::kAttention));
  // PaLM's parallel block has no x1 and no second norm: full remat skips both.
  EXPECT_THAT(PlanRemat(RematPolicy::kFull, true).recomputed,
              ElementsAre(O::kNorm1, O::kQkvProj, O::kAttention, O::kMlpIn, O::kMlpActivation));
}

TEST(RematPlanTest, ReplayRecomputesTheWholeLayerForward) {
  // torch.utils.checkpoint re-runs the layer's forward function: mlp_out too, which JAX's
  // remat drops as dead (its output is read by no backward op).
  EXPECT_THAT(PlanRemat(RematPolicy::kFull, false, true).recomputed,
              ElementsAre(O::kNorm1, O::kQkvProj, O::kAttention, O::kOutProj, O::kResidualAdd,
                          O::kNorm2, O::kMlpIn, O::kMlpActivation, O::kMlpOut));
  EXPECT_THAT(PlanRemat(RematPolicy::kFull, false, true).kept, ElementsAre(V::kInput));
  EXPECT_THAT(PlanRemat(RematPolicy::kFull, true, true).recomputed,
              ElementsAre(O::kNorm1, O::kQkvProj, O::kAttention, O::kOutProj, O::kMlpIn,
                          O::kMlpActivation, O::kMlpOut));
  // Selective checkpoints the attention core alone: replayed, it is the same op.
  EXPECT_THAT(PlanRemat(RematPolicy::kSelective, false, true).recomputed,
              ElementsAre(O::kAttention));
  EXPECT_TRUE(PlanRemat(RematPolicy::kNone, false, true).recomputed.empty());
}

TEST(RematPlanTest, PolicyNamesRoundTripAndUnknownNamesAreErrors) {
  for (const char* name :
       {"none", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp",
        "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj", "save_out_proj",
        "minimal_offloaded", "qkv_proj_offloaded", "selective", "full", "custom"}) {
    absl::StatusOr<RematPolicy> p = ParseRematPolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(RematPolicyName(*p), name);
  }
  absl::StatusOr<RematPolicy> bad = ParseRematPolicy("everything");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown remat policy \"everything\""));
  EXPECT_EQ(ParseAttentionKernel("splash").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseAttentionKernel("flash"), AttentionKernel::kFlash);
}

TEST(AttentionTest, CausalKeysPerQueryCountsTheBand) {
  EXPECT_DOUBLE_EQ(CausalKeysPerQuery(4, 0), 2.5);   // (1 + 2 + 3 + 4) / 4
  EXPECT_DOUBLE_EQ(CausalKeysPerQuery(4, 2), 1.75);  // (1 + 2 + 2 + 2) / 4
  EXPECT_DOUBLE_EQ(CausalKeysPerQuery(4, 4), 2.5);   // a window as long as S is no window
  EXPECT_DOUBLE_EQ(CausalKeysPerQuery(8192, 1), 1);
}

TEST(AttentionTest, BlockCausalKeysPerQueryCountsWholeTiles) {
  // Causal over 512-tiles of 2048: 10 of the 16 tiles computed, 10 x 512^2 / 2048 = (S + B) / 2.
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(2048, 0, 512), 1280);
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 4), 6);  // 3 tiles of 16 / 8
  // Tiles of one element are the element mask; no tiling (0) or one tile computes all S keys.
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 1), CausalKeysPerQuery(8, 0));
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 0), 8);
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 16), 8);
  // 6 positions in tiles of 4: [0,4) x [0,4) 16, [4,6) x [0,4) 8, [4,6) x [4,6) 4.
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(6, 0, 4), 28.0 / 6);
  // Window 2 over 3 tiles of 4: every tile on or next to the diagonal (queries 4.. see key 3,
  // queries 8.. key 7), none two off it (query 8 - key 3 = 5 >= 2): 5 tiles of 16 / 12.
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(12, 2, 4), 80.0 / 12);
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(12, 2, 1), CausalKeysPerQuery(12, 2));
  // Rectangular tiles: rows of 4 queries over key tiles of 8 reach the whole 8 (64 / 8); rows of
  // 2 over tiles of 4: 2x4 + 2x4 + 2x8 + 2x8 = 48 / 8.
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 4, 8), 8.0);
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 2, 4), 6.0);
  EXPECT_DOUBLE_EQ(BlockCausalKeysPerQuery(8, 0, 4, 4), BlockCausalKeysPerQuery(8, 0, 4));
  // Linear in the tiles: one-element tiles of a 128k sequence.
  EXPECT_NEAR(BlockCausalKeysPerQuery(131072, 4096, 1), CausalKeysPerQuery(131072, 4096), 1e-6);
}

TrainingStepOptions Options(RematPolicy remat,
                            AttentionKernel attention = AttentionKernel::kDotProduct) {
  TrainingStepOptions options;
  options.remat = remat;
  options.attention = attention;
  return options;
}

nn::RecipeShards Shards(int64_t batch, int64_t tensor, int64_t fsdp) {
  nn::RecipeShards shards;
  shards.batch = batch;
  shards.tensor = tensor;
  shards.fsdp = shards.fsdp_without_expert = fsdp;
  return shards;
}

// Llama, d_model 16, 4 heads of 4 (2 kv heads), ffn 32, seq 8, batch 4, 2 layers.
nn::TransformerConfig Small() {
  nn::TransformerConfig c;
  c.arch = nn::TransformerArch::kLlama;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 32;
  c.vocab = 24;
  c.seq_len = 8;
  c.batch = 4;
  return c;
}

TEST(TrainingStepTest, LocalFlopsAndRecomputeCountByHand) {
  // Batch over 4 devices (1 sequence = 8 tokens each), heads and ffn over 2 tensor ranks:
  // 2 heads, 1 kv head, ffn 16 per device.
  const LocalLayer l = LocalLayerOf(Small(), Shards(4, 2, 2), AttentionKernel::kDotProduct);
  EXPECT_EQ(l.tokens, 8);
  EXPECT_EQ(l.heads, 2);
  EXPECT_EQ(l.kv_heads, 1);
  EXPECT_EQ(l.ffn, 16);
  EXPECT_DOUBLE_EQ(LocalOpFlops(O::kQkvProj, l), 4096);    // 2*8*16*(2+2*1)*4
  EXPECT_DOUBLE_EQ(LocalOpFlops(O::kAttention, l), 2048);  // 4*8*2*8*4 (all 8 keys)
  EXPECT_DOUBLE_EQ(LocalOpFlops(O::kOutProj, l), 2048);    // 2*8*2*4*16
  EXPECT_DOUBLE_EQ(LocalOpFlops(O::kMlpIn, l), 8192);      // 2*8*16*16*2 (gate and up)
  EXPECT_DOUBLE_EQ(LocalOpFlops(O::kMlpOut, l), 4096);     // 2*8*16*16
  EXPECT_DOUBLE_EQ(LocalOpFlops(O::kNorm1, l), 0);
}

TEST(TrainingStepTest, FlashKeepsNoScoresInMemory) {
  const LocalLayer l = LocalLayerOf(Small(), Shards(4, 2, 2), AttentionKernel::kDotProduct);
  // Dense: f32 softmax + bf16 probabilities, 8 tokens x 2 heads x 8 keys x 6 bytes.
  EXPECT_EQ(LocalValueBytes(V::kAttentionResidual, l, AttentionKernel::kDotProduct), 768);
  // Flash: one f32 log-sum-exp per token and head.
  EXPECT_EQ(LocalValueBytes(V::kAttentionResidual, l, AttentionKernel::kFlash), 64);
  EXPECT_EQ(LocalValueBytes(V::kMlpIn, l, AttentionKernel::kFlash), 512);  // 8*16*2 bytes*2
  EXPECT_EQ(LocalValueBytes(V::kInput, l, AttentionKernel::kFlash), 256);  // 8*16*2
}

spmd::Mesh Mesh8() {
  std::vector<int64_t> ids(8);
  for (int64_t i = 0; i < 8; ++i) ids[i] = i;
  return *spmd::Mesh::Create(ids, {2, 2, 2}, {"data", "fsdp", "tensor"});
}

struct Built {
  nn::TransformerStep step;
  partitioner::SpmdProgram program;
};

Built Build(const nn::TransformerConfig& c) {
  Built b;
  b.step = *nn::BuildTransformerStep(c, Mesh8(), nn::ShardingRecipe::kFsdpTp);
  b.program = *partitioner::Partition(*b.step.graph, 8);
  return b;
}

TEST(TrainingStepTest, EstimateOnEightDevicesMatchesTheClosedForms) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  EXPECT_EQ(shards.batch, 4);
  EXPECT_EQ(shards.tensor, 2);
  EXPECT_EQ(shards.fsdp, 2);
  absl::StatusOr<TrainingStepEstimate> full =
      EstimateTrainingStep(c, shards, Options(RematPolicy::kFull), model, b.program,
                           b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(full.ok()) << full.status();
  // 2 layers x (qkv 4096 + attention 2048 + out 2048 + mlp_in 8192).
  EXPECT_DOUBLE_EQ(full->recompute_flops, 32768);
  absl::StatusOr<TrainingStepEstimate> except_mlp =
      EstimateTrainingStep(c, shards, Options(RematPolicy::kSaveDotWithContextExceptMlp), model,
                           b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(except_mlp.ok());
  // The context is saved but not the attention residual, so the attention core runs again, and
  // mlp_in: 2 layers x (2048 + 8192) flops. mlp_in at the bf16 peak (efficiency 1); the dense
  // attention pass is a roofline over q, k, v, context (128 + 64 + 64 + 128 bytes) and the
  // scores written and read twice (4 x 8 tokens x 2 heads x 8 keys x 2 bytes = 1024).
  EXPECT_DOUBLE_EQ(except_mlp->recompute_flops, 20480);
  const double peak = model.MatmulPeakFlopsPerSecond(DType::kBF16);
  const double hbm = topology.device_spec().hbm_bandwidth_gbytes_per_s * 1e9;
  EXPECT_DOUBLE_EQ(except_mlp->recompute_seconds,
                   2 * (8192 / peak + std::max(2048 / peak, 1408 / hbm)));
  // Parameters from the program: every local weight, the same again as gradients, and the two
  // moments; activations 2 layers x the input x (8 tokens x 16 x 2 bytes) under full remat.
  int64_t weights = 0;
  for (int64_t i : b.step.weight_parameters) {
    weights += b.program.program->parameters()[i]->shape().byte_size();
  }
  EXPECT_EQ(full->memory.parameter_bytes, weights);
  EXPECT_EQ(full->memory.gradient_bytes, weights);
  EXPECT_EQ(full->memory.optimizer_bytes, 2 * weights);
  EXPECT_EQ(full->memory.activation_bytes, 2 * 256);
  EXPECT_TRUE(full->fits);
  // Sequence parallelism splits the kept layer input over the 2 tensor ranks: 2 x 128 bytes.
  TrainingStepOptions sp = Options(RematPolicy::kFull);
  sp.sequence_parallel = true;
  absl::StatusOr<TrainingStepEstimate> split = EstimateTrainingStep(
      c, shards, sp, model, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->memory.activation_bytes, 2 * 128);
  EXPECT_EQ(split->recompute_flops, full->recompute_flops);  // memory only
  EXPECT_EQ(full->attention_seconds, 0);  // dot_product: the graph costs attention
}

TEST(RematPlanTest, OffloadedPoliciesKeepTheirOnDeviceTwinsValuesOnTheHost) {
  // minimal_offloaded: minimal's closure, its saved dots on the host; the layer input (the scan
  // carry) stays on device. qkv_proj_offloaded: save_qkv_proj's, q, k, v on the host.
  const RematPlan minimal = PlanRemat(RematPolicy::kMinimal, false);
  const RematPlan offloaded = PlanRemat(RematPolicy::kMinimalOffloaded, false);
  EXPECT_EQ(offloaded.kept, minimal.kept);
  EXPECT_EQ(offloaded.recomputed, minimal.recomputed);
  EXPECT_TRUE(minimal.offloaded.empty());
  EXPECT_THAT(offloaded.offloaded,
              ElementsAre(V::kQuery, V::kKey, V::kValue, V::kOutProj, V::kMlpIn));
  const RematPlan qkv = PlanRemat(RematPolicy::kQkvProjOffloaded, false);
  EXPECT_EQ(qkv.recomputed, PlanRemat(RematPolicy::kSaveQkvProj, false).recomputed);
  EXPECT_THAT(qkv.offloaded, ElementsAre(V::kQuery, V::kKey, V::kValue));
}

TEST(RematPlanTest, CustomPlacesMaxTextNamesOnDeviceOrHost) {
  // MaxText's custom policy names what it keeps; everything else the backward reads is
  // recomputed. The Llama 3.1 8B v6e recipe's lists: the layer input, q, k, v and out offloaded.
  CustomRemat custom;
  ASSERT_TRUE(AddCustomRematNames("decoder_layer_input, out_proj,qkv_proj", "offload",
                                  "--remat-offload", &custom)
                  .ok());
  EXPECT_THAT(custom.offload, ElementsAre(V::kInput, V::kQuery, V::kKey, V::kValue, V::kOutProj));
  const RematPlan plan = PlanRemat(RematPolicy::kCustom, false, false, custom);
  // save_qkv_proj's closure (out_proj's output is read only by the residual add, which the
  // backward of norm2 reaches through x1: recomputed there without running out_proj again).
  const RematPlan qkv = PlanRemat(RematPolicy::kSaveQkvProj, false);
  EXPECT_THAT(plan.recomputed,
              ElementsAre(LayerOp::kNorm1, LayerOp::kAttention, LayerOp::kResidualAdd,
                          LayerOp::kNorm2, LayerOp::kMlpIn, LayerOp::kMlpActivation));
  EXPECT_NE(plan.recomputed, qkv.recomputed);  // out_proj is kept, not recomputed
  EXPECT_THAT(plan.offloaded, ElementsAre(V::kInput, V::kQuery, V::kKey, V::kValue, V::kOutProj));
  // The built-in policies are custom lists too: qkv_proj_offloaded is q, k, v offloaded.
  CustomRemat q;
  ASSERT_TRUE(AddCustomRematNames("query_proj,key_proj,value_proj", "offload", "x", &q).ok());
  const RematPlan as_custom = PlanRemat(RematPolicy::kCustom, false, false, q);
  const RematPlan builtin = PlanRemat(RematPolicy::kQkvProjOffloaded, false);
  EXPECT_EQ(as_custom.kept, builtin.kept);
  EXPECT_EQ(as_custom.recomputed, builtin.recomputed);
  EXPECT_EQ(as_custom.offloaded, builtin.offloaded);
  // Nothing named: only the layer input stays, as full.
  EXPECT_EQ(PlanRemat(RematPolicy::kCustom, false).recomputed,
            PlanRemat(RematPolicy::kFull, false).recomputed);
  // mlpwi_0 and mlpwi_1 together are the MLP input; device names stay in HBM.
  CustomRemat mlp;
  ASSERT_TRUE(AddCustomRematNames("mlpwi_0,mlpwi_1,context", "device", "x", &mlp).ok());
  EXPECT_THAT(mlp.device, ElementsAre(V::kContext, V::kMlpIn));
  EXPECT_TRUE(PlanRemat(RematPolicy::kCustom, false, false, mlp).offloaded.empty());

  auto error = [](std::string_view names, std::string_view where, CustomRemat c = {}) {
    return std::string(AddCustomRematNames(names, where, "--remat-x", &c).message());
  };
  EXPECT_EQ(error("query_proj,bogus", "device"),
            "--remat-x: unknown name \"bogus\"; expected MaxText's decoder_layer_input, "
            "query_proj, key_proj, value_proj, qkv_proj, context, out_proj, mlpwi, mlpwi_0, "
            "mlpwi_1, mlpwo");
  EXPECT_THAT(error("mlpwi_1", "offload"), HasSubstr("mlpwi_1 without mlpwi_0"));
  EXPECT_THAT(error("query_proj,qkv_proj", "device"), HasSubstr("qkv_proj is placed twice"));
  EXPECT_THAT(error("context", "offload", mlp), HasSubstr("context is placed twice"));
  EXPECT_THAT(error("query_proj,,key_proj", "device"), HasSubstr("empty name"));
  EXPECT_THAT(error("context", "host"), HasSubstr("unknown placement \"host\""));
  EXPECT_EQ(CustomRematToString(custom),
            "offload: decoder_layer_input,query_proj,key_proj,value_proj,out_proj");
}

// The topology of MakeUniformTopology(1, {8}, 1, {true}) with a host link of 2 GB/s.
Topology HostLinkedRing() {
  return *ParseTopology(
      "{\"device_spec\": {\"peak_tflops\": {\"bf16\": 1}, \"hbm_bytes\": 17179869184, "
      "\"hbm_bandwidth_gbytes_per_s\": 1000, \"host_bandwidth_gbytes_per_s\": 2}, "
      "\"ici\": {\"kind\": \"torus\", \"bandwidth_gbps\": 400, \"latency_us\": 1}, "
      "\"slices\": [{\"shape\": [8], \"wraparound\": [true], \"hosts\": 1, "
      "\"devices_per_host\": 8}]}",
      "<test>");
}

TEST(TrainingStepTest, HostOffloadMovesTheSavedDotsOffHbmByHand) {
  Topology topology = HostLinkedRing();
  EXPECT_EQ(topology.device_spec().host_bandwidth_gbytes_per_s, 2);
  CostModel model = *CostModel::Create(topology);
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  auto estimate = [&](RematPolicy policy) {
    return EstimateTrainingStep(c, shards, Options(policy), model, b.program,
                                b.step.weight_parameters, b.step.moment_parameters);
  };
  absl::StatusOr<TrainingStepEstimate> minimal = estimate(RematPolicy::kMinimal);
  absl::StatusOr<TrainingStepEstimate> offloaded = estimate(RematPolicy::kMinimalOffloaded);
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  // Per layer and device (8 tokens, 2 heads and 1 kv head of 4, ffn 16, bf16): x 256 bytes
  // stays; q 128 + k 64 + v 64 + out 256 + wi 512 (gate and up) = 1024 go to the host.
  EXPECT_EQ(minimal->memory.activation_bytes, 2 * (256 + 1024));
  EXPECT_EQ(minimal->memory.host_offloaded_bytes, 0);
  EXPECT_EQ(minimal->offload_seconds, 0);
  EXPECT_EQ(offloaded->memory.activation_bytes, 2 * 256);
  EXPECT_EQ(offloaded->memory.host_offloaded_bytes, 2 * 1024);
  // Temporaries: the FSDP-gathered weights of one layer under XLA (2304 / 2 tensor ranks x 2
  // bytes = 2304) + one layer's backward working set: the gradients of the values the backward
  // reads (x 256, a 256, q 128, k 64, v 64, probabilities 768, context 128, x1 256, m 256, wi 512,
  // h 256: 2944), the values minimal recomputes (a, probabilities, context, x1, m, h: 1920) and,
  // offloaded, the layer's 1024 bytes copied back for its backward.
  EXPECT_EQ(minimal->gathered_weight_bytes, 2304);
  EXPECT_EQ(minimal->memory.temporary_bytes, 2304 + 2944 + 1920);
  EXPECT_EQ(offloaded->memory.temporary_bytes, 2304 + 2944 + 1920 + 1024);
  EXPECT_EQ(offloaded->memory.total_bytes(), minimal->memory.total_bytes() - 2048 + 1024);
  // 2048 bytes each way at 2e9 bytes/s; the recompute is minimal's.
  EXPECT_EQ(offloaded->offload_bytes, 2048);
  EXPECT_DOUBLE_EQ(offloaded->offload_seconds, 2048 / 2e9);
  EXPECT_EQ(offloaded->recompute_flops, minimal->recompute_flops);
  absl::StatusOr<TrainingStepEstimate> qkv = estimate(RematPolicy::kQkvProjOffloaded);
  ASSERT_TRUE(qkv.ok());
  EXPECT_EQ(qkv->memory.activation_bytes, 2 * 256);
  EXPECT_EQ(qkv->memory.host_offloaded_bytes, 2 * 256);  // q 128 + k 64 + v 64
  // custom with the layer input offloaded too: nothing of the layer stays in HBM, and x's 256
  // bytes a layer cross the host link with q, k, v.
  TrainingStepOptions custom = Options(RematPolicy::kCustom);
  ASSERT_TRUE(
      AddCustomRematNames("decoder_layer_input,qkv_proj", "offload", "x", &custom.custom_remat)
          .ok());
  absl::StatusOr<TrainingStepEstimate> input_offloaded = EstimateTrainingStep(
      c, shards, custom, model, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(input_offloaded.ok()) << input_offloaded.status();
  EXPECT_EQ(input_offloaded->memory.activation_bytes, 0);
  EXPECT_EQ(input_offloaded->memory.host_offloaded_bytes, 2 * (256 + 256));
  EXPECT_DOUBLE_EQ(input_offloaded->offload_seconds, 2 * 512 / 2e9);
  EXPECT_EQ(input_offloaded->recompute_flops, qkv->recompute_flops);
  // Without a host link in the device spec the policy is refused, naming what is missing.
  CostModel no_link = *CostModel::Create(*MakeUniformTopology(1, {8}, 1, {true}));
  absl::StatusOr<TrainingStepEstimate> refused =
      EstimateTrainingStep(c, shards, Options(RematPolicy::kMinimalOffloaded), no_link, b.program,
                           b.step.weight_parameters, b.step.moment_parameters);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("minimal_offloaded"));
  EXPECT_THAT(refused.status().message(), HasSubstr("host_bandwidth_gbytes_per_s"));
}

TEST(TrainingStepTest, LossLogitsAreOneBufferUnderXlaAndThreeEager) {
  // A vocabulary large enough that the loss, not a layer's backward, sets the temporaries. Per
  // device: 8 tokens x 4096 / 2 tensor ranks logits. XLA fuses the f32 cast, log-softmax and its
  // gradient (one bf16 buffer: 8 x 2048 x 2 bytes; XLA:TPU's compiled peak for Llama 3.1 8B's
  // 128256-word vocabulary agrees, docs/simulator.md); eager keeps the f32 log-softmax and
  // gradient too (x (2 + 8)).
  nn::TransformerConfig c = Small();
  c.vocab = 4096;
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  CostModelOptions eager_options;
  eager_options.fusion = FusionMode::kEager;
  const CostModel xla = *CostModel::Create(HostLinkedRing());
  const CostModel eager = *CostModel::Create(HostLinkedRing(), eager_options);
  auto temporaries_beyond_weights = [&](const CostModel& model) {
    absl::StatusOr<TrainingStepEstimate> e =
        EstimateTrainingStep(c, shards, Options(RematPolicy::kNone), model, b.program,
                             b.step.weight_parameters, b.step.moment_parameters);
    EXPECT_TRUE(e.ok()) << e.status();
    return e->memory.temporary_bytes - e->gathered_weight_bytes;
  };
  EXPECT_EQ(temporaries_beyond_weights(xla), 8 * 2048 * 2);
  EXPECT_EQ(temporaries_beyond_weights(eager), 8 * 2048 * (2 + 8));
}

TEST(TrainingStepTest, GatheredWeightsOneLayerUnderXlaAndTwoEager) {
  // FSDP over 2 ranks, 2 tensor ranks: a layer's 2304 weights are 1152 a tensor rank, 2304
  // bytes in bf16 once gathered. XLA's buffer assignment holds one layer's (its compiled peak,
  // docs/simulator.md "Memory"); eager FSDP the current and the prefetched next layer's.
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  CostModelOptions eager_options;
  eager_options.fusion = FusionMode::kEager;
  auto gathered = [&](const CostModel& model) {
    absl::StatusOr<TrainingStepEstimate> e =
        EstimateTrainingStep(c, shards, Options(RematPolicy::kNone), model, b.program,
                             b.step.weight_parameters, b.step.moment_parameters);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->gathered_weight_bytes : -1;
  };
  EXPECT_EQ(gathered(*CostModel::Create(HostLinkedRing())), 2304);
  EXPECT_EQ(gathered(*CostModel::Create(HostLinkedRing(), eager_options)), 2 * 2304);
}

TEST(TrainingStepTest, HostOffloadExposureInOrderAndOverlapped) {
  TrainingStepEstimate e;
  e.offload_seconds = 1;
  e.recompute_seconds = 0.5;
  // In order both copies wait: 2 s.
  EXPECT_DOUBLE_EQ(HostOffloadExposedSeconds(e, 3.5, false), 2);
  // Overlapped, compute 3.5 s: forward (3.5 - 0.5) / 3 = 1 s hides the 1 s device -> host copy,
  // backward 2.5 s the host -> device one.
  EXPECT_DOUBLE_EQ(HostOffloadExposedSeconds(e, 3.5, true), 0);
  // Compute 2 s: forward 0.5 s leaves 0.5 s of the first copy exposed; backward 1.5 s hides.
  EXPECT_DOUBLE_EQ(HostOffloadExposedSeconds(e, 2, true), 0.5);
  // Apply adds the exposed copies to each schedule's step time after its compute.
  SimulationReport r;
  r.overlap = true;
  r.step_seconds = r.overlapped_seconds = 2;
  r.in_order_seconds = 3;
  r.compute_seconds = 1.5;
  ApplyTrainingStep(e, r);  // compute 2 s with the recompute
  EXPECT_DOUBLE_EQ(r.compute_seconds, 2);
  EXPECT_DOUBLE_EQ(r.overlapped_seconds, 2 + 0.5 + 0.5);
  EXPECT_DOUBLE_EQ(r.step_seconds, 3);
  EXPECT_DOUBLE_EQ(r.in_order_seconds, 3 + 0.5 + 2);
  TrainingStepEstimate none;
  EXPECT_EQ(HostOffloadExposedSeconds(none, 2, false), 0);
}

TEST(TrainingStepTest, ReplayAndAttentionDropoutUnfusedByHand) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModelOptions eager_options;
  eager_options.fusion = FusionMode::kEager;
  CostModel eager = *CostModel::Create(topology, eager_options);
  CostModel xla = *CostModel::Create(topology);
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  TrainingStepOptions options = Options(RematPolicy::kFull);
  options.remat_replay = true;
  options.attention_dropout = 0.1;
  auto estimate = [&](const CostModel& model, const TrainingStepOptions& o) {
    return EstimateTrainingStep(c, shards, o, model, b.program, b.step.weight_parameters,
                                b.step.moment_parameters);
  };
  absl::StatusOr<TrainingStepEstimate> replayed = estimate(eager, options);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  // Full remat's 32768 flops plus mlp_out, 2 layers x 2*8*16*16.
  EXPECT_DOUBLE_EQ(replayed->recompute_flops, 32768 + 2 * 4096);
  // The elementwise kernels through HBM per layer (8 tokens: [t, D] = 256 bytes, wi 512, h 256):
  // norm1 256+256, residual add 3 x 256, norm2 256+256, activation 512+256, the closing
  // residual add 3 x 256 = 3328; 2 layers.
  EXPECT_EQ(replayed->recompute_bytes, 2 * 3328);
  const double peak = eager.MatmulPeakFlopsPerSecond(DType::kBF16);
  const double hbm = topology.device_spec().hbm_bandwidth_gbytes_per_s * 1e9;
  EXPECT_DOUBLE_EQ(replayed->recompute_seconds,
                   2 * (4096 / peak + std::max(2048 / peak, 1408 / hbm) + 2048 / peak +
                        8192 / peak + 4096 / peak) +
                       2 * 3328 / hbm);
  // Dropout over 8 tokens x 2 heads x 8 keys = 128 probabilities: forward reads 2 and writes
  // 2 + a 1-byte mask, backward reads 2 + 1 and writes 2; the recomputed attention runs the
  // forward once more: 3 x 640 bytes per layer.
  EXPECT_EQ(replayed->dropout_bytes, 2 * 3 * 640);
  EXPECT_DOUBLE_EQ(replayed->dropout_seconds, 2 * 3 * 640 / hbm);
  // Without remat the dropout runs forward and backward once each.
  TrainingStepOptions no_remat = options;
  no_remat.remat = RematPolicy::kNone;
  EXPECT_EQ(estimate(eager, no_remat)->dropout_bytes, 2 * 2 * 640);
  // XLA fuses both away: the elementwise recompute and the dropout cost nothing extra.
  absl::StatusOr<TrainingStepEstimate> fused = estimate(xla, options);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(fused->recompute_bytes, 0);
  EXPECT_EQ(fused->dropout_bytes, 0);
  EXPECT_DOUBLE_EQ(fused->recompute_flops, replayed->recompute_flops);
  SimulationReport r;
  r.compute_seconds = r.step_seconds = r.in_order_seconds = r.overlapped_seconds = 1;
  ApplyTrainingStep(*replayed, r);
  EXPECT_DOUBLE_EQ(r.compute_seconds, 1 + replayed->recompute_seconds + replayed->dropout_seconds);
}

TEST(TrainingStepTest, FlashSavesTheScoresAndCostsTheKernel) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  auto estimate = [&](AttentionKernel kernel) {
    return *EstimateTrainingStep(c, shards, Options(RematPolicy::kNone, kernel), model, b.program,
                                 b.step.weight_parameters, b.step.moment_parameters);
  };
  TrainingStepEstimate dense = estimate(AttentionKernel::kDotProduct);
  TrainingStepEstimate flash = estimate(AttentionKernel::kFlash);
  // 2 layers x (768 - 64) bytes of attention residual.
  EXPECT_EQ(dense.memory.activation_bytes - flash.memory.activation_bytes, 2 * (768 - 64));
  // Causal: 4.5 keys per query; forward 4*8*2*4.5*4 = 1152 flops, backward 2.5x, 2 layers.
  EXPECT_DOUBLE_EQ(flash.attention_flops, 2 * 1152 * 3.5);
  EXPECT_GT(flash.attention_seconds, 0);
}

// MakeUniformTopology(1, {8}, 1, {true})'s figures with a `tile` x `tile` matrix unit (0: none)
// and `spec_fields` (more device-spec JSON fields, each after a comma) in its device spec.
Topology TiledRing(int64_t tile, const std::string& spec_fields = "") {
  return *ParseTopology(
      absl::StrCat("{\"device_spec\": {\"peak_tflops\": {\"bf16\": 1}, \"hbm_bytes\": 17179869184, "
                   "\"hbm_bandwidth_gbytes_per_s\": 1000",
                   tile > 0 ? absl::StrCat(", \"matmul_tile\": ", tile) : "", spec_fields,
                   "}, \"ici\": {\"kind\": \"torus\", \"bandwidth_gbps\": 400, \"latency_us\": 1}, "
                   "\"slices\": [{\"shape\": [8], \"wraparound\": [true], \"hosts\": 1, "
                   "\"devices_per_host\": 8}]}"),
      "<test>");
}

TEST(TrainingStepTest, MatrixUnitTilesPadTheAnalyticMatmulsByHand) {
  // Local sizes of Small() over (4, 2, 2): 8 tokens, d 16, 2 heads and 1 kv head of 4, ffn 16,
  // dense attention over all 8 keys.
  const LocalLayer l = LocalLayerOf(Small(), Shards(4, 2, 2), AttentionKernel::kDotProduct);
  EXPECT_EQ(l.attention_kv_tile, 8);
  // A 32 tile: d 16 pads 2x; q (8 wide) 4x, k and v (4 wide) 8x each; head_dim 4 8x, the 8
  // keys 4x, the out projection's 8 inputs 4x.
  EXPECT_DOUBLE_EQ(LocalOpMxuFlops(O::kQkvProj, l, 32), 2 * (2048 * 4 + 2 * 1024 * 8));
  EXPECT_DOUBLE_EQ(LocalOpMxuFlops(O::kAttention, l, 32), 2048 * 8 * 4);
  EXPECT_DOUBLE_EQ(LocalOpMxuFlops(O::kOutProj, l, 32), 2048 * 4 * 2);
  EXPECT_DOUBLE_EQ(LocalOpMxuFlops(O::kMlpIn, l, 32), 8192 * 2 * 2);
  EXPECT_DOUBLE_EQ(LocalOpMxuFlops(O::kMlpOut, l, 32), 4096 * 2 * 2);
  EXPECT_DOUBLE_EQ(LocalOpMxuFlops(O::kNorm1, l, 32), 0);
  // Multiples of the tile, or no tile: the useful flops.
  for (int64_t tile : {0, 4}) {
    for (LayerOp op : {O::kQkvProj, O::kAttention, O::kOutProj, O::kMlpIn, O::kMlpOut}) {
      EXPECT_DOUBLE_EQ(LocalOpMxuFlops(op, l, tile), LocalOpFlops(op, l)) << tile;
    }
  }

  // The flash kernel on an 8 tile (compute-bound here: 1 TFLOP/s against 1000 GB/s): head_dim 4
  // fills half of it, so the per-element kernel takes 2x the seconds for the same flops; with
  // 4 x 4 tiles every matmul also pads its 4-wide query or key tile: 4x.
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  auto estimate = [&](int64_t tile, int64_t block, bool split) {
    CostModel model = *CostModel::Create(TiledRing(tile));
    TrainingStepOptions options = Options(RematPolicy::kFull, AttentionKernel::kFlash);
    options.flash_block = block;
    options.flash_split_backward = split;
    return *EstimateTrainingStep(c, shards, options, model, b.program, b.step.weight_parameters,
                                 b.step.moment_parameters);
  };
  for (bool split : {false, true}) {
    const TrainingStepEstimate plain = estimate(0, 0, split);
    const TrainingStepEstimate ideal = estimate(8, 0, split);
    const TrainingStepEstimate tiled = estimate(8, 4, split);
    EXPECT_DOUBLE_EQ(ideal.attention_flops, plain.attention_flops);
    EXPECT_DOUBLE_EQ(ideal.attention_seconds, 2 * plain.attention_seconds) << split;
    EXPECT_DOUBLE_EQ(tiled.attention_seconds, 4 * estimate(0, 4, split).attention_seconds) << split;
    // Full remat recomputes the forward kernel and the projections (d 16, q 8 wide, the out
    // projection's 8 inputs and ffn 16 are multiples of 8; k and v, 4 wide each, are not).
    EXPECT_DOUBLE_EQ(tiled.recompute_flops, estimate(0, 4, split).recompute_flops);
    // The recomputed forward (6 keys per query over 4 x 4 tiles: 1536 flops a layer) takes 4x
    // its time at 1 TFLOP/s, and k and v (2 x 1024 flops a layer) 2x; 2 layers.
    EXPECT_NEAR(tiled.recompute_seconds - estimate(0, 4, split).recompute_seconds,
                2 * (3 * 1536 + 2 * 1024) / 1e12, 1e-20);
  }
  // A tile longer than the 8-token sequence runs as the sequence: on a 16 tile, 16-wide tiles
  // pad like 8-wide ones.
  for (bool split : {false, true}) {
    EXPECT_DOUBLE_EQ(estimate(16, 16, split).attention_seconds,
                     estimate(16, 8, split).attention_seconds);
    EXPECT_GT(estimate(16, 8, split).attention_seconds, estimate(8, 8, split).attention_seconds);
  }
  EXPECT_DOUBLE_EQ(CostModel::TilePadding(100, 128), 1.28);
  EXPECT_DOUBLE_EQ(CostModel::TilePadding(512, 256), 1.0);
  EXPECT_DOUBLE_EQ(CostModel::TilePadding(0, 128), 1.0);
  EXPECT_DOUBLE_EQ(CostModel::TilePadding(100, 0), 1.0);
}

TEST(TrainingStepTest, FlashKernelRunsAtTheFlashAttentionEfficiency) {
  // TiledRing(0)'s device (1 TFLOP/s, compute-bound here) with a flash_attention factor of 0.25:
  // the kernel's forward and backward, and its recompute under full remat, take 4x the seconds
  // of the factor-less device; the recomputed projections and the dense kernel do not change.
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  auto estimate = [&](const std::string& efficiency, AttentionKernel kernel) {
    CostModel model = *CostModel::Create(TiledRing(0, efficiency));
    return *EstimateTrainingStep(c, shards, Options(RematPolicy::kFull, kernel), model, b.program,
                                 b.step.weight_parameters, b.step.moment_parameters);
  };
  const std::string quarter = ", \"efficiency\": {\"flash_attention\": 0.25}";
  const TrainingStepEstimate plain = estimate("", AttentionKernel::kFlash);
  const TrainingStepEstimate slow = estimate(quarter, AttentionKernel::kFlash);
  EXPECT_DOUBLE_EQ(slow.attention_flops, plain.attention_flops);
  EXPECT_DOUBLE_EQ(slow.attention_seconds, 4 * plain.attention_seconds);
  // Full remat recomputes the forward kernel (4.5 keys per query: 1152 flops a layer, 2 layers)
  // and the projections, which stay at the dot factor (1 here).
  EXPECT_NEAR(slow.recompute_seconds - plain.recompute_seconds, 3 * 2 * 1152 / 1e12, 1e-20);
  const TrainingStepEstimate dense = estimate("", AttentionKernel::kDotProduct);
  const TrainingStepEstimate dense_quarter = estimate(quarter, AttentionKernel::kDotProduct);
  EXPECT_DOUBLE_EQ(dense_quarter.recompute_seconds, dense.recompute_seconds);
}

TEST(TrainingStepTest, QuantizedMatmulsPassTheirOperandsThroughHbmByHand) {
  // Small() over Mesh8 (fsdp_tp): 8 tokens, d 16, q 8 wide, k and v 4 wide, ffn 16 gated (32).
  // Elements (X, W, Y) per matmul: qkv (128, 256, 128), out (64, 128, 128), mlp_in
  // (128, 512, 256), mlp_out (128, 256, 128). Without remat each is quantized as
  // 2 (X + W) + 2 Y: 1024 + 640 + 1792 + 1024 = 4480 elements a layer; full remat runs qkv,
  // out and mlp_in forward again: + 384 + 192 + 640.
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  const Topology topology = *ParseTopology(
      "{\"device_spec\": {\"peak_tflops\": {\"bf16\": 1, \"s8\": 2, \"f8e4m3fn\": 2}, "
      "\"hbm_bytes\": 17179869184, \"hbm_bandwidth_gbytes_per_s\": 1000, \"efficiency\": "
      "{\"elementwise\": 0.5}}, \"ici\": {\"kind\": \"torus\", \"bandwidth_gbps\": 400, "
      "\"latency_us\": 1}, \"slices\": [{\"shape\": [8], \"wraparound\": [true], \"hosts\": 1, "
      "\"devices_per_host\": 8}]}",
      "<test>");
  auto estimate = [&](const std::string& dtype, RematPolicy remat,
                      AttentionKernel attention = AttentionKernel::kDotProduct) {
    CostModelOptions cost;
    cost.matmul_dtype = dtype;
    CostModel model = *CostModel::Create(topology, cost);
    return *EstimateTrainingStep(c, shards, Options(remat, attention), model, b.program,
                                 b.step.weight_parameters, b.step.moment_parameters);
  };
  // bf16: nothing to quantize.
  EXPECT_EQ(estimate("", RematPolicy::kNone).quantize_bytes, 0);
  EXPECT_EQ(estimate("", RematPolicy::kNone).quantize_seconds, 0);
  // int8 (AQT): 2 x 2 + 1 bytes an element (abs-max read, quantize read and int8 write), 2
  // layers, at half of 1000 GB/s.
  const TrainingStepEstimate int8 = estimate("s8", RematPolicy::kNone);
  EXPECT_EQ(int8.quantize_bytes, 2 * 4480 * 5);
  EXPECT_DOUBLE_EQ(int8.quantize_seconds, 2 * 4480 * 5 / 500e9);
  EXPECT_EQ(estimate("s8", RematPolicy::kFull).quantize_bytes, 2 * (4480 + 1216) * 5);
  // fp8 (delayed scaling): one cast, 2 + 1 bytes an element.
  EXPECT_EQ(estimate("f8e4m3fn", RematPolicy::kNone).quantize_bytes, 2 * 4480 * 3);
  // The flash kernel stays at the bf16 peak (1 TFLOP/s, compute-bound here); the recomputed
  // projections run at the int8 peak (2), the recomputed kernel does not.
  const TrainingStepEstimate flash = estimate("", RematPolicy::kFull, AttentionKernel::kFlash);
  const TrainingStepEstimate flash8 = estimate("s8", RematPolicy::kFull, AttentionKernel::kFlash);
  EXPECT_GT(flash.attention_seconds, 0);
  EXPECT_DOUBLE_EQ(flash8.attention_seconds, flash.attention_seconds);
  // Causal flash forward: 4.5 keys per query, 1152 flops a layer, 2 layers.
  const double kernel = 2 * 1152 / 1e12;
  EXPECT_NEAR(flash8.recompute_seconds, kernel + (flash.recompute_seconds - kernel) / 2, 1e-20);
  // ApplyTrainingStep adds it to the step's compute.
  SimulationReport r;
  ApplyTrainingStep(int8, r);
  EXPECT_DOUBLE_EQ(r.compute_seconds, int8.recompute_seconds + int8.quantize_seconds);

  // Microbatches quantize the weights again each: without remat 2 |W| a layer, 2 x (256 + 128 +
  // 512 + 256) = 2304 elements, 2 layers at 5 bytes; 4 microbatches add 3 more of them.
  const int64_t weights = 2 * 2304 * 5;
  EXPECT_EQ(int8.quantize_weight_bytes, weights);
  PipelineOptions accumulation;
  accumulation.microbatches = 4;
  TrainingStepEstimate accumulated = int8;
  const CostModel model = *CostModel::Create(topology);
  ASSERT_TRUE(EstimatePipeline(c, Shards(1, 1, 1), accumulation, model, accumulated).ok());
  EXPECT_EQ(accumulated.quantize_bytes, 2 * 4480 * 5 + 3 * weights);
  EXPECT_DOUBLE_EQ(accumulated.quantize_seconds, (2 * 4480 * 5 + 3 * weights) / 500e9);
  // A pipeline stage runs each of its m microbatches through the same weights: the same.
  PipelineOptions pipeline;
  pipeline.microbatches = 4;
  pipeline.stage_group = {0, 1};
  TrainingStepEstimate staged = int8;
  ASSERT_TRUE(EstimatePipeline(c, Shards(1, 1, 1), pipeline, model, staged).ok());
  EXPECT_EQ(staged.quantize_bytes, accumulated.quantize_bytes);
  // One microbatch: nothing added.
  accumulation.microbatches = 1;
  TrainingStepEstimate one = int8;
  ASSERT_TRUE(EstimatePipeline(c, Shards(1, 1, 1), accumulation, model, one).ok());
  EXPECT_EQ(one.quantize_bytes, int8.quantize_bytes);
}

TEST(TrainingStepTest, FlashBlockTilesAndSplitBackwardByHand) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  const nn::TransformerConfig c = Small();
  Built b = Build(c);
  const nn::RecipeShards shards = *nn::ShardsOf(Mesh8(), nn::ShardingRecipe::kFsdpTp);
  auto estimate = [&](int64_t block, bool split) {
    TrainingStepOptions options = Options(RematPolicy::kNone, AttentionKernel::kFlash);
    options.flash_block = block;
    options.flash_split_backward = split;
    return *EstimateTrainingStep(c, shards, options, model, b.program, b.step.weight_parameters,
                                 b.step.moment_parameters);
  };
  const TrainingStepEstimate ideal = estimate(0, false);
  // Tiles of 4 over 8 positions: 6 keys per query; forward 4*8*2*6*4 = 1536 flops a layer.
  EXPECT_DOUBLE_EQ(estimate(4, false).attention_flops, 2 * 1536 * 3.5);
  // Split backward: 3.5x the forward (7 matmuls against 2), per element 1152 flops forward.
  const TrainingStepEstimate split = estimate(0, true);
  EXPECT_DOUBLE_EQ(split.attention_flops, 2 * 1152 * 4.5);
  EXPECT_DOUBLE_EQ(estimate(4, true).attention_flops, 2 * 1536 * 4.5);
  // The dQ kernel streams q (8 tokens x 2 heads x 4 x 2 bytes = 128), k and v (1 kv head: 64
  // each), dO (128), the log-sum-exp and di (8 x 2 x 4 = 64 each) once more, 2 layers.
  EXPECT_EQ(split.attention_bytes - ideal.attention_bytes, 2 * (128 + 64 + 64 + 128 + 2 * 64));
  // Tiles change the flops, not what the kernel keeps.
  EXPECT_EQ(estimate(4, true).memory.activation_bytes, ideal.memory.activation_bytes);

  // Per-kernel tiles (MaxText sa_block_*): the forward over 8 x 8 (8 keys per query: 2048 flops a
  // layer, 256 per matmul and key), the dK/dV kernel over 4 x 4 (6 keys: 4 matmuls), the dQ
  // kernel over 2 x 8 (rows of 2 queries reach key tile 8: 8 keys, 3 matmuls).
  auto estimate_blocks = [&](const FlashBlocks& blocks, bool split) {
    TrainingStepOptions options = Options(RematPolicy::kNone, AttentionKernel::kFlash);
    options.flash_blocks = blocks;
    options.flash_split_backward = split;
    return *EstimateTrainingStep(c, shards, options, model, b.program, b.step.weight_parameters,
                                 b.step.moment_parameters);
  };
  const FlashBlocks mixed{8, 8, 4, 4, 2, 8};
  EXPECT_DOUBLE_EQ(estimate_blocks(mixed, true).attention_flops,
                   2 * (2048 + 128 * (4 * 6 + 3 * 8)));
  // Fused: 5 matmuls over the dK/dV tiles.
  EXPECT_DOUBLE_EQ(estimate_blocks(mixed, false).attention_flops, 2 * (2048 + 128 * 5 * 6));
  // Six equal sizes are --flash-block.
  EXPECT_DOUBLE_EQ(estimate_blocks({4, 4, 4, 4, 4, 4}, true).attention_flops,
                   estimate(4, true).attention_flops);
  EXPECT_EQ(*ParseFlashBlocks("1024,512,2048,512,2048,512", "x"),
            (FlashBlocks{1024, 512, 2048, 512, 2048, 512}));
  EXPECT_EQ(*ParseFlashBlocks("512", "x"), (FlashBlocks{512, 512, 512, 512, 512, 512}));
  for (const char* bad : {"", "1,2", "0", "1,2,3,4,5,-6", "a,b,c,d,e,f"}) {
    EXPECT_EQ(ParseFlashBlocks(bad, "--flash-blocks").status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(TrainingStepTest, DenseAttentionNodesAreTheSquareOnes) {
  Built b = Build(Small());
  int64_t square = 0, dots = 0;
  for (const Node* node : b.program.program->nodes()) {
    if (!IsDenseAttentionNode(*node, 8)) continue;
    ++square;
    if (node->opcode() == Opcode::kDot) ++dots;
  }
  // Per layer: Q.K^T and P.V forward, and dP, dV, dQ, dK backward.
  EXPECT_EQ(dots, 2 * 6);
  EXPECT_GT(square, dots);
  nn::TransformerConfig c = Small();
  c.seq_len = 4;  // == head_dim
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  Built ambiguous = Build(c);
  absl::StatusOr<TrainingStepEstimate> e = EstimateTrainingStep(
      c, {}, Options(RematPolicy::kNone, AttentionKernel::kFlash), model, ambiguous.program,
      ambiguous.step.weight_parameters, ambiguous.step.moment_parameters);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(TrainingStepTest, MixtureOfExpertsByHand) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  nn::TransformerConfig c = Small();
  c.experts = 8;
  c.top_k = 2;
  c.capacity_factor = 1.25;
  // Every expert: 3 x 16 x 32 = 1536; router 16 x 8 = 128 per layer. Dense Small: 5456.
  EXPECT_EQ(nn::TransformerTotalParameterCount(c), 5456 + 2 * (7 * 1536 + 128));
  EXPECT_EQ(nn::TransformerActiveParameterCount(c), 5456 + 2 * (1 * 1536 + 128));
  Built b = Build(c);
  nn::RecipeShards shards = Shards(4, 2, 2);
  shards.expert = 2;  // pretend one of the batch axes is an expert axis of 2
  TrainingStepOptions options = Options(RematPolicy::kNone);
  options.expert_group = {0, 1};
  absl::StatusOr<TrainingStepEstimate> e = EstimateTrainingStep(
      c, shards, options, model, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(e.ok()) << e.status();
  // Per layer: 2.5 token slots per token; the graph's MLP (mlp_in 8192 + mlp_out 4096 forward)
  // 1.5 times more, and the router 2*8*16*8 = 2048, all x3 for the backward; 2 layers.
  EXPECT_DOUBLE_EQ(e->moe_flops, 2 * 3 * (1.5 * 12288 + 2048));
  EXPECT_DOUBLE_EQ(e->moe_seconds, e->moe_flops / model.MatmulPeakFlopsPerSecond(DType::kBF16));
  // 4 all-to-alls per layer of 2.5 x 8 tokens x 16 x 2 bytes = 640 over devices {0, 1}.
  const NodeCost a2a = model.CollectiveCost(Opcode::kAllToAll, {0, 1}, 640, 0);
  EXPECT_GT(a2a.ici_seconds, 0);
  EXPECT_DOUBLE_EQ(e->moe_ici_seconds, 2 * 4 * a2a.ici_seconds);
  // Parameters: 4 local experts of ceil(1536 / 4) = 384 elements and the router, against the
  // graph's one expert of 384: (4*384 - 384 + 128) x 4 bytes x 2 layers more; the same for the
  // gradients and twice for the moments.
  absl::StatusOr<TrainingStepEstimate> dense =
      EstimateTrainingStep(Small(), shards, Options(RematPolicy::kNone), model, b.program,
                           b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(e->memory.parameter_bytes - dense->memory.parameter_bytes, 2 * 1280 * 4);
  EXPECT_EQ(e->memory.optimizer_bytes - dense->memory.optimizer_bytes, 2 * 2 * 1280 * 4);
  // The kept MLP activations (wi: gate and up; h) hold 2.5x the token slots: 20 x 16 x 2 bytes.
  EXPECT_EQ(e->memory.activation_bytes - dense->memory.activation_bytes, 2 * (20 - 8) * 16 * 2 * 3);

  // GShard's einsum dispatch (MaxText's dense dropping path): per sequence of 8 tokens an expert
  // takes int(max(ceil(8 x 2 / 8) x 1.25, 1.25)) = 2 slots; the dispatch and combine einsums are
  // 2 x 8 tokens x 16 x 8 experts x 2 = 4096 flops each forward, x3 with the backward, 2 layers.
  EXPECT_EQ(e->moe_dispatch_flops, 0);
  options.moe_dispatch = MoeDispatch::kEinsum;
  absl::StatusOr<TrainingStepEstimate> einsum = EstimateTrainingStep(
      c, shards, options, model, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(einsum.ok()) << einsum.status();
  EXPECT_DOUBLE_EQ(einsum->moe_dispatch_flops, 2 * 3 * 2 * 4096);
  EXPECT_DOUBLE_EQ(einsum->moe_flops - e->moe_flops, einsum->moe_dispatch_flops);
  // On a 32 tile: the experts' d 16 and local ffn 16 pad 2x each, the router's d 2x and its 8
  // experts 4x, the einsums' 8-token sequence 4x and 8 experts x 2 slots 2x; flops unchanged.
  CostModel tiled = *CostModel::Create(TiledRing(32));
  absl::StatusOr<TrainingStepEstimate> padded = EstimateTrainingStep(
      c, shards, options, tiled, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_DOUBLE_EQ(padded->moe_flops, einsum->moe_flops);
  EXPECT_DOUBLE_EQ(padded->moe_seconds, 2 * 3 * (1.5 * 12288 * 4 + 2048 * 8 + 2 * 4096 * 8) / 1e12);
  EXPECT_EQ(*ParseMoeDispatch("einsum"), MoeDispatch::kEinsum);
  EXPECT_EQ(ParseMoeDispatch("sorted").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ContextParallelTest, SequenceShardsSplitTokensAndCostTheKvCollectives) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  const nn::TransformerConfig c = Small();
  // The graph of a sequence axis of 2: twice the sequences, half as long (the command's
  // graph_config); the estimate sees the real config with shards.sequence = 2.
  nn::TransformerConfig graph = c;
  graph.batch = 8;
  graph.seq_len = 4;
  graph.head_size = 4;
  Built b = Build(graph);
  nn::RecipeShards shards = Shards(2, 2, 2);
  shards.sequence = 2;
  const LocalLayer l = LocalLayerOf(c, shards, AttentionKernel::kFlash);
  EXPECT_EQ(l.tokens, 8);                   // 4 sequences / 2 x 8 positions / 2
  EXPECT_DOUBLE_EQ(l.keys_per_query, 4.5);  // causal over the whole sequence: (8 + 1) / 2
  TrainingStepOptions options = Options(RematPolicy::kNone, AttentionKernel::kFlash);
  options.sequence_group = {0, 2};
  absl::StatusOr<TrainingStepEstimate> e = EstimateTrainingStep(
      c, shards, options, model, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(e.ok()) << e.status();
  // K and V: 8 tokens x 1 kv head x 4 x 2 bytes = 64 each per device, 256 gathered; one
  // all-gather forward, one reduce-scatter backward, per layer.
  const NodeCost gather = model.CollectiveCost(Opcode::kAllGather, {0, 2}, 256, 0);
  const NodeCost scatter = model.CollectiveCost(Opcode::kReduceScatter, {0, 2}, 256, 0);
  EXPECT_GT(gather.ici_seconds, 0);
  EXPECT_DOUBLE_EQ(e->cp_ici_seconds, 2 * (gather.ici_seconds + scatter.ici_seconds));
  EXPECT_EQ(e->cp_dcn_seconds, 0);
  // Full remat recomputes the attention: its K/V all-gather runs again.
  options.remat = RematPolicy::kFull;
  absl::StatusOr<TrainingStepEstimate> full = EstimateTrainingStep(
      c, shards, options, model, b.program, b.step.weight_parameters, b.step.moment_parameters);
  ASSERT_TRUE(full.ok());
  EXPECT_DOUBLE_EQ(full->cp_ici_seconds, 2 * (2 * gather.ici_seconds + scatter.ici_seconds));
  SimulationReport r;
  ApplyTrainingStep(*e, r);
  EXPECT_DOUBLE_EQ(r.step_seconds, e->attention_seconds + e->cp_ici_seconds);
  EXPECT_DOUBLE_EQ(r.exposed_comm_seconds, e->cp_ici_seconds);
}

TEST(ContextParallelTest, MaxTextAxesTakeTheirRecipeRoles) {
  Topology topology = *MakeUniformTopology(1, {16}, 1, {true});
  // data 1, stage 2, fsdp 2, fsdp_transpose 1, sequence 2, tensor 2, expert 1.
  spmd::HybridMesh mesh = *spmd::HybridMesh::Create(
      {1, 2, 2, 1, 2, 2, 1}, {1, 1, 1, 1, 1, 1, 1},
      {"data", "stage", "fsdp", "fsdp_transpose", "sequence", "tensor", "expert"}, topology);
  const nn::RecipeShards s = *nn::ShardsOf(mesh, nn::ShardingRecipe::kFsdpTp);
  EXPECT_EQ(s.batch, 2);     // data x fsdp x fsdp_transpose x expert
  EXPECT_EQ(s.sequence, 2);  // not in batch
  EXPECT_EQ(s.stage, 2);     // no role
  EXPECT_EQ(s.tensor, 2);
  EXPECT_EQ(s.fsdp, 4);  // fsdp x fsdp_transpose x sequence, as MaxText shards the weights
  const nn::RecipeLayout layout = *nn::RecipeLayoutFor(mesh, nn::ShardingRecipe::kFsdp);
  EXPECT_THAT(layout.fsdp, ::testing::Not(::testing::Contains("stage")));
  EXPECT_THAT(layout.batch, ::testing::Not(::testing::Contains("stage")));
}

TEST(PipelineTest, BubbleIsTheClosedForm) {
  EXPECT_DOUBLE_EQ(PipelineBubbleFraction(4, 8), 3.0 / 11);  // (p-1)/(m+p-1)
  EXPECT_DOUBLE_EQ(PipelineBubbleFraction(1, 8), 0);
  EXPECT_DOUBLE_EQ(PipelineBubbleFraction(8, 1), 7.0 / 8);
  EXPECT_EQ(*ParsePipelineSchedule("gpipe"), PipelineSchedule::kGpipe);
  EXPECT_EQ(PipelineScheduleName(*ParsePipelineSchedule("1f1b")), "1f1b");
  absl::StatusOr<PipelineSchedule> bad = ParsePipelineSchedule("interleaved");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"interleaved\""));
}

TEST(PipelineTest, TransfersMemoryAndStepTimeByHand) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  nn::TransformerConfig stage = Small();  // one stage's layers; batch 4 over 1 batch shard
  const nn::RecipeShards shards = Shards(1, 1, 1);
  TrainingStepEstimate e;
  e.memory.activation_bytes = 800;
  e.memory.temporary_bytes = 100 + 64;  // gathered weights 100, one layer's working set 64
  e.gathered_weight_bytes = 100;
  e.hbm_bytes = 1000;
  PipelineOptions options;
  options.microbatches = 4;
  options.schedule = PipelineSchedule::kGpipe;
  options.stage_group = {0, 2, 4, 6};
  absl::StatusOr<PipelineEstimate> gpipe = EstimatePipeline(stage, shards, options, model, e);
  ASSERT_TRUE(gpipe.ok()) << gpipe.status();
  EXPECT_DOUBLE_EQ(gpipe->bubble_fraction, 3.0 / 7);
  // One microbatch: 1 sequence x 8 tokens x d_model 16 x 2 bytes.
  EXPECT_EQ(gpipe->transfer_bytes, 256);
  const NodeCost send = model.CollectiveCost(Opcode::kCollectivePermute, {0, 2}, 256, 0);
  EXPECT_DOUBLE_EQ(gpipe->transfer_seconds, send.seconds);
  EXPECT_DOUBLE_EQ(gpipe->exposed_ici_seconds, 6 * send.ici_seconds);  // 2 (p - 1)
  EXPECT_EQ(gpipe->ici_bytes, 8 * send.ici_bytes);                     // 2 m
  EXPECT_EQ(e.memory.activation_bytes, 800);          // GPipe keeps all m microbatches
  EXPECT_EQ(e.memory.temporary_bytes, 100 + 64 / 4);  // one microbatch's working set
  // 1F1B with m = 4 = p keeps as many; with 2 stages, 2 of the 4.
  options.schedule = PipelineSchedule::kOneForwardOneBackward;
  options.stage_group = {0, 4};
  ASSERT_TRUE(EstimatePipeline(stage, shards, options, model, e).ok());
  EXPECT_EQ(e.memory.activation_bytes, 400);
  // 3 sequences per rank cannot be split into 2 microbatches.
  stage.batch = 3;
  options.microbatches = 2;
  absl::StatusOr<PipelineEstimate> bad = EstimatePipeline(stage, shards, options, model, e);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("microbatches 2 must divide the 3 sequences"));
  // The step: the stage's compute 1 s, p = 4, m = 4: bubble (p-1)/m = 0.75 s.
  SimulationReport r;
  r.step_seconds = r.in_order_seconds = r.overlapped_seconds = 1.5;
  r.compute_seconds = 1;
  ApplyPipeline(*gpipe, r);
  EXPECT_DOUBLE_EQ(r.step_seconds, 1.5 + 0.75 + 6 * send.ici_seconds);
  EXPECT_DOUBLE_EQ(r.overlapped_seconds, r.step_seconds);
}

TEST(PipelineTest, InterleavedBlockingScatterGatherByHand) {
  // 8 devices: 2 stages {0, 4} and a tensor group {0, 1, 2, 3}; a switch (NVLink-like) slice.
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  nn::TransformerConfig stage = Small();  // batch 4 over 1 batch shard: 4 sequences
  TrainingStepEstimate e;
  e.memory.activation_bytes = 1600;  // all 4 microbatches of the stage's layers
  e.hbm_bytes = 1 << 30;
  PipelineOptions options;
  options.stage_group = {0, 4};
  options.microbatches = 4;
  options.virtual_stages = 2;
  options.blocking_transfers = true;
  options.scatter_gather = true;
  options.tensor_group = {0, 1, 2, 3};
  absl::StatusOr<PipelineEstimate> p = EstimatePipeline(stage, Shards(1, 1, 1), options, model, e);
  ASSERT_TRUE(p.ok()) << p.status();
  // (p-1)/(m v + p - 1) = 1/9: the bubble shrinks by the 2 chunks per stage.
  EXPECT_DOUBLE_EQ(p->bubble_fraction, 1.0 / 9);
  // One microbatch is 1 sequence x 8 tokens x 16 x 2 bytes = 256; each tensor rank sends 64,
  // then the 256 are all-gathered over the 4 ranks.
  EXPECT_EQ(p->transfer_bytes, 256);
  const NodeCost send = model.CollectiveCost(Opcode::kCollectivePermute, {0, 4}, 64, 0);
  const NodeCost gather = model.CollectiveCost(Opcode::kAllGather, {0, 1, 2, 3}, 256, 0);
  EXPECT_DOUBLE_EQ(p->transfer_seconds, send.seconds + gather.seconds);
  // Blocking: all 2 m v = 16 transfers are exposed.
  EXPECT_DOUBLE_EQ(p->exposed_ici_seconds, 16 * (send.ici_seconds + gather.ici_seconds));
  // Warm-up of stage 0: 2 (p-1) + (v-1) p + 1 = 5 chunk-microbatches of the 8, each 1600 / 8.
  EXPECT_EQ(e.memory.activation_bytes, 1000);
  // The bubble in the step: (p-1)/(m v) of the stage's compute.
  SimulationReport r;
  r.step_seconds = r.in_order_seconds = r.overlapped_seconds = r.compute_seconds = 1;
  ApplyPipeline(*p, r);
  EXPECT_DOUBLE_EQ(r.step_seconds, 1 + 1.0 / 8 + p->exposed_ici_seconds + p->exposed_dcn_seconds);
  // Interleaving is a 1F1B schedule.
  options.schedule = PipelineSchedule::kGpipe;
  EXPECT_EQ(EstimatePipeline(stage, Shards(1, 1, 1), options, model, e).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PipelineTest, GradientAccumulationKeepsOneMicrobatchLive) {
  Topology topology = *MakeUniformTopology(1, {8}, 1, {true});
  CostModel model = *CostModel::Create(topology);
  nn::TransformerConfig config = Small();  // batch 4 over 1 batch shard
  TrainingStepEstimate e;
  e.memory.activation_bytes = 800;
  e.memory.host_offloaded_bytes = 400;
  e.offload_bytes = 400;
  e.memory.temporary_bytes = 100 + 64;  // gathered weights 100, one layer's working set 64
  e.gathered_weight_bytes = 100;
  e.hbm_bytes = 1000;
  PipelineOptions options;  // no stage group: no pipeline
  options.microbatches = 4;
  absl::StatusOr<PipelineEstimate> accumulation =
      EstimatePipeline(config, Shards(1, 1, 1), options, model, e);
  ASSERT_TRUE(accumulation.ok()) << accumulation.status();
  EXPECT_EQ(accumulation->stages, 1);
  EXPECT_EQ(accumulation->microbatches, 4);
  EXPECT_EQ(accumulation->bubble_fraction, 0);
  // One microbatch's activations (800 / 4) and working set (64 / 4); the weights stay.
  EXPECT_EQ(e.memory.activation_bytes, 200);
  EXPECT_EQ(e.memory.temporary_bytes, 100 + 16);
  // Host memory holds one microbatch's offloaded values; every microbatch copies its own.
  EXPECT_EQ(e.memory.host_offloaded_bytes, 100);
  EXPECT_EQ(e.offload_bytes, 400);
  // The same flops and one gradient reduction per step: the step time does not move.
  SimulationReport r;
  r.step_seconds = r.in_order_seconds = r.overlapped_seconds = r.compute_seconds = 1;
  ApplyPipeline(*accumulation, r);
  EXPECT_EQ(r.step_seconds, 1);
  config.batch = 3;
  options.microbatches = 2;
  absl::StatusOr<PipelineEstimate> bad =
      EstimatePipeline(config, Shards(1, 1, 1), options, model, e);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("microbatches 2 must divide the 3 sequences"));
}

TEST(TrainingStepTest, ApplyAddsTimeAndReplacesTheMemoryVerdict) {
  SimulationReport r;
  r.step_seconds = r.in_order_seconds = r.overlapped_seconds = 1;
  r.compute_seconds = 0.5;
  r.warnings = {"error: peak memory 9 GiB per device exceeds the HBM of X (8 GiB)", "other"};
  r.exceeds_hbm = true;
  TrainingStepEstimate e;
  e.recompute_seconds = 0.25;
  e.attention_seconds = 0.125;
  e.memory.parameter_bytes = 100;
  e.hbm_bytes = 1000;
  e.fits = true;
  ApplyTrainingStep(e, r);
  EXPECT_DOUBLE_EQ(r.step_seconds, 1.375);
  EXPECT_DOUBLE_EQ(r.overlapped_seconds, 1.375);
  EXPECT_DOUBLE_EQ(r.compute_seconds, 0.875);
  EXPECT_EQ(r.peak_memory_bytes, 100);
  EXPECT_FALSE(r.exceeds_hbm);
  EXPECT_THAT(r.warnings, ElementsAre("other"));
  e.fits = false;
  ApplyTrainingStep(e, r);
  EXPECT_TRUE(r.exceeds_hbm);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_THAT(r.warnings[1], HasSubstr("warning: the step does not fit"));
}

}  // namespace
}  // namespace tessel::mesh
