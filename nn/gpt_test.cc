#include "tessel/nn/gpt.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/testing/tensors.h"

namespace tessel::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor Tokens(std::vector<int64_t> dims, const std::vector<int32_t>& values) {
  return Tensor::FromLiteral(Literal::FromVector<int32_t>(std::move(dims), values));
}

GptConfig Tiny() {
  return GptConfig{.vocab = 16, .layers = 2, .d_model = 8, .heads = 2, .seq_len = 6};
}

TEST(GptTest, ParametersNamesAndCount) {
  absl::StatusOr<Gpt> gpt = Gpt::Create(Tiny(), 0);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  std::vector<std::string> names = gpt->parameter_names();
  ASSERT_EQ(names.size(), 2u + 2 * 16 + 2);  // wte, wpe, 16 per block, final norm
  EXPECT_EQ(names[0], "wte");
  EXPECT_EQ(names[1], "wpe");
  EXPECT_EQ(names[2], "h0.ln1.gain");
  EXPECT_EQ(names.back(), "ln_f.bias");
  // GPT-2 count with a tied head: V*D + S*D + L*(4*D*D + 4*D + 2*D*F + F + D + 4*D) + 2*D.
  const int64_t d = 8, f = 32, v = 16, s = 6, l = 2;
  EXPECT_EQ(gpt->num_parameters(),
            v * d + s * d + l * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d) + 2 * d);
  std::vector<bool> decay = gpt->DecayMask();
  EXPECT_TRUE(decay[0]);   // wte
  EXPECT_FALSE(decay[1]);  // wpe
  EXPECT_FALSE(decay[2]);  // a gain
  EXPECT_TRUE(decay[4]);   // h0.attn.wq
  EXPECT_FALSE(decay[5]);  // h0.attn.bq
  // Untied head and SwiGLU add lm_head and a gate per block; rotary drops wpe.
  GptConfig other = Tiny();
  other.tied_head = false;
  other.mlp = MlpActivation::kSwiGlu;
  other.position = PositionEncoding::kRotary;
  absl::StatusOr<Gpt> gpt2 = Gpt::Create(other, 0);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(gpt2->parameter_names().back(), "lm_head");
  EXPECT_EQ(gpt2->parameter_names()[1], "h0.ln1.gain");
  EXPECT_EQ(gpt2->parameters().size(), 1u + 2 * 18 + 2 + 1);
}

TEST(GptTest, SameSeedSameParameters) {
  absl::StatusOr<Gpt> a = Gpt::Create(Tiny(), 5), b = Gpt::Create(Tiny(), 5),
                      c = Gpt::Create(Tiny(), 6);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(Values(*a->parameters()[0]), Values(*b->parameters()[0]));
  EXPECT_NE(Values(*a->parameters()[0]), Values(*c->parameters()[0]));
}

TEST(GptTest, InitialLossIsNearUniformAndLogitsAreCausal) {
  for (PositionEncoding position : {PositionEncoding::kLearned, PositionEncoding::kRotary}) {
    GptConfig config = Tiny();
    config.position = position;
    absl::StatusOr<Gpt> gpt = Gpt::Create(config, 1);
    ASSERT_TRUE(gpt.ok()) << gpt.status();
    Tensor a = Tokens({1, 6}, {1, 2, 3, 4, 5, 6});
    Tensor b = Tokens({1, 6}, {1, 2, 3, 9, 9, 9});  // differs from position 3 on
    std::vector<double> la = Values(gpt->Logits(a)), lb = Values(gpt->Logits(b));
    ASSERT_EQ(la.size(), 6u * 16);
    for (int64_t i = 0; i < 3 * 16; ++i) EXPECT_FLOAT_EQ(la[i], lb[i]) << i;
    bool later_differ = false;
    for (int64_t i = 3 * 16; i < 6 * 16; ++i) later_differ |= la[i] != lb[i];
    EXPECT_TRUE(later_differ);
    // Small initial weights: the loss is close to log(vocab).
    std::vector<double> loss = Values(gpt->Loss(a, Tokens({1, 6}, {2, 3, 4, 5, 6, 7})));
    ASSERT_EQ(loss.size(), 1u);
    EXPECT_NEAR(loss[0], std::log(16.0), 0.1);
  }
}

