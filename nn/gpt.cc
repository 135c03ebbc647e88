#include "tessel/nn/gpt.h"

#include <cmath>
#include <numbers>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/nn/functional.h"
#include "tessel/nn/layers.h"
#include "tessel/spmd/mark_sharding.h"

namespace tessel::nn {
namespace {

// Box-Muller from two portable uniforms (nn/layers.h UniformDouble), so the same seed gives the
// same parameters with every standard library (std::normal_distribution's algorithm varies).
double NormalDouble(std::mt19937_64& rng, double stddev) {
  const double u1 = UniformDouble(rng, 0, 1), u2 = UniformDouble(rng, 0, 1);
  // 1 - u1 lies in (0, 1], so the log is finite.
  return stddev * std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Literal NormalLiteral(std::vector<int64_t> dims, double stddev, std::mt19937_64& rng) {
  Literal lit(Shape(DType::kF32, std::move(dims)));
  for (int64_t i = 0; i < lit.shape().num_elements(); ++i) {
    lit.SetFromDouble(i, NormalDouble(rng, stddev));
  }
  return lit;
}

Literal FilledLiteral(std::vector<int64_t> dims, double value) {
  Literal lit(Shape(DType::kF32, std::move(dims)));
  for (int64_t i = 0; i < lit.shape().num_elements(); ++i) lit.SetFromDouble(i, value);
  return lit;
}

// x [B, S, in] . w [in, out] + b [out].
Tensor Affine(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = MatMul(x, w);
  return y + Broadcast(b, y.shape().dims(), {y.rank() - 1});
}

}  // namespace

std::string_view PositionEncodingName(PositionEncoding p) {
  return p == PositionEncoding::kLearned ? "learned" : "rotary";
}

absl::StatusOr<PositionEncoding> ParsePositionEncoding(std::string_view name) {
  if (name == "learned") return PositionEncoding::kLearned;
  if (name == "rotary") return PositionEncoding::kRotary;
  return absl::InvalidArgumentError(absl::StrCat("unknown position encoding \"", std::string(name),
                                                 "\"; expected learned or rotary"));
}

std::string_view MlpActivationName(MlpActivation m) {
  return m == MlpActivation::kGelu ? "gelu" : "swiglu";
}

absl::StatusOr<MlpActivation> ParseMlpActivation(std::string_view name) {
  if (name == "gelu") return MlpActivation::kGelu;
  if (name == "swiglu") return MlpActivation::kSwiGlu;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown MLP \"", std::string(name), "\"; expected gelu or swiglu"));
}

absl::Status ValidateGptConfig(const GptConfig& c) {
  // The transformer checks cover the same sizes; "llama" adds the even head_dim rotary needs.
  TransformerConfig t;
  t.arch =
      c.position == PositionEncoding::kRotary ? TransformerArch::kLlama : TransformerArch::kGpt;
  t.layers = c.layers;
  t.d_model = c.d_model;
  t.heads = c.heads;
  t.ffn = c.ffn_size();
  t.vocab = c.vocab;
  t.seq_len = c.seq_len;
  t.batch = 1;
  t.dtype = t.param_dtype = DType::kF32;
  return ValidateTransformerConfig(t);
}

