#include "tessel/nn/transformer.h"

#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/internal/lazy.h"
#include "tessel/core/status_macros.h"
#include "tessel/nn/functional.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel::nn {
namespace {

using spmd::PartitionSpec;

PartitionSpec::Entry AxesEntry(const std::vector<std::string>& names) {
  if (names.empty()) return spmd::kNone;
  if (names.size() == 1) return names[0];
  std::vector<spmd::AxisRef> refs(names.begin(), names.end());
  return spmd::Axes(std::move(refs));
}

bool HasAxis(const spmd::Mesh& mesh, const std::string& name) {
  for (const std::string& a : mesh.axis_names()) {
    if (a == name) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<RecipeLayout> RecipeLayoutFor(const spmd::Mesh& mesh, ShardingRecipe recipe,
                                             const RecipeAxes& axes) {
  RecipeLayout layout;
  // Recipes name axes, so an unnamed mesh only works when it has one device (nothing to split).
  const std::vector<std::string>& all = mesh.axis_names();
  if (all.empty() && mesh.size() > 1) {
    return absl::InvalidArgumentError("sharding recipes need a mesh with axis names");
  }
  // The stage axis takes no role (RecipeAxes): every recipe acts as if the mesh lacked it.
  auto all_but = [&](const std::string& skip) {
    std::vector<std::string> out;
    for (const std::string& a : mesh.axis_names()) {
      if (a != skip && a != axes.stage) out.push_back(a);
    }
    return out;
  };
  const std::vector<std::string> all_axes = all_but(axes.stage);
  switch (recipe) {
    // Every device gets different examples; weights stay whole.
    case ShardingRecipe::kDp:
      layout.batch = all_axes;
      break;
    // ZeRO-3: the same batch split, and each weight split over all axes along its FSDP dim.
    case ShardingRecipe::kFsdp:
      layout.batch = all_axes;
      layout.fsdp = all_axes;
      break;
    // The batch goes over every axis but the tensor one: devices of one tensor group must see
    // the same tokens, since they compute parts of the same activations.
    case ShardingRecipe::kTp:
    case ShardingRecipe::kFsdpTp:
      if (!HasAxis(mesh, axes.tensor)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "recipe \"", std::string(ShardingRecipeName(recipe)), "\" needs a tensor axis \"",
            axes.tensor, "\"; mesh has axes ", mesh.AxesToString()));
      }
      layout.tensor = axes.tensor;
      layout.batch = all_but(axes.tensor);
      // MaxText shards the weights' embed dim over fsdp, fsdp_transpose and sequence.
      if (recipe == ShardingRecipe::kFsdpTp) {
        for (const std::string& name : {axes.fsdp, axes.fsdp_transpose, axes.sequence}) {
          if (HasAxis(mesh, name)) layout.fsdp.push_back(name);
        }
      }
      break;
    // Weights are sharded only inside a slice (FSDP over the ICI axes): their all-gathers stay
    // on ICI, and only the gradient all-reduce over the data axis crosses DCN.
    case ShardingRecipe::kMultisliceDp:
      layout.batch = all_axes;
      layout.fsdp = all_but(axes.data);
      break;
  }
  return layout;
}

PartitionSpec WeightPartitionSpec(WeightKind kind, const RecipeLayout& layout) {
  PartitionSpec::Entry fsdp = AxesEntry(layout.fsdp);
  PartitionSpec::Entry tensor = layout.tensor.empty() ? PartitionSpec::Entry(spmd::kNone)
                                                      : PartitionSpec::Entry(layout.tensor);
  switch (kind) {
    // The LM head is a column layer over the vocab: each tensor rank computes the logits of
    // its vocab slice, and the elementwise one-hot loss can use them without gathering the vocab.
    case WeightKind::kColumn:
    case WeightKind::kHead:
      return PartitionSpec{fsdp, tensor};
    // The embedding table is contracted over the vocab by the one-hot dot, so like a row layer
    // each tensor rank produces a partial sum, completed by one all-reduce (Megatron's
    // vocab-parallel embedding).
    case WeightKind::kRow:
    case WeightKind::kEmbedding:
      return PartitionSpec{tensor, fsdp};
    // Added to activations whose d_model is whole on every tensor rank: no tensor split.
    case WeightKind::kPosition:
      return PartitionSpec{spmd::kNone, fsdp};
    // Split like the column layer's output dim it is added to, so the add needs no collective.
    // Not FSDP-sharded: small vectors are kept whole, as the norm scales are.
    case WeightKind::kColumnBias:
      return PartitionSpec{tensor};
    case WeightKind::kVector:
      return PartitionSpec{spmd::kNone};
  }
  return PartitionSpec{spmd::kNone};
}

PartitionSpec BatchPartitionSpec(const RecipeLayout& layout, int64_t rank) {
  std::vector<PartitionSpec::Entry> entries(rank, spmd::kNone);
  entries[0] = AxesEntry(layout.batch);
  return PartitionSpec(std::move(entries));
}

namespace {

// Records the parameters (placeholders, sharded by the recipe) and the forward pass.
class Builder {
 public:
  Builder(const TransformerConfig& config, const spmd::Mesh& mesh, RecipeLayout layout)
      : config_(config), mesh_(mesh), layout_(std::move(layout)) {}

