#include "tessel/nn/layers.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"
#include "tessel/nn/functional.h"

namespace tessel::nn {

double UniformDouble(std::mt19937_64& rng, double low, double high) {
  // 53 random mantissa bits -> [0, 1) exactly representable, the same on every platform.
  const double unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return low + (high - low) * unit;
}

namespace {

// Drawn in double and rounded to f32 once, element by element in row-major order: the draw
// order is part of the reproducibility contract (same seed, same parameters everywhere).
Literal UniformLiteral(std::vector<int64_t> dims, double bound, std::mt19937_64& rng) {
  Literal lit = Literal::Uninitialized(Shape(DType::kF32, std::move(dims)));
  for (float& v : lit.data<float>()) v = static_cast<float>(UniformDouble(rng, -bound, bound));
  return lit;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, std::mt19937_64& rng) {
  TESSEL_CHECK(in_features > 0 && out_features > 0);
  // kaiming_uniform_(a=sqrt(5)) works out to 1/sqrt(fan_in), the same bound PyTorch uses for
  // the bias, so one bound serves both.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = Tensor::FromLiteral(UniformLiteral({in_features, out_features}, bound, rng));
  bias_ = Tensor::FromLiteral(UniformLiteral({out_features}, bound, rng));
}

Linear::Linear(Tensor weight, Tensor bias) : weight_(std::move(weight)), bias_(std::move(bias)) {}

Tensor Linear::Forward(const Tensor& x) const {
  if (!x.status().ok()) return x;
  // Checked here so the message names the layer's sizes; MatMul would only report a dim
  // mismatch.
  if (x.rank() == 0 || x.dim(x.rank() - 1) != in_features()) {
    return Tensor::Error(absl::InvalidArgumentError(absl::StrCat(
        "linear: input ", x.shape().ToString(), " does not end in in_features=", in_features(),
        " (weight ", weight_.shape().ToString(), ")")));
  }
  Tensor y = MatMul(x, weight_);
  if (!y.status().ok()) return y;
  // The bias maps onto the last dim of y, whatever the leading (batch, sequence) dims are.
  return y + Broadcast(bias_, y.shape().dims(), {y.rank() - 1});
}

LayerNorm::LayerNorm(int64_t features, double eps) : eps_(eps) {
  TESSEL_CHECK(features > 0);
  // PyTorch's init: gain 1 and bias 0, so a fresh layer only normalizes. No rng is drawn, so
  // adding a LayerNorm does not shift the initial values of the layers built after it.
  Literal ones(Shape(DType::kF32, {features}));
  for (float& v : ones.data<float>()) v = 1.0f;
  gain_ = Tensor::FromLiteral(std::move(ones));
  bias_ = Tensor::FromLiteral(Literal(Shape(DType::kF32, {features})));
}

Tensor LayerNorm::Forward(const Tensor& x) const { return LayerNormalize(x, gain_, bias_, eps_); }

absl::StatusOr<Mlp> Mlp::Create(const std::vector<int64_t>& layer_sizes, uint64_t seed,
                                Activation activation) {
  bool valid = layer_sizes.size() >= 2;
  for (int64_t size : layer_sizes) valid = valid && size > 0;
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: layer sizes must be at least 2 positive numbers, got [",
                     absl::StrJoin(layer_sizes, ", "), "]"));
  }
  // One generator for all layers, consumed in layer order, so layer i's values depend on the
  // seed and on the sizes of the layers before it, as with torch.manual_seed before building.
  std::mt19937_64 rng(seed);
  std::vector<Linear> layers;
  for (size_t i = 0; i + 1 < layer_sizes.size(); ++i) {
    layers.emplace_back(layer_sizes[i], layer_sizes[i + 1], rng);
  }
  return Mlp(std::move(layers), activation);
}

Tensor Mlp::Forward(const Tensor& x) const {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i].Forward(h);
    // No activation after the last layer: its output is the logits CrossEntropy expects.
    if (i + 1 < layers_.size()) h = activation_ == Activation::kRelu ? Relu(h) : Gelu(h);
  }
  return h;
}

std::vector<Tensor*> Mlp::parameters() {
  std::vector<Tensor*> params;
  for (Linear& layer : layers_) {
    for (Tensor* p : layer.parameters()) params.push_back(p);
  }
  return params;
}

int64_t Mlp::num_parameters() const {
  int64_t total = 0;
  for (const Linear& layer : layers_) {
    total += layer.weight().shape().num_elements() + layer.bias().shape().num_elements();
  }
  return total;
}

}  // namespace tessel::nn
