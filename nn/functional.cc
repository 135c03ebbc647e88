#include "tessel/nn/functional.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {

namespace {

Tensor InvalidArgument(const std::string& message) {
  return Tensor::Error(absl::InvalidArgumentError(message));
}

// All dims of a rank-`rank` tensor except `dim`, in increasing order.
std::vector<int64_t> DimsWithout(int64_t rank, int64_t dim) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) kept.push_back(d);
  }
  return kept;
}

// Broadcasts `reduced` (x reduced over `dim`) back to x's shape. Explicit, because elementwise
// ops take operands of identical shape (XLA semantics, no implicit numpy broadcasting).
Tensor ExpandAlong(const Tensor& reduced, const Tensor& x, int64_t dim) {
  return Broadcast(reduced, x.shape().dims(), DimsWithout(x.rank(), dim));
}

// Resolves a possibly negative `dim` of x; returns an error tensor through `error` if invalid.
bool ResolveDim(const char* op, const Tensor& x, int64_t& dim, Tensor& error) {
  if (x.rank() == 0) {
    error = InvalidArgument(
        absl::StrCat(op, ": expected a tensor of rank >= 1, got ", x.shape().ToString()));
    return false;
  }
  int64_t resolved = dim < 0 ? dim + x.rank() : dim;
  if (resolved < 0 || resolved >= x.rank()) {
    error = InvalidArgument(
        absl::StrCat(op, ": dim ", dim, " is out of range for ", x.shape().ToString()));
    return false;
  }
  dim = resolved;
  return true;
}

// x - max(x) along dim (the shift that keeps exp finite).
Tensor Shifted(const Tensor& x, int64_t dim) {
  return x - ExpandAlong(ReduceMax(x, {dim}), x, dim);
}

// Checks logits [B, C] floating and labels [B] integer; sets `error` otherwise. Done before any
// op is recorded, so a bad call leaves no half-built graph and names the loss, not an inner op.
bool CheckClassification(const char* op, const Tensor& logits, const Tensor& labels,
                         Tensor& error) {
  if (!logits.status().ok()) {
    error = logits;
    return false;
  }
  if (!labels.status().ok()) {
    error = labels;
    return false;
  }
  if (logits.rank() != 2 || !IsFloating(logits.dtype())) {
    error = InvalidArgument(absl::StrCat(op, ": logits must be floating [batch, classes], got ",
                                         logits.shape().ToString()));
    return false;
  }
  if (labels.rank() != 1 || !IsInteger(labels.dtype())) {
    error = InvalidArgument(
        absl::StrCat(op, ": labels must be integer [batch], got ", labels.shape().ToString()));
    return false;
  }
  if (labels.dim(0) != logits.dim(0)) {
    error = InvalidArgument(absl::StrCat(op, ": labels ", labels.shape().ToString(),
                                         " do not match the batch of logits ",
                                         logits.shape().ToString()));
    return false;
  }
  return true;
}

}  // namespace

// Every function first passes an errored input through unchanged, so the first error of a
// chain reaches the caller, not a follow-up complaint about its shape.
Tensor Relu(const Tensor& x) {
  if (!x.status().ok()) return x;
  Tensor zeros = Zeros(x.shape());
  return Select(Compare(x, zeros, ComparisonDirection::kGt), x, zeros);
}

Tensor Gelu(const Tensor& x) {
  if (!x.status().ok()) return x;
  // Computed in double and applied as a scalar in x's dtype, so f32 and f64 graphs get the
  // constant at their own precision.
  const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
  Tensor inner = (x + x * x * x * 0.044715) * kSqrt2OverPi;
  return x * 0.5 * (Tanh(inner) + 1.0);
}

Tensor Softmax(const Tensor& x, int64_t dim) {
  if (!x.status().ok()) return x;
  Tensor error;
  if (!ResolveDim("softmax", x, dim, error)) return error;
  Tensor e = Exp(Shifted(x, dim));
  return e / ExpandAlong(ReduceSum(e, {dim}), x, dim);
}

Tensor LogSoftmax(const Tensor& x, int64_t dim) {
  if (!x.status().ok()) return x;
  Tensor error;
  if (!ResolveDim("log_softmax", x, dim, error)) return error;
  // The sum includes exp(0) = 1 from the max element, so the log never sees 0.
  Tensor shifted = Shifted(x, dim);
  Tensor log_sum = Log(ReduceSum(Exp(shifted), {dim}));
  return shifted - ExpandAlong(log_sum, x, dim);
}

