// Optimizers: SGD with momentum and Adam, as lazy graph updates.
//
//   std::vector<Tensor*> params = model.parameters();
//   Adam adam({.lr = 1e-3});
//   std::vector<Tensor> grads = Grad(loss, {*params[0], *params[1], ...});
//   TESSEL_RETURN_IF_ERROR(adam.Step(params, grads));   // *params[i] is now a lazy update
//   TESSEL_RETURN_IF_ERROR(Sync());                     // one graph: forward, backward, update
//
// Step records the update ops and assigns the new values through the parameter pointers; its
// optimizer state (momentum buffers, Adam moments) is likewise replaced by lazy tensors, which
// the next Sync turns into device data. The recorded graph is the same at every step: the
// learning rate and Adam's bias-correction factors, which change between steps, enter as scalar
// device data (Tensor::FromLiteral), not as constants, so the compilation cache hits from the
// second step on. Hyperparameters that never change (momentum, betas, eps, weight decay) are
// graph constants.
//
// Parameters may be any floating dtype; each update is computed in the parameter's dtype.
#ifndef TESSEL_NN_OPTIM_H_
#define TESSEL_NN_OPTIM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tessel::nn {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Records one update of every `*params[i]` with gradient `grads[i]` and assigns the updated
  // (pending) tensor to `*params[i]`. The first call fixes the number, order and shapes of the
  // parameters; optimizer state is kept per position.
  // Errors: kInvalidArgument if params and grads differ in length or shape, a parameter is not
  // floating point, or they differ from the first call's; a gradient's own error status is
  // returned as is. On error nothing is assigned.
  [[nodiscard]] virtual absl::Status Step(absl::Span<Tensor* const> params,
                                          absl::Span<const Tensor> grads) = 0;

  // Learning rate used by the next Step. Changing it does not change the graph.
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  // Steps taken so far.
  int64_t step_count() const { return step_count_; }

 protected:
  explicit Optimizer(double lr) : lr_(lr) {}
  // Checks `params` and `grads` against each other and against the shapes recorded on the
  // first call (recording them then).
  [[nodiscard]] absl::Status CheckArguments(const char* name, absl::Span<Tensor* const> params,
                                            absl::Span<const Tensor> grads);

  double lr_;
  int64_t step_count_ = 0;
  std::vector<Shape> shapes_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;      // 0 disables the momentum buffer
  double weight_decay = 0;  // L2 penalty added to the gradient
};

// Stochastic gradient descent with (heavy-ball) momentum, as PyTorch torch.optim.SGD with
// dampening 0 and nesterov false:
//   g = grad + weight_decay * p
//   buf = momentum * buf + g          (buf starts at 0, so the first step has buf = g)
//   p = p - lr * buf
// Source: Sutskever et al. 2013; PyTorch torch.optim.SGD.
class Sgd : public Optimizer {
 public:
  explicit Sgd(SgdOptions options) : Optimizer(options.lr), options_(options) {}

  [[nodiscard]] absl::Status Step(absl::Span<Tensor* const> params,
                                  absl::Span<const Tensor> grads) override;

  const SgdOptions& options() const { return options_; }
  // The momentum buffers (empty until the first Step, or when momentum is 0).
  const std::vector<Tensor>& momentum_buffers() const { return buffers_; }

 private:
  SgdOptions options_;
  std::vector<Tensor> buffers_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // L2 penalty added to the gradient (torch.optim.Adam, not AdamW)
};

// Adam with bias correction, in PyTorch's torch.optim.Adam formulation. At step t (1, 2, ...):
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// m and v start at 0. t is a host-side counter; lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t)
// are computed in double on the host and fed as scalar data of the parameter's dtype.
// Source: Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization"; PyTorch
// torch.optim.Adam (eps added after the bias-corrected square root).
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options) : Optimizer(options.lr), options_(options) {}

  [[nodiscard]] absl::Status Step(absl::Span<Tensor* const> params,
                                  absl::Span<const Tensor> grads) override;

  const AdamOptions& options() const { return options_; }
  // First and second moment estimates (empty until the first Step).
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }

 private:
  AdamOptions options_;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
};

}  // namespace tessel::nn

#endif  // TESSEL_NN_OPTIM_H_
