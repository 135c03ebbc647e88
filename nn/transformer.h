// Decoder-only transformer training steps (GPT-style and Llama-style) traced into one Graph, and
// the usual sharding recipes applied with spmd::mark_sharding.
//
//   nn::TransformerConfig config = nn::Gpt2Small();            // or a hand-written config
//   TESSEL_ASSIGN_OR_RETURN(spmd::Mesh mesh,
//       spmd::Mesh::Create(ids, {2, 2, 2}, {"data", "fsdp", "tensor"}));
//   TESSEL_ASSIGN_OR_RETURN(nn::TransformerStep step,
//       nn::BuildTransformerStep(config, mesh, nn::ShardingRecipe::kFsdpTp));
//   partitioner::Partition(*step.graph, mesh.size());          // one SPMD program
//   nn::TransformerParameterCount(config);                     // for MFU: 6 * params * tokens
//
// The graph is one training step: forward (embedding, `layers` decoder blocks, final norm, LM
// head, mean next-token cross-entropy), backward (tessel::Grad) and an Adam update of every
// parameter (the torch.optim.Adam formulation of nn/optim.h, bias-correction factors fed as
// scalar inputs). Every input is a Tensor::Placeholder: nothing is allocated, so configs of any
// size (Llama-70B, GPT-3 175B) can be traced for the partitioner and the simulator.
//
// Shapes (global): tokens and labels s32[batch, seq_len]; activations [batch, seq_len, d_model]
// in `dtype`; parameters and Adam moments in `param_dtype` (mixed precision as MaxText's
// weight_dtype=f32, dtype=bf16: parameters are converted to `dtype` where they are used).
// The embedding is a dot of the one-hot tokens (compare with iota) with the table, because the
// IR has no gather; this is how TPU programs often embed (Flax `Embed.attend`, MaxText
// `use_iota_embed`) and it adds 2 * tokens * vocab * d_model flops per forward.
//
// GPT (Radford et al. 2019, GPT-2): learned position embedding, pre-LayerNorm with bias,
// multi-head attention with biases (separate Q, K, V projections; `kv_heads` applies too),
// GELU MLP (d_model -> ffn -> d_model) with biases.
// Llama (Touvron et al. 2023): RMSNorm, rotary position embedding (Su et al. 2021; cos/sin
// tables are inputs), grouped-query attention with `kv_heads` (Ainslie et al. 2023), SwiGLU MLP
// (Shazeer 2020) with three [d_model, ffn] matrices, no biases. Both: causal mask, untied LM head
// unless `tie_embeddings`.
// Options of either architecture: `head_dim` (heads x head_dim need not equal d_model: the Q
// projection is [d_model, heads*head_dim], the output projection [heads*head_dim, d_model]),
// learned or rotary positions (`positions`), tied input/output embeddings (the LM head is the
// transposed table, as GPT-2 and Gemma), PaLM's parallel block (Chowdhery et al. 2022, sec. 2:
// y = x + Attention(Norm(x)) + MLP(Norm(x)), one norm per layer) and sliding-window attention
// (Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023: query i sees keys i-W+1 .. i). The graph
// always holds the dense S x S attention (its FLOPs are the dense ones: a band mask is what XLA's
// dot-product attention computes too); fused (flash) attention and remat are costed by
// mesh/sim/training_step.h.
#ifndef TESSEL_NN_TRANSFORMER_H_
#define TESSEL_NN_TRANSFORMER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/core/dtype.h"
#include "tessel/core/graph.h"
#include "tessel/core/tensor.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel::nn {

enum class TransformerArch { kGpt, kLlama };

// How token positions enter the model. kDefault: the architecture's own (GPT learned, Llama
// rotary).
enum class PositionEmbedding { kDefault, kLearned, kRotary };

// "default" / "learned" / "rotary".
[[nodiscard]] std::string_view PositionEmbeddingName(PositionEmbedding positions);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<PositionEmbedding> ParsePositionEmbedding(std::string_view name);

