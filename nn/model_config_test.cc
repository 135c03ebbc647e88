#include "tessel/nn/model_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::nn {
namespace {

using ::testing::HasSubstr;

TEST(ModelConfigTest, ReadsEveryKey) {
  absl::StatusOr<ModelFile> f = ParseModelConfig(R"({
      "name": "m", "source": ["a", "b"], "arch": "gpt", "layers": 3, "d_model": 64,
      "heads": 4, "kv_heads": 2, "head_dim": 32, "ffn": 128, "vocab": 100, "seq_len": 16,
      "batch": 2, "sliding_window": 8, "positions": "rotary", "tie_embeddings": true,
      "parallel_block": true, "dtype": "bf16", "param_dtype": "f32", "attention": "flash",
      "remat": "full", "matmul_dtype": "int8"})",
                                                 "m.json");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name, "m");
  EXPECT_EQ(f->sources.size(), 2u);
  const TransformerConfig& c = f->config;
  EXPECT_EQ(c.arch, TransformerArch::kGpt);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.head_dim(), 32);  // heads x head_dim = 128 != d_model
  EXPECT_EQ(c.num_kv_heads(), 2);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_TRUE(c.rotary());
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_TRUE(c.parallel_block);
  EXPECT_EQ(f->attention, "flash");
  EXPECT_EQ(f->remat, "full");
  EXPECT_EQ(f->matmul_dtype, "int8");
}

TEST(ModelConfigTest, ErrorsNameTheFileTheKeyAndTheValue) {
  auto error = [](const std::string& text) {
    absl::StatusOr<ModelFile> f = ParseModelConfig(text, "m.json");
    EXPECT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(f.status().message());
  };
  EXPECT_EQ(error(R"({"arch": "llama", "layers": -2})"),
            "m.json: /layers: expected a positive integer, got -2");
  EXPECT_EQ(error(R"({"arch": "llama", "layers": "32"})"),
            "m.json: /layers: expected a positive integer, got \"32\"");
  EXPECT_EQ(error(R"({"arch": "llama", "hidden": 4096})"), "m.json: /hidden: unknown key");
  EXPECT_EQ(error(R"({"layers": 2})"), "m.json: /arch: missing (\"gpt\" or \"llama\")");
  EXPECT_THAT(error(R"({"arch": "t5"})"), HasSubstr("m.json: /arch: unknown model \"t5\""));
  EXPECT_THAT(error(R"({"arch": "gpt", "positions": "alibi"})"),
              HasSubstr("/positions: unknown positions \"alibi\""));
  EXPECT_THAT(error(R"({"arch": "gpt", "tie_embeddings": 1})"),
              HasSubstr("/tie_embeddings: expected true or false, got 1"));
  EXPECT_THAT(error(R"({"arch": "gpt", "dtype": "f8"})"), HasSubstr("/dtype: unknown dtype"));
  EXPECT_THAT(error(R"({"arch": "gpt", "d_model": 10, "heads": 4})"),
              HasSubstr("m.json: transformer config: heads (4) must divide d_model (10)"));
  EXPECT_THAT(error(R"({"arch": "gpt",)"), HasSubstr("m.json: invalid JSON: "));
  EXPECT_THAT(error("[1]"), HasSubstr("m.json: /: expected a JSON object"));
  EXPECT_EQ(LoadModelConfig("/nonexistent/m.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelConfigTest, HeadDimLiftsTheDivisibilityRuleAndCountsParameters) {
  // 3 heads of 256 over d_model 512 (heads x head_dim = 768 != 512, as Gemma 7B's 16 x 256
  // over 3072): Q [512, 768], K and V [512, 256], O [768, 512].
  absl::StatusOr<ModelFile> f = ParseModelConfig(
      R"({"arch": "llama", "layers": 1, "d_model": 512, "heads": 3, "kv_heads": 1,
          "head_dim": 256, "ffn": 1024, "vocab": 10, "tie_embeddings": true})",
      "m.json");
  ASSERT_TRUE(f.ok()) << f.status();
  // Embedding 10*512 (tied: no head); layer: 512*(768 + 512) + 768*512 + 3*512*1024 + 2*512;
  // final norm 512.
  EXPECT_EQ(TransformerParameterCount(f->config),
            10 * 512 + 512 * 1280 + 768 * 512 + 3 * 512 * 1024 + 2 * 512 + 512);
}

}  // namespace
}  // namespace tessel::nn