TEST(GptTest, ShorterSequencesSeeThePrefixOfThePositions) {
  absl::StatusOr<Gpt> gpt = Gpt::Create(Tiny(), 2);
  ASSERT_TRUE(gpt.ok());
  std::vector<double> full = Values(gpt->Logits(Tokens({1, 6}, {4, 5, 6, 7, 8, 9})));
  std::vector<double> prefix = Values(gpt->Logits(Tokens({1, 3}, {4, 5, 6})));
  ASSERT_EQ(prefix.size(), 3u * 16);
  // Equal up to summation order (the softmax rows have fewer masked terms).
  for (size_t i = 0; i < prefix.size(); ++i) EXPECT_NEAR(prefix[i], full[i], 1e-6);
}

TEST(GptTest, BadInputsAreErrors) {
  absl::StatusOr<Gpt> gpt = Gpt::Create(Tiny(), 0);
  ASSERT_TRUE(gpt.ok());
  Tensor too_long = Tokens({1, 7}, {1, 2, 3, 4, 5, 6, 7});
  EXPECT_THAT(gpt->Logits(too_long).status().message(), HasSubstr("0 < seq <= 6"));
  Tensor t = Tokens({1, 2}, {1, 2});
  EXPECT_THAT(gpt->Loss(t, Tokens({1, 1}, {1})).status().message(), HasSubstr("do not match"));
  GptConfig bad = Tiny();
  bad.heads = 3;
  EXPECT_EQ(Gpt::Create(bad, 0).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Tiny();
  bad.position = PositionEncoding::kRotary;
  bad.d_model = 6;  // head_dim 3: odd
  EXPECT_THAT(Gpt::Create(bad, 0).status().message(), HasSubstr("even head_dim"));
  EXPECT_THAT(ParsePositionEncoding("alibi").status().message(), HasSubstr("learned or rotary"));
  EXPECT_THAT(ParseMlpActivation("relu").status().message(), HasSubstr("gelu or swiglu"));
}

// AdamW with clipping memorizes a short repeated sequence: the loss falls well below uniform.
TEST(GptTest, TrainingStepsLowerTheLoss) {
  for (MlpActivation mlp : {MlpActivation::kGelu, MlpActivation::kSwiGlu}) {
    GptConfig config = Tiny();
    config.mlp = mlp;
    config.tied_head = mlp == MlpActivation::kGelu;
    absl::StatusOr<Gpt> gpt = Gpt::Create(config, 3);
    ASSERT_TRUE(gpt.ok());
    Adam adamw({.lr = 1e-2,
                .weight_decay = 0.1,
                .decoupled_weight_decay = true,
                .decay_mask = gpt->DecayMask()});
    std::vector<double> losses;
    for (int step = 0; step < 60; ++step) {
      Tensor loss;
      {
        Tensor tokens = Tokens({2, 6}, {1, 2, 3, 1, 2, 3, 4, 5, 4, 5, 4, 5});
        Tensor labels = Tokens({2, 6}, {2, 3, 1, 2, 3, 1, 5, 4, 5, 4, 5, 4});
        loss = gpt->Loss(tokens, labels);
        std::vector<Tensor*> params = gpt->parameters();
        std::vector<Tensor> wrt;
        for (Tensor* p : params) wrt.push_back(*p);
        ClippedGradients clipped = ClipGradNorm(Grad(loss, wrt), 1.0);
        ASSERT_TRUE(adamw.Step(params, clipped.grads).ok());
      }
      ASSERT_TRUE(Sync().ok());
      losses.push_back(Values(loss)[0]);
    }
    EXPECT_NEAR(losses.front(), std::log(16.0), 0.1);
    EXPECT_LT(losses.back(), 0.5) << "mlp " << MlpActivationName(mlp);
  }
}

}  // namespace
}  // namespace tessel::nn