  absl::Status status() const { return status_; }
  std::vector<Tensor>& params() { return params_; }

  // A trainable parameter in param_dtype, returned converted to the compute dtype.
  // The gradient flows back through the convert, so it arrives in param_dtype, the dtype the
  // Adam update and moments use (mixed precision as MaxText: f32 master weights, bf16 compute).
  Tensor Weight(std::vector<int64_t> dims, WeightKind kind) {
    Tensor p = Tensor::Placeholder(Shape(config_.param_dtype, std::move(dims)));
    Mark(p, WeightPartitionSpec(kind, layout_));
    params_.push_back(p);
    return config_.param_dtype == config_.dtype ? p : Convert(p, config_.dtype);
  }

  // A non-trainable input (tokens, labels, tables).
  Tensor Input(DType dtype, std::vector<int64_t> dims, PartitionSpec spec) {
    Tensor t = Tensor::Placeholder(Shape(dtype, std::move(dims)));
    Mark(t, spec);
    inputs_.push_back(t);
    return t;
  }

  // Dim 0 over the recipe's batch axes (a tuple when there are several: the batch split over
  // their product), every other dim whole.
  PartitionSpec BatchSpec(int64_t rank) const { return BatchPartitionSpec(layout_, rank); }

  // [B, S, in] x [in, out] (+ bias [out]).
  Tensor Linear(const Tensor& x, const Tensor& w) { return MatMul(x, w); }
  Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = MatMul(x, w);
    return y + Broadcast(b, y.shape().dims(), {y.rank() - 1});
  }

  // Scale over the last dim: [D] -> x's shape.
  Tensor Last(const Tensor& v, const Tensor& like) {
    return Broadcast(v, like.shape().dims(), {like.rank() - 1});
  }

  // Statistics in f32 whatever the compute dtype (a bf16 mean of squares loses too many bits),
  // then back to `dtype` before the gain, as Llama's reference RMSNorm does; eps = 1e-6 is
  // that code's default.
  Tensor RmsNorm(const Tensor& x, const Tensor& gain) {
    const int64_t last = x.rank() - 1;
    Tensor xf = Convert(x, DType::kF32);
    Tensor mean_sq = ReduceMean(xf * xf, {last});
    std::vector<int64_t> keep;
    for (int64_t d = 0; d < last; ++d) keep.push_back(d);
    Tensor scale = Rsqrt(Broadcast(mean_sq, x.shape().dims(), keep) + 1e-6);
    return Convert(xf * scale, config_.dtype) * Last(gain, x);
  }

  // The whole normalization in f32, for the same reason as RmsNorm.
  Tensor LayerNorm(const Tensor& x, const Tensor& gain, const Tensor& bias) {
    return Convert(LayerNormalize(Convert(x, DType::kF32), Convert(gain, DType::kF32),
                                  Convert(bias, DType::kF32)),
                   config_.dtype);
  }

  // [B, S, n*Dh] -> [B, n, S, Dh] (nn/functional.h).
  Tensor SplitHeads(const Tensor& x, int64_t n) { return nn::SplitHeads(x, n); }

  // Rotary embedding on [B, H, S, Dh] with cos/sin tables [S, Dh] (nn/functional.h).
  Tensor Rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
    return ApplyRotary(x, cos, sin);
  }