// "gpt" / "llama".
[[nodiscard]] std::string_view TransformerArchName(TransformerArch arch);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<TransformerArch> ParseTransformerArch(std::string_view name);

struct TransformerConfig {
  TransformerArch arch = TransformerArch::kGpt;
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;      // query heads
  int64_t head_size = 0;  // per-head width; 0 means d_model / heads (see head_dim())
  int64_t kv_heads = 0;   // key/value heads (GQA); 0 means `heads` (multi-head attention)
  int64_t ffn = 256;      // MLP hidden size
  int64_t vocab = 128;
  int64_t seq_len = 16;
  int64_t batch = 8;                // global batch (sequences per step)
  DType dtype = DType::kBF16;       // activations and matmul inputs
  DType param_dtype = DType::kF32;  // parameters, gradients and Adam moments
  // Adam (torch.optim.Adam) hyperparameters; graph constants.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  PositionEmbedding positions = PositionEmbedding::kDefault;
  bool tie_embeddings = false;  // LM head = embedding table transposed (no separate matrix)
  bool parallel_block = false;  // PaLM: attention and MLP read the same normed input
  int64_t sliding_window = 0;   // W > 0: query i attends keys (i-W, i]; 0: full causal
  // Mixture of experts (Shazeer et al. 2017; Switch, Fedus et al. 2021; Mixtral, Jiang et al.
  // 2024): every layer's MLP becomes `experts` MLPs of `ffn`, each token routed to `top_k` of
  // them, each expert taking at most capacity_factor * tokens * top_k / experts tokens. 0: dense.
  // capacity_factor * top_k must be >= 1 (ValidateTransformerConfig): dropped tokens are not
  // modelled.
  // The graph holds one expert-sized MLP per layer (what one token costs once); the other
  // experts, the router and the all-to-alls are costed by mesh/sim/training_step.h.
  int64_t experts = 0;
  int64_t top_k = 2;
  double capacity_factor = 1.0;

  int64_t head_dim() const { return head_size > 0 ? head_size : d_model / heads; }
  // Whether the model uses rotary (else learned) positions, resolving kDefault by `arch`.
  bool rotary() const {
    return positions == PositionEmbedding::kDefault ? arch == TransformerArch::kLlama
                                                    : positions == PositionEmbedding::kRotary;
  }
  int64_t num_kv_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int64_t tokens() const { return batch * seq_len; }
};

// Limits that keep every size of a transformer step in int64 (checked arithmetic, no wrap-around):
// at most 1024 layers (every layer is built, about 1.6 MB of graph each; the largest published
// dense models have fewer than 130), and every global tensor (logits, activations, attention
// scores, weights) at most 2^46 bytes = 64 TiB in f32.
inline constexpr int64_t kMaxTransformerLayers = 1024;
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 46;

// Checks that every size is positive, heads divides d_model (unless head_size is given),
// kv_heads divides heads, rotary positions have an even head_dim, sliding_window >= 0, a mixture
// of experts has capacity_factor x top_k >= 1 (no dropped tokens), the dtypes
// are floating, and the limits above hold. Errors: kInvalidArgument naming the field (or the
// tensor and the fields it multiplies) and the value.
[[nodiscard]] absl::Status ValidateTransformerConfig(const TransformerConfig& config);

// Number of trainable parameters (elements), counted from the shapes BuildTransformerStep
// creates:
//   GPT:   V*D + [S*D] + L*(D*(Dq + 2*Dkv) + (Dq + 2*Dkv) + Dq*D + D + 2*D*F + F + D + n*2*D)
//          + 2*D + [D*V]
//   Llama: V*D + [S*D] + L*(D*(Dq + 2*Dkv) + Dq*D + 3*D*F + n*D) + D + [D*V]
// with Dq = heads * head_dim, Dkv = kv_heads * head_dim, n = 2 norms per layer (1 with
// parallel_block), [S*D] only with learned positions, [D*V] only without tie_embeddings. MFU uses 6
// * params * tokens (Kaplan et al. 2020; Chowdhery et al. 2022, appendix B, without the attention
// term).
[[nodiscard]] int64_t TransformerParameterCount(const TransformerConfig& config);