Tensor LayerNormalize(const Tensor& x, const Tensor& gain, const Tensor& bias, double eps) {
  for (const Tensor* t : {&x, &gain, &bias}) {
    if (!t->status().ok()) return *t;
  }
  if (x.rank() == 0) {
    return InvalidArgument(
        absl::StrCat("layer_norm: expected x of rank >= 1, got ", x.shape().ToString()));
  }
  const int64_t last = x.rank() - 1;
  const std::vector<int64_t> feature_dims = {x.dim(last)};
  if (gain.shape().dims() != feature_dims || bias.shape().dims() != feature_dims) {
    return InvalidArgument(absl::StrCat("layer_norm: gain ", gain.shape().ToString(), " and bias ",
                                        bias.shape().ToString(), " must both be [", x.dim(last),
                                        "] for x ", x.shape().ToString()));
  }
  // Two passes (mean, then the mean of squared deviations) rather than E[x^2] - E[x]^2, which
  // cancels catastrophically when the mean is large next to the spread.
  Tensor centered = x - ExpandAlong(ReduceMean(x, {last}), x, last);
  Tensor variance = ReduceMean(centered * centered, {last});
  Tensor normalized = centered * ExpandAlong(Rsqrt(variance + eps), x, last);
  const std::vector<int64_t>& dims = x.shape().dims();
  return normalized * Broadcast(gain, dims, {last}) + Broadcast(bias, dims, {last});
}

Tensor SplitHeads(const Tensor& x, int64_t heads) {
  if (!x.status().ok()) return x;
  if (x.rank() != 3 || heads <= 0 || x.dim(2) % heads != 0) {
    return InvalidArgument(absl::StrCat("split_heads: expected x [B, S, heads*Dh] with ", heads,
                                        " heads, got ", x.shape().ToString()));
  }
  const int64_t b = x.dim(0), s = x.dim(1), dh = x.dim(2) / heads;
  return Transpose(Reshape(x, {b, s, heads, dh}), {0, 2, 1, 3});
}

Tensor ApplyRotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  for (const Tensor* t : {&x, &cos, &sin}) {
    if (!t->status().ok()) return *t;
  }
  if (x.rank() != 4 || x.dim(3) % 2 != 0 ||
      cos.shape().dims() != std::vector<int64_t>{x.dim(2), x.dim(3)} ||
      sin.shape().dims() != cos.shape().dims()) {
    return InvalidArgument(absl::StrCat(
        "rotary: expected x [B, H, S, Dh] with an even Dh and "
        "tables [S, Dh], got x ",
        x.shape().ToString(), ", cos ", cos.shape().ToString(), ", sin ", sin.shape().ToString()));
  }
  const std::vector<int64_t>& dims = x.shape().dims();
  const int64_t dh = dims[3], half = dh / 2;
  Tensor lo = Slice(x, {0, 0, 0, 0}, {dims[0], dims[1], dims[2], half});
  Tensor hi = Slice(x, {0, 0, 0, half}, {dims[0], dims[1], dims[2], dh});
  Tensor rotated = Concatenate({-hi, lo}, 3);
  return x * Broadcast(cos, dims, {2, 3}) + rotated * Broadcast(sin, dims, {2, 3});
}