  // Causal grouped-query attention: q [B, H, S, Dh], k/v [B, KV, S, Dh] -> [B, S, H*Dh]
  // (nn/functional.h; H*Dh may differ from d_model), with the config's sliding window; the
  // softmax in f32 for narrow compute dtypes.
  Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v) {
    return CausalSelfAttention(q, k, v, config_.sliding_window);
  }

  // Mean next-token cross-entropy of logits [B, S, V] against labels s32[B, S], in f32.
  // One-hot instead of a gather (the IR has none): compare with an iota is elementwise, so a
  // vocab-sharded head (Megatron) can keep its logits sharded through the loss, with only the
  // reductions of the log-softmax and the sum communicating. Log-softmax in f32, as for the
  // attention softmax. Divided by the global token count: the mean over the global batch.
  Tensor Loss(const Tensor& logits, const Tensor& labels) {
    const int64_t b = config_.batch, s = config_.seq_len, vocab = config_.vocab;
    Shape one_hot_shape(DType::kS32, {b, s, vocab});
    Tensor one_hot = Convert(Compare(Broadcast(labels, {b, s, vocab}, {0, 1}),
                                     Iota(one_hot_shape, 2), ComparisonDirection::kEq),
                             DType::kF32);
    Tensor logp = LogSoftmax(Convert(logits, DType::kF32), -1);
    return -ReduceSum(one_hot * logp, {0, 1, 2}) / static_cast<double>(b * s);
  }

  // Embedding lookup as one-hot(tokens) . table: s32[B, S] x [V, D] -> [B, S, D].
  // The one-hot is built in the compute dtype: 0 and 1 are exact in bf16, and the dot then
  // runs at the bf16 rate like every other matmul.
  Tensor Embed(const Tensor& tokens, const Tensor& table) {
    const int64_t b = config_.batch, s = config_.seq_len, vocab = config_.vocab;
    Shape one_hot_shape(DType::kS32, {b, s, vocab});
    Tensor one_hot = Convert(Compare(Broadcast(tokens, {b, s, vocab}, {0, 1}),
                                     Iota(one_hot_shape, 2), ComparisonDirection::kEq),
                             config_.dtype);
    return MatMul(one_hot, table);
  }

  // One decoder block on the residual stream x [B, S, D] (see the file comment): GPT or Llama,
  // sequential (x + Attn(N1(x)), then + MLP(N2(.))) or PaLM's parallel block (one norm, both
  // branches added to x). `cos`/`sin` are the rotary tables, unused with learned positions.
  Tensor Block(const Tensor& x, const Tensor& cos, const Tensor& sin) {
    const TransformerConfig& c = config_;
    const int64_t d = c.d_model, f = c.ffn, h = c.heads, kv = c.num_kv_heads();
    const int64_t dq = h * c.head_dim(), dkv = kv * c.head_dim();
    const bool gpt = c.arch == TransformerArch::kGpt;
    // Separate Q, K, V projections (the same parameters as a fused [D, Dq + 2*Dkv] matrix):
    // slicing a fused QKV output along its tensor-parallel dim would gather it whole.
    // A norm's parameters are created where it is declared (the parameter order of the step).
    auto norm = [&]() -> std::function<Tensor(const Tensor&)> {
      if (!gpt) {
        Tensor g = Weight({d}, WeightKind::kVector);
        return [this, g](const Tensor& y) { return RmsNorm(y, g); };
      }
      Tensor g = Weight({d}, WeightKind::kVector), bias = Weight({d}, WeightKind::kVector);
      return [this, g, bias](const Tensor& y) { return LayerNorm(y, g, bias); };
    };
    auto norm1 = norm();
    auto projection = [&](int64_t out, WeightKind kind) {
      Tensor w = Weight(
          kind == WeightKind::kRow ? std::vector<int64_t>{out, d} : std::vector<int64_t>{d, out},
          kind);
      Tensor bias =
          gpt ? Weight({kind == WeightKind::kRow ? d : out},
                       kind == WeightKind::kRow ? WeightKind::kVector : WeightKind::kColumnBias)
              : Tensor();
      return
          [this, w, bias, gpt](const Tensor& y) { return gpt ? Linear(y, w, bias) : Linear(y, w); };
    };
    auto wq = projection(dq, WeightKind::kColumn);
    auto wk = projection(dkv, WeightKind::kColumn);
    auto wv = projection(dkv, WeightKind::kColumn);
    auto wo = projection(dq, WeightKind::kRow);
    auto norm2 = c.parallel_block ? norm1 : norm();
    Tensor a = norm1(x);
    Tensor q = SplitHeads(wq(a), h), k = SplitHeads(wk(a), kv), val = SplitHeads(wv(a), kv);
    if (c.rotary()) {
      q = Rope(q, cos, sin);
      k = Rope(k, cos, sin);
    }
    Tensor attention = wo(Attention(q, k, val));
    Tensor x1 = c.parallel_block ? x : x + attention;
    Tensor m = c.parallel_block ? a : norm2(x1);
    Tensor mlp;
    if (gpt) {
      auto w1 = projection(f, WeightKind::kColumn);
      auto w2 = projection(f, WeightKind::kRow);
      mlp = w2(Gelu(w1(m)));
    } else {
      auto w_gate = projection(f, WeightKind::kColumn);
      auto w_up = projection(f, WeightKind::kColumn);
      auto w_down = projection(f, WeightKind::kRow);
      Tensor gate = w_gate(m);
      mlp = w_down(gate * Logistic(gate) * w_up(m));  // SwiGLU
    }
    return c.parallel_block ? x + attention + mlp : x1 + mlp;
  }

  std::vector<Tensor>& inputs() { return inputs_; }

 private:
  // The first error is kept and later marks are skipped, so the builder can record the whole
  // step without checking every call; BuildTransformerStep reports it once. A 1-device mesh
  // gets no annotations at all: everything is replicated anyway.
  void Mark(Tensor& t, const PartitionSpec& spec) {
    if (!status_.ok() || mesh_.size() == 1) return;
    absl::Status s = spmd::mark_sharding(t, mesh_, spec);
    if (!s.ok()) status_ = s;
  }

  const TransformerConfig& config_;
  const spmd::Mesh& mesh_;
  RecipeLayout layout_;
  absl::Status status_;
  std::vector<Tensor> params_;
  std::vector<Tensor> inputs_;
};

}  // namespace