// With mixture of experts (experts > 0), the parameters of the model (every expert and the
// [D, experts] router of each layer) and those one token uses (top_k experts and the router);
// MFU counts the active ones (6 * active * tokens). Both equal TransformerParameterCount for a
// dense model. MLP parameters per expert: 3*D*F (Llama) or 2*D*F + F + D (GPT).
[[nodiscard]] int64_t TransformerTotalParameterCount(const TransformerConfig& config);
[[nodiscard]] int64_t TransformerActiveParameterCount(const TransformerConfig& config);

// The named sharding recipes. Axis roles come from RecipeAxes; a role whose axis the mesh does
// not have is simply not used (so "fsdp_tp" on a mesh without "fsdp" is Megatron TP x DP).
enum class ShardingRecipe {
  // Data parallel: the batch over every mesh axis; parameters and optimizer state replicated.
  kDp,
  // Fully sharded data parallel (ZeRO-3, PyTorch FSDP): the batch over every mesh axis; every
  // weight matrix sharded along one dim over every mesh axis (all-gathered before use,
  // gradients reduce-scattered). Norm scales and biases stay replicated.
  kFsdp,
  // Megatron tensor parallel (Shoeybi et al. 2019): QKV / MLP-in matrices split by columns,
  // output / MLP-out matrices by rows over the tensor axis, vocab split over it for the
  // embedding and LM head; the batch over every other axis (data parallel).
  kTp,
  // FSDP x TP (MaxText's fsdp + tensor): Megatron over the tensor axis and the other dim of each
  // weight over the fsdp axis (and fsdp_transpose and sequence, when the mesh has them); the
  // batch over the data and fsdp axes.
  kFsdpTp,
  // Multi-slice data parallel (MaxText dcn_data_parallelism): pure data parallel over the data
  // axis (the DCN axis of a HybridMesh: gradients all-reduced across slices), FSDP over the
  // other (ICI) axes inside each slice; the batch over every axis.
  kMultisliceDp,
};

// "dp", "fsdp", "tp", "fsdp_tp", "multislice_dp".
[[nodiscard]] std::string_view ShardingRecipeName(ShardingRecipe recipe);
// Errors: kInvalidArgument naming `name` and the accepted names.
[[nodiscard]] absl::StatusOr<ShardingRecipe> ParseShardingRecipe(std::string_view name);

// Which mesh axis plays which role (names as given to spmd::Mesh / HybridMesh).
struct RecipeAxes {
  std::string data = "data";  // the data-parallel axis; the DCN axis in multi-slice meshes
  std::string fsdp = "fsdp";
  std::string tensor = "tensor";
  std::string expert = "expert";  // expert parallelism (mixture of experts); a batch axis too
  // MaxText's other axes: "fsdp_transpose" is one more FSDP axis for fsdp_tp; "sequence" (context
  // parallelism) is a batch axis of the graph (a device's tokens are the same count whether the
  // batch or the sequence is split; the simulator costs the attention's K/V all-gather on top)
  // and an FSDP axis for fsdp_tp, as MaxText shards weights over it; "stage" (pipeline
  // parallelism) takes no role: the graph is one stage, replicated over the stage axis.
  std::string fsdp_transpose = "fsdp_transpose";
  std::string sequence = "sequence";
  std::string stage = "stage";
};

// How many ways a recipe splits the batch, the Megatron (tensor) dims and the FSDP dims of the
// weights on `mesh`: the products of the sizes of the axes it uses for each role (1 for a role
// it does not use). Per device: batch / batch sequences, heads / tensor heads, ffn / tensor.
struct RecipeShards {
  int64_t batch = 1;
  int64_t tensor = 1;
  int64_t fsdp = 1;
  // The "expert" mesh axis (expert parallelism: experts split over it), 1 when the mesh has
  // none, and the FSDP product without it (how an expert's own matrices are split).
  int64_t expert = 1;
  int64_t fsdp_without_expert = 1;
  // The "sequence" axis (context parallelism: the sequence split over it; not in `batch`) and
  // the "stage" axis (pipeline stages), 1 when the mesh has none.
  int64_t sequence = 1;
  int64_t stage = 1;
};
// Errors: those of BuildTransformerStep's recipe check (a missing tensor axis).
[[nodiscard]] absl::StatusOr<RecipeShards> ShardsOf(const spmd::Mesh& mesh, ShardingRecipe recipe,
                                                    const RecipeAxes& axes = {});
