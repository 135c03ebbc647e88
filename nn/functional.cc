#include "nn/functional.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

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