std::string_view TransformerArchName(TransformerArch arch) {
  return arch == TransformerArch::kGpt ? "gpt" : "llama";
}

absl::StatusOr<TransformerArch> ParseTransformerArch(std::string_view name) {
  if (name == "gpt") return TransformerArch::kGpt;
  if (name == "llama") return TransformerArch::kLlama;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", std::string(name), "\"; expected gpt or llama"));
}

std::string_view PositionEmbeddingName(PositionEmbedding positions) {
  switch (positions) {
    case PositionEmbedding::kDefault:
      return "default";
    case PositionEmbedding::kLearned:
      return "learned";
    case PositionEmbedding::kRotary:
      return "rotary";
  }
  return "?";
}

absl::StatusOr<PositionEmbedding> ParsePositionEmbedding(std::string_view name) {
  for (PositionEmbedding p :
       {PositionEmbedding::kDefault, PositionEmbedding::kLearned, PositionEmbedding::kRotary}) {
    if (PositionEmbeddingName(p) == name) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown positions \"", std::string(name),
                                                 "\"; expected default, learned or rotary"));
}

std::string_view ShardingRecipeName(ShardingRecipe recipe) {
  switch (recipe) {
    case ShardingRecipe::kDp:
      return "dp";
    case ShardingRecipe::kFsdp:
      return "fsdp";
    case ShardingRecipe::kTp:
      return "tp";
    case ShardingRecipe::kFsdpTp:
      return "fsdp_tp";
    case ShardingRecipe::kMultisliceDp:
      return "multislice_dp";
  }
  return "?";
}

absl::StatusOr<ShardingRecipe> ParseShardingRecipe(std::string_view name) {
  for (ShardingRecipe r : {ShardingRecipe::kDp, ShardingRecipe::kFsdp, ShardingRecipe::kTp,
                           ShardingRecipe::kFsdpTp, ShardingRecipe::kMultisliceDp}) {
    if (ShardingRecipeName(r) == name) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown recipe \"", std::string(name),
                   "\"; expected one of dp, fsdp, tp, fsdp_tp, multislice_dp"));
}