// How a weight is laid out by the recipes: which of its dims is Megatron-split (tensor) and
// which is FSDP-split. Column then row (Megatron-LM, Shoeybi et al. 2019): the column layer's
// output stays split over the tensor axis into the row layer, whose partial sums need one
// all-reduce per block; FSDP takes the other dim, so the two never compete for one dim.
enum class WeightKind {
  kColumn,      // [in, out]: out over tensor, in over fsdp (QKV, MLP in)
  kRow,         // [in, out]: in over tensor, out over fsdp (attention out, MLP out)
  kEmbedding,   // [vocab, d_model]: vocab over tensor, d_model over fsdp
  kHead,        // [d_model, vocab]: vocab over tensor, d_model over fsdp
  kPosition,    // [seq, d_model]: d_model over fsdp
  kColumnBias,  // [out] of a column layer: over tensor
  kVector,      // norm scales and other biases: replicated
};

// Mesh axes per role for one recipe on one mesh.
struct RecipeLayout {
  std::vector<std::string> batch;  // the batch dim of tokens/labels
  std::vector<std::string> fsdp;   // the FSDP dim of weights
  std::string tensor;              // the Megatron dim of weights ("" = none)
};

// The layout of `recipe` on `mesh` (roles whose axis the mesh lacks are dropped).
// Errors: kInvalidArgument if the mesh has several devices and no axis names, or tp / fsdp_tp
// is asked for on a mesh without `axes.tensor` (naming the mesh's axes).
[[nodiscard]] absl::StatusOr<RecipeLayout> RecipeLayoutFor(const spmd::Mesh& mesh,
                                                           ShardingRecipe recipe,
                                                           const RecipeAxes& axes = {});

// The partition_spec of a weight of `kind` under `layout` (rank 2 for matrices, 1 for vectors).
[[nodiscard]] spmd::PartitionSpec WeightPartitionSpec(WeightKind kind, const RecipeLayout& layout);

// The partition_spec of a rank-`rank` data input: dim 0 (the batch) over the layout's batch axes
// (a tuple when several: the batch split over their product), every other dim whole.
[[nodiscard]] spmd::PartitionSpec BatchPartitionSpec(const RecipeLayout& layout, int64_t rank);

// One traced training step.
struct TransformerStep {
  // Global shapes; parameters carry the recipe's shardings (XLA HloSharding text). Root: a
  // tuple (loss, then for each parameter: new parameter, new first moment, new second moment).
  std::unique_ptr<Graph> graph;
  // Graph parameter numbers of the trainable parameters and of their Adam moments, ascending;
  // every other parameter is a data input (tokens, labels, rotary tables, Adam scalars).
  std::vector<int64_t> weight_parameters;
  std::vector<int64_t> moment_parameters;
  int64_t num_parameters = 0;  // TransformerParameterCount(config)
};

// Builds, annotates and traces one training step of `config` (see the file comment).
// Shapes: global. Errors: kInvalidArgument from ValidateTransformerConfig, or when `recipe`
// needs an axis role the mesh lacks entirely (tp / fsdp_tp without `axes.tensor`); errors of
// mark_sharding and TraceGraph.
[[nodiscard]] absl::StatusOr<TransformerStep> BuildTransformerStep(const TransformerConfig& config,
                                                                   const spmd::Mesh& mesh,
                                                                   ShardingRecipe recipe,
                                                                   const RecipeAxes& axes = {});

}  // namespace tessel::nn

#endif  // TESSEL_NN_TRANSFORMER_H_