RotaryTables MakeRotaryTables(int64_t seq_len, int64_t head_dim, DType dtype, double base) {
  TESSEL_CHECK(seq_len > 0 && head_dim > 0 && head_dim % 2 == 0);
  TESSEL_CHECK(dtype == DType::kF32 || dtype == DType::kF64);
  const int64_t half = head_dim / 2;
  std::vector<double> cos(seq_len * head_dim), sin(seq_len * head_dim);
  for (int64_t s = 0; s < seq_len; ++s) {
    for (int64_t i = 0; i < head_dim; ++i) {
      const double inv_freq =
          std::pow(base, -2.0 * static_cast<double>(i % half) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(s) * inv_freq;
      cos[s * head_dim + i] = std::cos(angle);
      sin[s * head_dim + i] = std::sin(angle);
    }
  }
  auto as = [&](const std::vector<double>& v) {
    if (dtype == DType::kF64) return Literal::FromVector<double>({seq_len, head_dim}, v);
    std::vector<float> f(v.begin(), v.end());
    return Literal::FromVector<float>({seq_len, head_dim}, f);
  };
  return {as(cos), as(sin)};
}

Tensor CausalSelfAttention(const Tensor& q, const Tensor& k_in, const Tensor& v_in,
                           int64_t sliding_window) {
  for (const Tensor* t : {&q, &k_in, &v_in}) {
    if (!t->status().ok()) return *t;
  }
  if (q.rank() != 4 || k_in.rank() != 4 || k_in.shape().dims() != v_in.shape().dims() ||
      k_in.dim(0) != q.dim(0) || k_in.dim(2) != q.dim(2) || k_in.dim(3) != q.dim(3) ||
      k_in.dim(1) <= 0 || q.dim(1) % k_in.dim(1) != 0) {
    return InvalidArgument(absl::StrCat(
        "causal_self_attention: expected q [B, H, S, Dh] and k, v [B, KV, S, Dh] with KV "
        "dividing H, got q ",
        q.shape().ToString(), ", k ", k_in.shape().ToString(), ", v ", v_in.shape().ToString()));
  }
  if (sliding_window < 0) {
    return InvalidArgument(
        absl::StrCat("causal_self_attention: sliding_window must be >= 0, got ", sliding_window));
  }
  const int64_t b = q.dim(0), h = q.dim(1), s = q.dim(2), dh = q.dim(3), kv = k_in.dim(1);
  Tensor k = k_in, v = v_in;
  if (kv != h) {
    // The group dim goes right after the kv dim, so merging them makes query head j read kv
    // head j / group (Llama's repeat_kv).
    const int64_t group = h / kv;
    k = Reshape(Broadcast(k, {b, kv, group, s, dh}, {0, 1, 3, 4}), {b, h, s, dh});
    v = Reshape(Broadcast(v, {b, kv, group, s, dh}, {0, 1, 3, 4}), {b, h, s, dh});
  }
  DotDimensionNumbers qk;
  qk.lhs_batch_dims = qk.rhs_batch_dims = {0, 1};
  qk.lhs_contracting_dims = {3};
  qk.rhs_contracting_dims = {3};
  Tensor scores = Dot(q, k, qk) * (1.0 / std::sqrt(static_cast<double>(dh)));  // [B,H,S,S]
  // Causal mask from two iotas (query index >= key index): elementwise, so it shards like the
  // scores with no collective, and no [S, S] constant is stored. Masked scores get -1e9: after
  // the max shift their exp underflows to 0. Every row keeps its diagonal key, so no row is
  // fully masked and the softmax never divides by zero.
  Shape mask_shape(DType::kS32, {b, h, s, s});
  Tensor causal = Compare(Iota(mask_shape, 2), Iota(mask_shape, 3), ComparisonDirection::kGe);
  if (sliding_window > 0) {
    Tensor distance = Iota(mask_shape, 2) - Iota(mask_shape, 3);
    Tensor near = Compare(distance, Full(mask_shape, static_cast<double>(sliding_window)),
                          ComparisonDirection::kLt);
    causal = And(causal, near);
  }
  Tensor neg = Full(scores.shape(), -1e9);
  Tensor masked = Select(causal, scores, neg);
  // Narrow dtypes (bf16, f16) take the softmax in f32; f32 and f64 keep their own precision.
  if (ByteWidth(masked.dtype()) < 4) masked = Convert(masked, DType::kF32);
  Tensor probs = Softmax(masked, -1);
  if (probs.dtype() != q.dtype()) probs = Convert(probs, q.dtype());
  DotDimensionNumbers pv;
  pv.lhs_batch_dims = pv.rhs_batch_dims = {0, 1};
  pv.lhs_contracting_dims = {3};
  pv.rhs_contracting_dims = {2};
  Tensor context = Dot(probs, v, pv);  // [B, H, S, Dh]
  return Reshape(Transpose(context, {0, 2, 1, 3}), {b, s, h * dh});
}

Tensor OneHot(const Tensor& labels, int64_t num_classes, DType dtype) {
  if (!labels.status().ok()) return labels;
  if (labels.rank() != 1 || !IsInteger(labels.dtype())) {
    return InvalidArgument(
        absl::StrCat("one_hot: labels must be integer [batch], got ", labels.shape().ToString()));
  }
  if (num_classes <= 0) {
    return InvalidArgument(
        absl::StrCat("one_hot: num_classes must be positive, got ", num_classes));
  }
  // The iota takes the labels' integer dtype so the compare needs no convert; the IR has no
  // gather, and compare(broadcast, iota) is elementwise, so a batch-sharded one-hot needs no
  // collective.
  std::vector<int64_t> dims = {labels.dim(0), num_classes};
  Tensor classes = Iota(Shape(labels.dtype(), dims), 1);
  Tensor hit = Compare(Broadcast(labels, dims, {0}), classes, ComparisonDirection::kEq);
  return Convert(hit, dtype);
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& labels) {
  Tensor error;
  if (!CheckClassification("cross_entropy", logits, labels, error)) return error;
  // Summing one_hot * log_softmax picks each row's label term; the division uses the global
  // batch size, so a batch-sharded loss is the sum's all-reduce divided once.
  Tensor one_hot = OneHot(labels, logits.dim(1), logits.dtype());
  Tensor picked = ReduceSum(one_hot * LogSoftmax(logits, 1), {0, 1});
  return -picked / static_cast<double>(logits.dim(0));
}

Tensor NumCorrect(const Tensor& logits, const Tensor& labels) {
  Tensor error;
  if (!CheckClassification("num_correct", logits, labels, error)) return error;
  Tensor one_hot = OneHot(labels, logits.dim(1), logits.dtype());
  // Exact equality is safe here: the max is one of the row's own values, not a recomputation.
  Tensor is_max =
      Compare(logits, ExpandAlong(ReduceMax(logits, {1}), logits, 1), ComparisonDirection::kEq);
  // 1 per row when the label's logit equals the row maximum.
  Tensor row_hit = ReduceSum(one_hot * Convert(is_max, logits.dtype()), {1});
  return ReduceSum(row_hit, {0});
}

}  // namespace tessel::nn