absl::Status ValidateTransformerConfig(const TransformerConfig& c) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"layers", c.layers}, {"d_model", c.d_model}, {"heads", c.heads}, {"ffn", c.ffn},
      {"vocab", c.vocab},   {"seq_len", c.seq_len}, {"batch", c.batch}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("transformer config: ", name, " must be positive, got ", value));
    }
  }
  const std::pair<const char*, int64_t> optional_sizes[] = {
      {"kv_heads", c.kv_heads}, {"head_size", c.head_size}, {"sliding_window", c.sliding_window}};
  for (const auto& [name, value] : optional_sizes) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("transformer config: ", name, " must be >= 0, got ", value));
    }
  }
  // The divisibility rules keep head_dim and the GQA group size integral (d_model / heads,
  // heads / kv_heads); the reshapes in SplitHeads and Attention rely on both. An explicit
  // head_size lifts the first (heads x head_dim may differ from d_model).
  if (c.head_size == 0 && c.d_model % c.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("transformer config: heads (", c.heads,
                                                   ") must divide d_model (", c.d_model, ")"));
  }
  if (c.heads % c.num_kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer config: kv_heads (", c.num_kv_heads(), ") must divide heads (", c.heads, ")"));
  }
  if (c.experts < 0 || (c.experts > 0 && (c.top_k < 1 || c.top_k > c.experts)) ||
      !(c.capacity_factor > 0 && c.capacity_factor <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer config: mixture of experts needs experts >= 0, 1 <= top_k <= experts and "
        "capacity_factor in (0, 1e6]; got experts ",
        c.experts, ", top_k ", c.top_k, ", capacity_factor ", c.capacity_factor));
  }
  // Fewer expert slots than tokens drops tokens (GShard), which the step's dense MLP graph does
  // not model: it would charge every token's MLP and count negative expert work.
  if (c.experts > 0 && c.capacity_factor * static_cast<double>(c.top_k) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer config: capacity_factor x top_k = ", c.capacity_factor, " x ",
                     c.top_k, " is below 1: the experts would drop tokens, which is not modelled"));
  }
  if (c.experts > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer config: experts must be at most 1024, got ", c.experts));
  }
  if (c.rotary() && c.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer config: rotary embedding needs an even head_dim, got ", c.head_dim()));
  }
  if (!IsFloating(c.dtype) || !IsFloating(c.param_dtype)) {
    return absl::InvalidArgumentError("transformer config: dtype and param_dtype must be floating");
  }
  if (c.layers > kMaxTransformerLayers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer config: layers must be at most ", kMaxTransformerLayers, ", got ", c.layers,
        " (every layer is built and partitioned: about 1.6 MB of graph per layer)"));
  }
  // The largest global tensors of the step, in f32 bytes, are bounded by kMaxTensorBytes: with
  // at most kMaxTransformerLayers layers of a few dozen tensors each, every sum the builder, the
  // partitioner and the simulator form over them stays far below 2^63 (no wrap-around).
  const int64_t dkv = c.num_kv_heads() * c.head_dim();  // <= heads x head_dim
  const int64_t dq = c.heads * c.head_dim();
  if (c.d_model > kMaxTensorBytes || c.head_dim() > kMaxTensorBytes ||
      dq / c.heads != c.head_dim() || dq > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("transformer config: d_model ", c.d_model,
                                                   " or heads x head_dim is too large"));
  }
  const std::pair<const char*, std::vector<int64_t>> tensors[] = {
      {"batch x seq_len x vocab (the logits)", {c.batch, c.seq_len, c.vocab}},
      {"batch x seq_len x ffn (the MLP activation)", {c.batch, c.seq_len, c.ffn}},
      {"batch x seq_len x d_model (the residual stream)", {c.batch, c.seq_len, c.d_model}},
      {"batch x heads x seq_len x seq_len (the attention scores)",
       {c.batch, c.heads, c.seq_len, c.seq_len}},
      {"vocab x d_model (the embedding)", {c.vocab, c.d_model}},
      {"d_model x ffn (an MLP weight)", {c.d_model, c.ffn}},
      {"d_model x (heads + 2 x kv_heads) x head_dim (the QKV weight)", {c.d_model, dq + 2 * dkv}},
      {"batch x seq_len x heads x head_dim (the attention context)", {c.batch, c.seq_len, dq}},
  };
  for (const auto& [what, dims] : tensors) {
    absl::StatusOr<int64_t> bytes = CheckedByteSize(Shape(DType::kF32, dims));
    if (!bytes.ok() || *bytes > kMaxTensorBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transformer config: ", what, " = ", absl::StrJoin(dims, " x "),
          " elements is too large (the limit is ", kMaxTensorBytes, " bytes in f32 per tensor)"));
    }
  }
  return absl::OkStatus();
}

