#include "tessel/nn/transformer.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/spmd/mesh.h"

namespace tessel::nn {
namespace {

using ::testing::HasSubstr;

spmd::Mesh Mesh8() {
  std::vector<int64_t> ids(8);
  for (int64_t i = 0; i < 8; ++i) ids[i] = i;
  return *spmd::Mesh::Create(ids, {2, 2, 2}, {"data", "fsdp", "tensor"});
}

TransformerConfig Tiny(TransformerArch arch) {
  TransformerConfig c;
  c.arch = arch;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = arch == TransformerArch::kLlama ? 2 : 0;
  c.ffn = 32;
  c.vocab = 24;
  c.seq_len = 8;
  c.batch = 4;
  return c;
}

// Element count of the graph parameters listed in `numbers`.
int64_t Elements(const Graph& graph, const std::vector<int64_t>& numbers) {
  int64_t total = 0;
  for (int64_t n : numbers) total += graph.parameters()[n]->shape().num_elements();
  return total;
}

TEST(TransformerTest, GptParameterCountByHand) {
  TransformerConfig c = Tiny(TransformerArch::kGpt);
  // D=16, F=32, V=24, S=8, L=2, Dkv=16.
  // per layer: 16*48 + 48 + 16*16 + 16 + 2*16*32 + 32 + 16 + 4*16 = 2224
  // total: 24*16 + 8*16 + 2*2224 + 2*16 + 16*24 = 384 + 128 + 4448 + 32 + 384 = 5376
  EXPECT_EQ(TransformerParameterCount(c), 5376);
}

TEST(TransformerTest, LlamaParameterCountByHand) {
  TransformerConfig c = Tiny(TransformerArch::kLlama);
  // D=16, heads 4 (Dh 4), kv 2 -> Dkv 8. per layer: 16*(16+16) + 256 + 3*16*32 + 32 = 2336
  // total: 24*16 + 2*2336 + 16 + 16*24 = 384 + 4672 + 16 + 384 = 5456
  EXPECT_EQ(TransformerParameterCount(c), 5456);
}

TEST(TransformerTest, Llama2_70bParameterCount) {
  // Llama 2 70B: L=80, D=8192, 64 heads, 8 KV heads, F=28672, V=32000: 68.98e9 parameters
  // (Touvron et al. 2023 report "70B").
  TransformerConfig c;
  c.arch = TransformerArch::kLlama;
  c.layers = 80;
  c.d_model = 8192;
  c.heads = 64;
  c.kv_heads = 8;
  c.ffn = 28672;
  c.vocab = 32000;
  EXPECT_EQ(TransformerParameterCount(c), 68976648192);
}

TEST(TransformerTest, TracedParametersMatchTheCount) {
  for (TransformerArch arch : {TransformerArch::kGpt, TransformerArch::kLlama}) {
    TransformerConfig c = Tiny(arch);
    absl::StatusOr<TransformerStep> step = BuildTransformerStep(c, Mesh8(), ShardingRecipe::kDp);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(Elements(*step->graph, step->weight_parameters), TransformerParameterCount(c));
    EXPECT_EQ(Elements(*step->graph, step->moment_parameters), 2 * TransformerParameterCount(c));
    // Root: loss + (parameter, m, v) per weight.
    EXPECT_EQ(step->graph->root()->operand_count(),
              1 + 3 * static_cast<int64_t>(step->weight_parameters.size()));
    EXPECT_EQ(step->graph->root()->operand(0)->shape().ToString(), "f32[]");
  }
}

TEST(TransformerTest, ModelOptionsBuildAndMatchTheCount) {
  // Every option of the model description, on both architectures, with every recipe: the graph
  // traces, partitions-ready, and its weights are the counted parameters.
  for (TransformerArch arch : {TransformerArch::kGpt, TransformerArch::kLlama}) {
    for (int variant = 0; variant < 4; ++variant) {
      TransformerConfig c = Tiny(arch);
      c.head_size = variant == 0 ? 8 : 0;  // heads x head_dim = 32 != d_model 16
      c.tie_embeddings = variant == 1;
      c.parallel_block = variant == 2;
      c.sliding_window = variant == 3 ? 3 : 0;
      c.positions = variant == 1 ? (arch == TransformerArch::kGpt ? PositionEmbedding::kRotary
                                                                  : PositionEmbedding::kLearned)
                                 : PositionEmbedding::kDefault;
      SCOPED_TRACE(testing::Message() << TransformerArchName(arch) << " variant " << variant);
      for (ShardingRecipe recipe : {ShardingRecipe::kDp, ShardingRecipe::kFsdpTp}) {
        absl::StatusOr<TransformerStep> step = BuildTransformerStep(c, Mesh8(), recipe);
        ASSERT_TRUE(step.ok()) << step.status();
        EXPECT_EQ(Elements(*step->graph, step->weight_parameters), TransformerParameterCount(c));
      }
    }
  }
  // By hand, Tiny GPT (5376 parameters) with tied embeddings: minus the head's 16 x 24.
  TransformerConfig tied = Tiny(TransformerArch::kGpt);
  tied.tie_embeddings = true;
  EXPECT_EQ(TransformerParameterCount(tied), 5376 - 16 * 24);
  // Parallel block: one LayerNorm (gain and bias, 2 x 16) fewer per layer, 2 layers.
  TransformerConfig parallel = Tiny(TransformerArch::kGpt);
  parallel.parallel_block = true;
  EXPECT_EQ(TransformerParameterCount(parallel), 5376 - 2 * 32);
}

TEST(TransformerTest, ShardsOfCountsEachRolesAxes) {
  std::vector<int64_t> ids(16);
  for (int64_t i = 0; i < 16; ++i) ids[i] = i;
  spmd::Mesh mesh = *spmd::Mesh::Create(ids, {2, 2, 4}, {"fsdp", "expert", "tensor"});
  // fsdp_tp: batch over fsdp and expert (every axis but tensor), weights over fsdp only.
  RecipeShards tp = *ShardsOf(mesh, ShardingRecipe::kFsdpTp);
  EXPECT_EQ(tp.batch, 4);
  EXPECT_EQ(tp.tensor, 4);
  EXPECT_EQ(tp.fsdp, 2);
  EXPECT_EQ(tp.expert, 2);
  EXPECT_EQ(tp.fsdp_without_expert, 2);
  // fsdp: everything over every axis; an expert's own matrices skip the expert axis.
  RecipeShards fsdp = *ShardsOf(mesh, ShardingRecipe::kFsdp);
  EXPECT_EQ(fsdp.batch, 16);
  EXPECT_EQ(fsdp.tensor, 1);
  EXPECT_EQ(fsdp.fsdp, 16);
  EXPECT_EQ(fsdp.fsdp_without_expert, 8);
  EXPECT_EQ(ShardsOf(Mesh8(), ShardingRecipe::kDp)->expert, 1);
  EXPECT_EQ(ShardsOf(*spmd::Mesh::Create(ids, {16}, {"data"}), ShardingRecipe::kTp).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TransformerTest, RecipesAnnotateWeights) {
  TransformerConfig c = Tiny(TransformerArch::kGpt);
  absl::StatusOr<TransformerStep> dp = BuildTransformerStep(c, Mesh8(), ShardingRecipe::kDp);
  absl::StatusOr<TransformerStep> tp = BuildTransformerStep(c, Mesh8(), ShardingRecipe::kTp);
  absl::StatusOr<TransformerStep> fsdp = BuildTransformerStep(c, Mesh8(), ShardingRecipe::kFsdp);
  ASSERT_TRUE(dp.ok() && tp.ok() && fsdp.ok());
  // Weight 0 is the embedding table [V, D].
  const Node* dp_emb = dp->graph->parameters()[dp->weight_parameters[0]];
  const Node* tp_emb = tp->graph->parameters()[tp->weight_parameters[0]];
  const Node* fsdp_emb = fsdp->graph->parameters()[fsdp->weight_parameters[0]];
  EXPECT_EQ(dp_emb->shape().ToString(), "f32[24,16]");
  EXPECT_EQ(dp_emb->sharding(), "{replicated}");
  // vocab over "tensor" (mesh axis 2), replicated over data x fsdp.
  EXPECT_EQ(tp_emb->sharding(), "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}");
  // d_model over every axis.
  EXPECT_EQ(fsdp_emb->sharding(), "{devices=[1,8]<=[8]}");
}

TEST(TransformerTest, Errors) {
  TransformerConfig c = Tiny(TransformerArch::kGpt);
  c.heads = 5;
  EXPECT_THAT(BuildTransformerStep(c, Mesh8(), ShardingRecipe::kDp).status().message(),
              HasSubstr("heads (5) must divide d_model (16)"));
  c = Tiny(TransformerArch::kLlama);
  c.kv_heads = 3;
  EXPECT_THAT(ValidateTransformerConfig(c).message(), HasSubstr("kv_heads (3) must divide"));
  c.kv_heads = 2;
  c.batch = 0;
  EXPECT_THAT(ValidateTransformerConfig(c).message(), HasSubstr("batch must be positive"));
  // Sizes whose products pass int64 or the per-tensor limit are refused, naming the product.
  c = TransformerConfig();
  c.batch = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(ValidateTransformerConfig(c).message(),
              HasSubstr("batch x seq_len x vocab (the logits) = 9223372036854775807 x"));
  c = TransformerConfig();
  c.heads = 1;
  c.seq_len = int64_t{1} << 24;  // scores: batch x 1 x 2^24 x 2^24 f32 = more than 64 TiB
  EXPECT_THAT(ValidateTransformerConfig(c).message(), HasSubstr("(the attention scores)"));
  c = TransformerConfig();
  c.layers = kMaxTransformerLayers + 1;
  EXPECT_THAT(ValidateTransformerConfig(c).message(), HasSubstr("layers must be at most 1024"));
  c.layers = kMaxTransformerLayers;
  EXPECT_TRUE(ValidateTransformerConfig(c).ok());
  // Expert slots below one per token would drop tokens, which the dense MLP graph cannot show.
  c = TransformerConfig();
  c.experts = 8;
  c.top_k = 2;
  c.capacity_factor = 0.5;
  EXPECT_TRUE(ValidateTransformerConfig(c).ok());
  c.capacity_factor = 0.4;
  EXPECT_THAT(ValidateTransformerConfig(c).message(),
              HasSubstr("capacity_factor x top_k = 0.4 x 2 is below 1"));
  spmd::Mesh no_tensor = *spmd::Mesh::Create({0, 1}, {2}, {"data"});
  EXPECT_THAT(BuildTransformerStep(Tiny(TransformerArch::kGpt), no_tensor, ShardingRecipe::kTp)
                  .status()
                  .message(),
              HasSubstr("needs a tensor axis \"tensor\""));
  EXPECT_THAT(ParseShardingRecipe("zero3").status().message(), HasSubstr("unknown recipe"));
  EXPECT_EQ(*ParseShardingRecipe("fsdp_tp"), ShardingRecipe::kFsdpTp);
  EXPECT_EQ(*ParseTransformerArch("llama"), TransformerArch::kLlama);
}

TEST(TransformerTest, PlaceholdersCannotRun) {
  Tensor p = Tensor::Placeholder(Shape(DType::kF32, {2}));
  absl::StatusOr<Literal> value = (p + 1.0).ToLiteral();
  EXPECT_EQ(value.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(p.ToLiteral().ok());
  EXPECT_TRUE(Sync().ok());  // a live placeholder is not pending work
}

}  // namespace
}  // namespace tessel::nn
