// A byte-level GPT with real parameters, for training on text (the `tessel run --example gpt`
// job), on one device or sharded with the Megatron x FSDP recipe of nn/transformer.h.
//
//   GptConfig config{.layers = 4, .d_model = 128, .heads = 4, .seq_len = 128};
//   TESSEL_ASSIGN_OR_RETURN(Gpt model, Gpt::Create(config, /*seed=*/0));
//   TESSEL_ASSIGN_OR_RETURN(RecipeLayout layout,
//       RecipeLayoutFor(mesh, ShardingRecipe::kFsdpTp));   // axes data, fsdp, tensor
//   TESSEL_RETURN_IF_ERROR(model.Shard(mesh, layout));      // mark_sharding of every parameter
//   Tensor loss = model.Loss(tokens, labels);                // tokens, labels s32[B, S]
//
// Architecture (Radford et al. 2019, GPT-2, with the usual options): token embedding by gather
// (XLA gather, one row of the [vocab, d_model] table per token), learned position embedding or
// rotary positions (Su et al. 2021) in every attention layer, `layers` pre-LayerNorm blocks of
// causal multi-head self-attention (separate Q, K, V projections with biases) and an MLP (GELU,
// d_model -> ffn -> d_model; or SwiGLU, Shazeer 2020, with two [d_model, ffn] input matrices),
// a final LayerNorm, and an LM head tied to the embedding (logits = x . table^T, as GPT-2) or
// untied ([d_model, vocab]). Everything is f32. Loss: mean next-byte cross-entropy in nats.
//
// Parameters are device data (Tensor::FromLiteral), initialized on the host from one
// std::mt19937_64(seed) in parameter order (portable draws, nn/layers.h): matrices and
// embeddings N(0, 0.02), the residual output projections (attention out, MLP out) N(0,
// 0.02 / sqrt(2 * layers)) (GPT-2), biases 0, LayerNorm gains 1.
// Sharding (Shard): every parameter gets WeightPartitionSpec of its WeightKind: Q/K/V and MLP-in
// matrices column-split over `tensor` (heads stay whole per device), attention-out and MLP-out
// row-split, the embedding table split on vocab over `tensor` and on d_model over `fsdp`, the
// other dim of each matrix over `fsdp`; vectors replicated except the column biases.
#ifndef TESSEL_NN_GPT_H_
#define TESSEL_NN_GPT_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/transformer.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel::nn {

enum class PositionEncoding { kLearned, kRotary };
enum class MlpActivation { kGelu, kSwiGlu };

// "learned" / "rotary" and "gelu" / "swiglu"; Parse* errors: kInvalidArgument naming the value.
[[nodiscard]] std::string_view PositionEncodingName(PositionEncoding p);
[[nodiscard]] absl::StatusOr<PositionEncoding> ParsePositionEncoding(std::string_view name);
[[nodiscard]] std::string_view MlpActivationName(MlpActivation m);
[[nodiscard]] absl::StatusOr<MlpActivation> ParseMlpActivation(std::string_view name);

struct GptConfig {
  int64_t vocab = 256;  // bytes
  int64_t layers = 4;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t ffn = 0;        // MLP hidden size; 0: 4 * d_model
  int64_t seq_len = 128;  // the longest sequence (the learned position table's rows)
  PositionEncoding position = PositionEncoding::kLearned;
  MlpActivation mlp = MlpActivation::kGelu;
  bool tied_head = true;

  // ffn, or 4 * d_model by default (saturating: a d_model near 2^63 must fail validation as
  // too large, not wrap to a negative ffn).
  int64_t ffn_size() const {
    if (ffn > 0) return ffn;
    return d_model > std::numeric_limits<int64_t>::max() / 4 ? std::numeric_limits<int64_t>::max()
                                                             : 4 * d_model;
  }
  int64_t head_dim() const { return d_model / heads; }
};

// Checks the sizes as ValidateTransformerConfig does (positive, heads divide d_model, an even
// head_dim for rotary, the size limits). Errors: kInvalidArgument naming the field and value.
[[nodiscard]] absl::Status ValidateGptConfig(const GptConfig& config);

class Gpt {
 public:
  // Builds and initializes the parameters (see the file comment).
  // Errors: ValidateGptConfig's.
  [[nodiscard]] static absl::StatusOr<Gpt> Create(const GptConfig& config, uint64_t seed);

  // Annotates every parameter with mark_sharding (see the file comment), and makes Logits mark
  // the residual stream [B, S, d_model] (after the embedding and after each residual add) with
  // the batch over the layout's batch axes: sharding constraints on activations, as MaxText's
  // logical activation constraints. Without them the partitioner's propagation lets the
  // FSDP-sharded weights win, replicating the batch and repeating the whole forward pass on
  // every data-parallel device. A 1-device mesh gets no annotation.
  // Errors: mark_sharding's (an axis of `layout` not in `mesh`), naming the parameter.
  [[nodiscard]] absl::Status Shard(const spmd::Mesh& mesh, const RecipeLayout& layout);

  // Logits f32[B, S, vocab] for tokens s32[B, S] with S <= seq_len (position s of a row sees
  // tokens 0..s of that row only). Errors (in the tensor): kInvalidArgument if tokens are not
  // integer [B, S] with 0 < S <= seq_len.
  Tensor Logits(const Tensor& tokens) const;
  // Mean cross-entropy (nats) of Logits(tokens) against labels s32[B, S]: an f32 scalar.
  Tensor Loss(const Tensor& tokens, const Tensor& labels) const;

  // The trainable parameters in creation order (embedding, positions, per layer ..., final
  // norm, head); pointers stay valid while the model lives (also across moves).
  std::vector<Tensor*> parameters();
  // Parallel to parameters(): "wte", "wpe", "h0.ln1.gain", ... (GPT-2 names).
  std::vector<std::string> parameter_names() const;
  // Parallel to parameters(): true for the matrices and the token embedding (decayed by AdamW),
  // false for biases, gains and the position table.
  std::vector<bool> DecayMask() const;
  int64_t num_parameters() const;
  const GptConfig& config() const { return config_; }

 private:
  struct Param {
    std::string name;
    WeightKind kind;
    Tensor value;
  };
  // One block's parameters, as indices into params_.
  struct Block {
    int64_t ln1_gain, ln1_bias, wq, bq, wk, bk, wv, bv, wo, bo, ln2_gain, ln2_bias;
    int64_t w_in, b_in, w_gate, b_gate, w_out, b_out;  // w_gate/b_gate: SwiGLU only (else -1)
  };

  explicit Gpt(GptConfig config) : config_(config) {}
  const Tensor& P(int64_t index) const { return params_[index].value; }
  Tensor BlockForward(const Block& blk, const Tensor& x, const Tensor& cos,
                      const Tensor& sin) const;
  // `x` with the activation constraint of Shard (unchanged when not sharded).
  Tensor Constrain(Tensor x) const;

  GptConfig config_;
  std::vector<Param> params_;
  int64_t wte_ = -1, wpe_ = -1, lnf_gain_ = -1, lnf_bias_ = -1, head_ = -1;
  std::vector<Block> blocks_;
  Literal rotary_cos_, rotary_sin_;  // [seq_len, head_dim] when position == kRotary
  std::optional<spmd::Mesh> mesh_;   // set by Shard on a mesh of several devices
  spmd::PartitionSpec activation_spec_;
};

}  // namespace tessel::nn

#endif  // TESSEL_NN_GPT_H_
