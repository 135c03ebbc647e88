// Layers with parameters: Linear, LayerNorm, and the Mlp builder.
//
//   absl::StatusOr<Mlp> mlp = Mlp::Create({784, 512, 256, 10}, /*seed=*/0);
//   Tensor logits = mlp->Forward(images);                 // f32[B,784] -> f32[B,10]
//   std::vector<Tensor*> params = mlp->parameters();      // w0, b0, w1, b1, w2, b2
//
// Parameters are device-data Tensors (Tensor::FromLiteral). A training step builds the forward
// graph lazily, takes Grad(loss, params), lets an optimizer (nn/optim.h) replace each parameter
// with its updated (lazy) value through the pointers of parameters(), then Sync() runs the
// whole step as one graph (PyTorch/XLA style, see nn/train.h).
//
// Initialization is host-side and deterministic: a std::mt19937_64 seeded by the caller, with
// uniform draws made from its raw 64-bit output (not std::uniform_real_distribution, whose
// algorithm varies between standard libraries), so the same seed gives the same parameters on
// every platform.
#ifndef TESSEL_NN_LAYERS_H_
#define TESSEL_NN_LAYERS_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/tensor.h"

namespace tessel::nn {

// Something with a forward function and trainable parameters.
class Module {
 public:
  virtual ~Module() = default;
  // Records the forward computation on `x` (lazily) and returns its result.
  virtual Tensor Forward(const Tensor& x) const = 0;
  // Pointers to the parameter tensors, in a fixed order. Optimizers assign new values through
  // them. The pointers stay valid as long as the module is alive and not moved.
  virtual std::vector<Tensor*> parameters() = 0;
};

// A uniform draw in [low, high) from the top 53 bits of one mt19937_64 output (portable).
double UniformDouble(std::mt19937_64& rng, double low, double high);

// Fully connected layer: y = x @ weight + bias.
//
// Shapes: weight f32[in_features, out_features] (note: transposed with respect to PyTorch's
// [out, in] storage, so the forward pass is a plain matmul), bias f32[out_features];
// x [..., in_features] -> y [..., out_features].
// Initialization (PyTorch nn.Linear default, i.e. kaiming_uniform_(a=sqrt(5))): weight and bias
// both U(-1/sqrt(in_features), 1/sqrt(in_features)), drawn from `rng` in order: the weight
// row-major, then the bias.
class Linear : public Module {
 public:
  // Precondition: in_features > 0 and out_features > 0 (TESSEL_CHECK; Mlp::Create validates
  // user-given sizes before it gets here).
  Linear(int64_t in_features, int64_t out_features, std::mt19937_64& rng);
  // A layer with the given parameters (weight [in, out], bias [out]); for tests and loading.
  Linear(Tensor weight, Tensor bias);

  // Errors (in the returned tensor): kInvalidArgument if x's last dim is not in_features.
  Tensor Forward(const Tensor& x) const override;
  std::vector<Tensor*> parameters() override { return {&weight_, &bias_}; }

  int64_t in_features() const { return weight_.dim(0); }
  int64_t out_features() const { return weight_.dim(1); }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  Tensor weight_;
  Tensor bias_;
};

// Layer normalization over the last dim with a learned gain (init 1) and bias (init 0), as
// PyTorch nn.LayerNorm(features, eps). See LayerNormalize in nn/functional.h.
// Shapes: x [..., features] -> same; gain and bias f32[features].
class LayerNorm : public Module {
 public:
  // Precondition: features > 0 (TESSEL_CHECK).
  explicit LayerNorm(int64_t features, double eps = 1e-5);

  Tensor Forward(const Tensor& x) const override;
  std::vector<Tensor*> parameters() override { return {&gain_, &bias_}; }

  double eps() const { return eps_; }
  Tensor& gain() { return gain_; }
  Tensor& bias() { return bias_; }

 private:
  Tensor gain_;
  Tensor bias_;
  double eps_;
};

// The activation applied between the layers of an Mlp.
enum class Activation { kRelu, kGelu };

// Multi-layer perceptron: Linear layers of sizes layer_sizes[0] -> layer_sizes[1] -> ... with
// the activation between consecutive layers and none after the last (the output is logits).
// Example: {784, 512, 256, 10} gives 784-512-256-10 with two ReLUs, 535,818 parameters.
class Mlp : public Module {
 public:
  // Builds the layers, initializing them in order from one std::mt19937_64(seed).
  // Errors: kInvalidArgument if fewer than 2 sizes are given or any size is not positive
  // (the message lists the sizes).
  [[nodiscard]] static absl::StatusOr<Mlp> Create(const std::vector<int64_t>& layer_sizes,
                                                  uint64_t seed,
                                                  Activation activation = Activation::kRelu);

  // x [..., layer_sizes.front()] -> [..., layer_sizes.back()].
  Tensor Forward(const Tensor& x) const override;
  // weight and bias of layer 0, then of layer 1, ...
  std::vector<Tensor*> parameters() override;

  const std::vector<Linear>& layers() const { return layers_; }
  std::vector<Linear>& layers() { return layers_; }
  // Total number of scalar parameters.
  int64_t num_parameters() const;

 private:
  Mlp(std::vector<Linear> layers, Activation activation)
      : layers_(std::move(layers)), activation_(activation) {}

  std::vector<Linear> layers_;
  Activation activation_;
};

}  // namespace tessel::nn

#endif  // TESSEL_NN_LAYERS_H_