absl::StatusOr<Gpt> Gpt::Create(const GptConfig& config, uint64_t seed) {
  TESSEL_RETURN_IF_ERROR(ValidateGptConfig(config));
  Gpt model(config);
  std::mt19937_64 rng(seed);
  const int64_t d = config.d_model, f = config.ffn_size(), v = config.vocab;
  constexpr double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * static_cast<double>(config.layers));
  auto add = [&](std::string name, WeightKind kind, Literal value) {
    model.params_.push_back({std::move(name), kind, Tensor::FromLiteral(std::move(value))});
    return static_cast<int64_t>(model.params_.size()) - 1;
  };
  auto matrix = [&](std::string name, WeightKind kind, int64_t rows, int64_t cols, double std) {
    return add(std::move(name), kind, NormalLiteral({rows, cols}, std, rng));
  };
  auto vector = [&](std::string name, WeightKind kind, int64_t size, double value) {
    return add(std::move(name), kind, FilledLiteral({size}, value));
  };
  model.wte_ = matrix("wte", WeightKind::kEmbedding, v, d, kStd);
  if (config.position == PositionEncoding::kLearned) {
    model.wpe_ = matrix("wpe", WeightKind::kPosition, config.seq_len, d, kStd);
  } else {
    RotaryTables tables = MakeRotaryTables(config.seq_len, config.head_dim(), DType::kF32);
    model.rotary_cos_ = std::move(tables.cos);
    model.rotary_sin_ = std::move(tables.sin);
  }
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string h = absl::StrCat("h", l, ".");
    Block b;
    b.ln1_gain = vector(h + "ln1.gain", WeightKind::kVector, d, 1);
    b.ln1_bias = vector(h + "ln1.bias", WeightKind::kVector, d, 0);
    b.wq = matrix(h + "attn.wq", WeightKind::kColumn, d, d, kStd);
    b.bq = vector(h + "attn.bq", WeightKind::kColumnBias, d, 0);
    b.wk = matrix(h + "attn.wk", WeightKind::kColumn, d, d, kStd);
    b.bk = vector(h + "attn.bk", WeightKind::kColumnBias, d, 0);
    b.wv = matrix(h + "attn.wv", WeightKind::kColumn, d, d, kStd);
    b.bv = vector(h + "attn.bv", WeightKind::kColumnBias, d, 0);
    b.wo = matrix(h + "attn.wo", WeightKind::kRow, d, d, residual_std);
    b.bo = vector(h + "attn.bo", WeightKind::kVector, d, 0);
    b.ln2_gain = vector(h + "ln2.gain", WeightKind::kVector, d, 1);
    b.ln2_bias = vector(h + "ln2.bias", WeightKind::kVector, d, 0);
    b.w_in = matrix(h + "mlp.w_in", WeightKind::kColumn, d, f, kStd);
    b.b_in = vector(h + "mlp.b_in", WeightKind::kColumnBias, f, 0);
    b.w_gate = b.b_gate = -1;
    if (config.mlp == MlpActivation::kSwiGlu) {
      b.w_gate = matrix(h + "mlp.w_gate", WeightKind::kColumn, d, f, kStd);
      b.b_gate = vector(h + "mlp.b_gate", WeightKind::kColumnBias, f, 0);
    }
    b.w_out = matrix(h + "mlp.w_out", WeightKind::kRow, f, d, residual_std);
    b.b_out = vector(h + "mlp.b_out", WeightKind::kVector, d, 0);
    model.blocks_.push_back(b);
  }
  model.lnf_gain_ = vector("ln_f.gain", WeightKind::kVector, d, 1);
  model.lnf_bias_ = vector("ln_f.bias", WeightKind::kVector, d, 0);
  if (!config.tied_head) model.head_ = matrix("lm_head", WeightKind::kHead, d, v, kStd);
  return model;
}

absl::Status Gpt::Shard(const spmd::Mesh& mesh, const RecipeLayout& layout) {
  if (mesh.size() == 1) return absl::OkStatus();
  for (Param& p : params_) {
    absl::Status s = spmd::mark_sharding(p.value, mesh, WeightPartitionSpec(p.kind, layout));
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(p.name, ": ", s.message()));
  }
  mesh_ = mesh;
  activation_spec_ = BatchPartitionSpec(layout, 3);
  return absl::OkStatus();
}

Tensor Gpt::Constrain(Tensor x) const {
  if (!mesh_.has_value() || !x.status().ok()) return x;
  // Only a batch as large as the full one has the layout's split; a smaller batch (a sample
  // batch of another size) would still shard, so the constraint applies to any batch.
  absl::Status s = spmd::mark_sharding(x, *mesh_, activation_spec_);
  return s.ok() ? x : Tensor::Error(s);
}

Tensor Gpt::BlockForward(const Block& blk, const Tensor& x, const Tensor& cos,
                         const Tensor& sin) const {
  const int64_t h = config_.heads;
  Tensor a = LayerNormalize(x, P(blk.ln1_gain), P(blk.ln1_bias));
  Tensor q = SplitHeads(Affine(a, P(blk.wq), P(blk.bq)), h);
  Tensor k = SplitHeads(Affine(a, P(blk.wk), P(blk.bk)), h);
  Tensor v = SplitHeads(Affine(a, P(blk.wv), P(blk.bv)), h);
  if (config_.position == PositionEncoding::kRotary) {
    q = ApplyRotary(q, cos, sin);
    k = ApplyRotary(k, cos, sin);
  }
  Tensor out = Constrain(x + Affine(CausalSelfAttention(q, k, v), P(blk.wo), P(blk.bo)));
  Tensor m = LayerNormalize(out, P(blk.ln2_gain), P(blk.ln2_bias));
  Tensor hidden = Affine(m, P(blk.w_in), P(blk.b_in));
  if (config_.mlp == MlpActivation::kGelu) {
    hidden = Gelu(hidden);
  } else {
    // SwiGLU: silu(x W_gate) * (x W_in).
    Tensor gate = Affine(m, P(blk.w_gate), P(blk.b_gate));
    hidden = gate * Logistic(gate) * hidden;
  }
  return Constrain(out + Affine(hidden, P(blk.w_out), P(blk.b_out)));
}