int64_t TransformerParameterCount(const TransformerConfig& c) {
  const int64_t d = c.d_model, f = c.ffn, v = c.vocab, s = c.seq_len, l = c.layers;
  const int64_t dq = c.heads * c.head_dim(), dkv = c.num_kv_heads() * c.head_dim();
  const int64_t norms = c.parallel_block ? 1 : 2;
  // Outside the layers: the token embedding, learned positions if any, the LM head if untied.
  const int64_t outside = v * d + (c.rotary() ? 0 : s * d) + (c.tie_embeddings ? 0 : d * v);
  // Per GPT layer: Q, K, V weights and biases, output projection and its bias, the two MLP
  // matrices and their biases, the LayerNorms' gains and biases; then the final LayerNorm.
  if (c.arch == TransformerArch::kGpt) {
    const int64_t per_layer =
        d * (dq + 2 * dkv) + (dq + 2 * dkv) + dq * d + d + 2 * d * f + f + d + norms * 2 * d;
    return outside + l * per_layer + 2 * d;
  }
  // Per Llama layer: Q, K, V and output projections, the three SwiGLU matrices, the RMSNorm
  // gains; no biases. Then the final RMSNorm gain.
  const int64_t per_layer = d * (dq + 2 * dkv) + dq * d + 3 * d * f + norms * d;
  return outside + l * per_layer + d;
}

namespace {

// Parameters of one expert's MLP (the graph's MLP of one layer).
int64_t MlpParameters(const TransformerConfig& c) {
  return c.arch == TransformerArch::kLlama ? 3 * c.d_model * c.ffn
                                           : 2 * c.d_model * c.ffn + c.ffn + c.d_model;
}

}  // namespace

int64_t TransformerTotalParameterCount(const TransformerConfig& c) {
  if (c.experts == 0) return TransformerParameterCount(c);
  return TransformerParameterCount(c) +
         c.layers * ((c.experts - 1) * MlpParameters(c) + c.d_model * c.experts);
}

int64_t TransformerActiveParameterCount(const TransformerConfig& c) {
  if (c.experts == 0) return TransformerParameterCount(c);
  return TransformerParameterCount(c) +
         c.layers * ((c.top_k - 1) * MlpParameters(c) + c.d_model * c.experts);
}

absl::StatusOr<RecipeShards> ShardsOf(const spmd::Mesh& mesh, ShardingRecipe recipe,
                                      const RecipeAxes& axes) {
  TESSEL_ASSIGN_OR_RETURN(RecipeLayout layout, RecipeLayoutFor(mesh, recipe, axes));
  auto size_of = [&](const std::string& name) -> int64_t {
    for (int64_t a = 0; a < mesh.rank(); ++a) {
      if (mesh.axis_names()[a] == name) return mesh.axis_size(a);
    }
    return 1;
  };
  RecipeShards shards;
  for (const std::string& name : layout.batch) {
    if (name == axes.sequence) {
      shards.sequence = size_of(name);
    } else {
      shards.batch *= size_of(name);
    }
  }
  shards.stage = size_of(axes.stage);
  for (const std::string& name : layout.fsdp) {
    shards.fsdp *= size_of(name);
    if (name != axes.expert) shards.fsdp_without_expert *= size_of(name);
  }
  shards.expert = size_of(axes.expert);
  if (!layout.tensor.empty()) shards.tensor = size_of(layout.tensor);
  return shards;
}

