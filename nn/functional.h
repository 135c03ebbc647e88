// Stateless neural-network functions on lazy tensors: activations, normalization, losses.
//
//   Tensor h = Relu(MatMul(x, w) + b);                      // f32[B,512]
//   Tensor logits = MatMul(h, w2);                          // f32[B,10]
//   Tensor loss = CrossEntropy(logits, labels);             // f32[], labels s32[B]
//   Tensor correct = NumCorrect(logits, labels);            // f32[], argmax hits
//
// Every function only records graph nodes (core/tensor.h): nothing runs until Sync or
// ToLiteral, and gradients come from tessel::Grad through the recorded ops. The functions work
// for any floating dtype (f32 in training, f64 in the gradient tests).
//
// Errors: as every lazy op, a bad argument (wrong rank, dim out of range, mismatched batch)
// gives a tensor holding kInvalidArgument with a message naming the function; errored inputs
// propagate their first error. Nothing here aborts.
#ifndef TESSEL_NN_FUNCTIONAL_H_
#define TESSEL_NN_FUNCTIONAL_H_

#include <cstdint>

#include "tessel/core/literal.h"
#include "tessel/core/tensor.h"

namespace tessel::nn {

// max(x, 0), elementwise, any shape. Recorded as select(x > 0, x, 0) so the gradient is 1 where
// x > 0 and 0 elsewhere, x == 0 included (as PyTorch's relu).
Tensor Relu(const Tensor& x);

// GELU with the tanh approximation (PyTorch `gelu(approximate="tanh")`, GPT-2):
//   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
// Elementwise, any shape. Source: Hendrycks & Gimpel 2016, "Gaussian Error Linear Units".
Tensor Gelu(const Tensor& x);

// Softmax along `dim` (negative counts from the end; default the last dim):
//   exp(x - max) / sum(exp(x - max)), the max-shifted form, stable for large |x|.
// Same shape as x. Errors: kInvalidArgument if `dim` is outside [-rank, rank) or x is a scalar.
Tensor Softmax(const Tensor& x, int64_t dim = -1);

// log(softmax(x)) along `dim`, computed as (x - max) - log(sum(exp(x - max))) so it stays finite
// where softmax underflows. Same shape and errors as Softmax.
Tensor LogSoftmax(const Tensor& x, int64_t dim = -1);

// Layer normalization over the last dim (PyTorch nn.LayerNorm with normalized_shape = [D]):
//   (x - mean) / sqrt(var + eps) * gain + bias, with the biased variance (divide by D).
// Shapes: x [..., D], gain [D], bias [D]; result x's shape. eps is added to the variance.
// Errors: kInvalidArgument if x is a scalar or gain/bias are not [D].
// Source: Ba, Kiros & Hinton 2016, "Layer Normalization".
Tensor LayerNormalize(const Tensor& x, const Tensor& gain, const Tensor& bias, double eps = 1e-5);

// Splits the last dim of x [B, S, n*Dh] into n heads: result [B, n, S, Dh] (reshape to
// [B, S, n, Dh], then transpose). The head index is the major part of the split dim, so a
// Megatron (column) split of the projection over t devices gives each device whole heads when t
// divides n. Errors: kInvalidArgument if x is not rank 3 or n does not divide its last dim.
Tensor SplitHeads(const Tensor& x, int64_t heads);

// Rotary position embedding (Su et al. 2021, RoFormer) on x [B, H, S, Dh] with tables
// cos, sin [S, Dh]: x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., Dh/2:],
// x[..., :Dh/2]): the rotate-half convention of GPT-NeoX and Hugging Face Llama (halves, not
// interleaved pairs), so each frequency appears in both halves of a table row.
// Errors: kInvalidArgument if x is not rank 4 with an even Dh or the tables are not [S, Dh].
Tensor ApplyRotary(const Tensor& x, const Tensor& cos, const Tensor& sin);

// The tables ApplyRotary takes, as literals of `dtype` (f32 or f64), [seq_len, head_dim]:
// angle(s, i) = s * base^(-2 (i mod Dh/2) / Dh), cos and sin of it (computed in double).
// Precondition: seq_len > 0, head_dim > 0 and even (TESSEL_CHECK).
struct RotaryTables {
  Literal cos;
  Literal sin;
};
RotaryTables MakeRotaryTables(int64_t seq_len, int64_t head_dim, DType dtype, double base = 10000);

// Causal (grouped-query) self-attention: q [B, H, S, Dh], k and v [B, KV, S, Dh] with KV
// dividing H; result [B, S, H*Dh] in q's dtype. softmax(q k^T / sqrt(Dh) + causal mask) v, with
// query position i attending to keys 0..i. Key/value heads are repeated H/KV times (Llama's
// repeat_kv); in bf16/f16 the softmax runs in f32 (Megatron's attention_softmax_in_fp32). Batch and
// heads are the dots' batch dims, so heads split over a tensor axis stay split with no collective.
// `sliding_window` W > 0 also masks keys W or more positions back (query i sees keys i-W+1..i,
// Mistral's sliding-window attention); 0 is full causal attention.
// Errors: kInvalidArgument on ranks or mismatched dims, or a negative window.
// Source: Vaswani et al. 2017; Ainslie et al. 2023 (GQA); Jiang et al. 2023 (Mistral 7B).
Tensor CausalSelfAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                           int64_t sliding_window = 0);

// One-hot encoding: result[b, c] = (labels[b] == c) as `dtype`. labels: integer [B]; result
// [B, num_classes]. Out-of-range labels give an all-zero row. Built from compare(broadcast(labels),
// iota) (no gather). Errors: kInvalidArgument if labels is not an integer rank-1 tensor.
Tensor OneHot(const Tensor& labels, int64_t num_classes, DType dtype);

// Mean cross-entropy of `logits` against integer class labels (PyTorch
// `F.cross_entropy(logits, labels)` with reduction="mean"):
//   -(1/B) * sum_b log_softmax(logits)[b, labels[b]].
// Shapes: logits [B, C] floating, labels [B] s32 or s64; result a scalar of logits' dtype.
// Labels must lie in [0, C): the graph does not check them (an out-of-range label contributes
// 0 to the sum); the data loader validates labels when it reads them.
// Errors: kInvalidArgument on ranks, dtypes or a batch mismatch.
Tensor CrossEntropy(const Tensor& logits, const Tensor& labels);

// Number of rows whose label is an argmax of its logits: a scalar of logits' dtype, in [0, B].
// A row where several classes tie for the maximum counts as correct when the label is one of
// them. Shapes and errors as CrossEntropy. No gradient is meant to flow through it.
Tensor NumCorrect(const Tensor& logits, const Tensor& labels);

}  // namespace tessel::nn

#endif  // TESSEL_NN_FUNCTIONAL_H_