Tensor Gpt::Logits(const Tensor& tokens) const {
  if (!tokens.status().ok()) return tokens;
  if (tokens.rank() != 2 || !IsInteger(tokens.dtype()) || tokens.dim(1) <= 0 ||
      tokens.dim(1) > config_.seq_len) {
    return Tensor::Error(absl::InvalidArgumentError(
        absl::StrCat("gpt: tokens must be integer [batch, seq] with 0 < seq <= ", config_.seq_len,
                     ", got ", tokens.shape().ToString())));
  }
  const int64_t b = tokens.dim(0), s = tokens.dim(1), d = config_.d_model;
  // Embedding lookup: one [1, d_model] row of the table per token (XLA gather; its gradient is
  // a scatter-add into the table).
  GatherDimensionNumbers g;
  g.offset_dims = {2};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 2;
  g.slice_sizes = {1, d};
  Tensor x = Gather(P(wte_), tokens, g);  // [B, S, D]
  Tensor cos, sin;
  if (config_.position == PositionEncoding::kLearned) {
    Tensor pos = P(wpe_);
    if (s < config_.seq_len) pos = Slice(pos, {0, 0}, {s, d});
    x = x + Broadcast(pos, {b, s, d}, {1, 2});
  } else {
    // The tables are small constants of the graph ([seq_len, head_dim]), cut to S rows.
    cos = Tensor::Constant(rotary_cos_);
    sin = Tensor::Constant(rotary_sin_);
    if (s < config_.seq_len) {
      cos = Slice(cos, {0, 0}, {s, config_.head_dim()});
      sin = Slice(sin, {0, 0}, {s, config_.head_dim()});
    }
  }
  x = Constrain(x);
  for (const Block& blk : blocks_) x = BlockForward(blk, x, cos, sin);
  x = LayerNormalize(x, P(lnf_gain_), P(lnf_bias_));
  if (config_.tied_head) {
    // logits[b, s, v] = sum_d x[b, s, d] * wte[v, d] (GPT-2's tied head).
    DotDimensionNumbers dn;
    dn.lhs_contracting_dims = {2};
    dn.rhs_contracting_dims = {1};
    return Dot(x, P(wte_), dn);
  }
  return MatMul(x, P(head_));
}

Tensor Gpt::Loss(const Tensor& tokens, const Tensor& labels) const {
  Tensor logits = Logits(tokens);
  if (!logits.status().ok()) return logits;
  if (!labels.status().ok()) return labels;
  if (labels.shape().dims() != tokens.shape().dims()) {
    return Tensor::Error(absl::InvalidArgumentError(
        absl::StrCat("gpt: labels ", labels.shape().ToString(), " do not match tokens ",
                     tokens.shape().ToString())));
  }
  const int64_t n = tokens.dim(0) * tokens.dim(1);
  // Merging [B, S] keeps a batch split on the major dim, so the flattening needs no collective.
  return CrossEntropy(Reshape(logits, {n, config_.vocab}), Reshape(labels, {n}));
}

std::vector<Tensor*> Gpt::parameters() {
  std::vector<Tensor*> out;
  for (Param& p : params_) out.push_back(&p.value);
  return out;
}

std::vector<std::string> Gpt::parameter_names() const {
  std::vector<std::string> out;
  for (const Param& p : params_) out.push_back(p.name);
  return out;
}

std::vector<bool> Gpt::DecayMask() const {
  std::vector<bool> out;
  for (const Param& p : params_) {
    out.push_back(p.kind == WeightKind::kColumn || p.kind == WeightKind::kRow ||
                  p.kind == WeightKind::kEmbedding || p.kind == WeightKind::kHead);
  }
  return out;
}

int64_t Gpt::num_parameters() const {
  int64_t n = 0;
  for (const Param& p : params_) n += p.value.shape().num_elements();
  return n;
}

}  // namespace tessel::nn