absl::StatusOr<TransformerStep> BuildTransformerStep(const TransformerConfig& c,
                                                     const spmd::Mesh& mesh, ShardingRecipe recipe,
                                                     const RecipeAxes& axes) {
  TESSEL_RETURN_IF_ERROR(ValidateTransformerConfig(c));
  TESSEL_ASSIGN_OR_RETURN(RecipeLayout layout, RecipeLayoutFor(mesh, recipe, axes));
  Builder b(c, mesh, layout);
  const int64_t d = c.d_model, v = c.vocab, s = c.seq_len, dh = c.head_dim();
  const bool gpt = c.arch == TransformerArch::kGpt;

  // Only the batch dim of the data is sharded (data parallelism over the recipe's batch axes);
  // the sequence dim stays whole, as there is no sequence parallelism here.
  Tensor tokens = b.Input(DType::kS32, {c.batch, s}, b.BatchSpec(2));
  Tensor labels = b.Input(DType::kS32, {c.batch, s}, b.BatchSpec(2));
  Tensor table = b.Weight({v, d}, WeightKind::kEmbedding);
  Tensor x = b.Embed(tokens, table);
  if (!c.rotary()) {
    Tensor pos = b.Weight({s, d}, WeightKind::kPosition);
    x = x + Broadcast(pos, x.shape().dims(), {1, 2});
  }
  // Rotary tables are inputs (not computed in the graph) and replicated: small, and every
  // device needs all positions of its sequences.
  Tensor cos, sin;
  if (c.rotary()) {
    cos = b.Input(c.dtype, {s, dh}, PartitionSpec{spmd::kNone, spmd::kNone});
    sin = b.Input(c.dtype, {s, dh}, PartitionSpec{spmd::kNone, spmd::kNone});
  }
  for (int64_t layer = 0; layer < c.layers; ++layer) x = b.Block(x, cos, sin);
  if (gpt) {
    Tensor gf = b.Weight({d}, WeightKind::kVector), bf = b.Weight({d}, WeightKind::kVector);
    x = b.LayerNorm(x, gf, bf);
  } else {
    x = b.RmsNorm(x, b.Weight({d}, WeightKind::kVector));
  }
  // A tied head reads the embedding table transposed: [V, D] sharded {tensor, fsdp} becomes
  // [D, V] sharded {fsdp, tensor}, the head's own layout, so tying adds no collective.
  Tensor head = c.tie_embeddings ? Transpose(table, {1, 0}) : b.Weight({d, v}, WeightKind::kHead);
  Tensor logits = b.Linear(x, head);
  Tensor loss = b.Loss(logits, labels);
  TESSEL_RETURN_IF_ERROR(b.status());
  TESSEL_RETURN_IF_ERROR(loss.status());

  std::vector<Tensor>& params = b.params();
  std::vector<Tensor> grads = Grad(loss, params);
  // Adam, torch.optim.Adam formulation (nn/optim.h): the bias-correction factors
  // lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) are scalar inputs, moments placeholders
  // sharded like their parameter.
  Tensor step_size = b.Input(c.param_dtype, {}, PartitionSpec{});
  Tensor inv_sqrt_bc2 = b.Input(c.param_dtype, {}, PartitionSpec{});
  std::vector<Tensor> outputs = {loss};
  std::vector<Tensor> moments;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    // Moments sharded exactly like their parameter (ZeRO / FSDP keep optimizer state with the
    // parameter shard), so the update below is elementwise on local shards, no collective.
    Tensor m = Tensor::Placeholder(p.shape());
    Tensor var = Tensor::Placeholder(p.shape());
    m.SetSharding(p.sharding());
    var.SetSharding(p.sharding());
    moments.push_back(m);
    moments.push_back(var);
    const std::vector<int64_t>& dims = p.shape().dims();
    Tensor m1 = m * c.beta1 + grads[i] * (1.0 - c.beta1);
    Tensor v1 = var * c.beta2 + grads[i] * grads[i] * (1.0 - c.beta2);
    Tensor denom = Sqrt(v1) * Broadcast(inv_sqrt_bc2, dims, {}) + c.eps;
    outputs.push_back(p - Broadcast(step_size, dims, {}) * m1 / denom);
    outputs.push_back(m1);
    outputs.push_back(v1);
  }
  TESSEL_ASSIGN_OR_RETURN(
      TracedGraph traced,
      TraceGraph(outputs, absl::StrCat(std::string(TransformerArchName(c.arch)), "_step")));
  TransformerStep step;
  step.graph = std::move(traced.graph);
  step.num_parameters = TransformerParameterCount(c);
  // TraceGraph binds parameter i to a tensor sharing the placeholder's IR node.
  absl::flat_hash_set<const internal_lazy::LazyNode*> weight_nodes, moment_nodes;
  for (const Tensor& p : params) weight_nodes.insert(p.impl()->node.get());
  for (const Tensor& m : moments) moment_nodes.insert(m.impl()->node.get());
  for (size_t i = 0; i < traced.parameters.size(); ++i) {
    const internal_lazy::LazyNode* node = traced.parameters[i].impl()->node.get();
    if (weight_nodes.contains(node)) step.weight_parameters.push_back(static_cast<int64_t>(i));
    if (moment_nodes.contains(node)) step.moment_parameters.push_back(static_cast<int64_t>(i));
  }
  return step;
}

}  // namespace tessel::nn
