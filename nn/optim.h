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
#include "tessel/core/tensor.h"

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
  // torch.optim.Adam: an L2 penalty added to the gradient. With decoupled_weight_decay
  // (torch.optim.AdamW): the parameter shrinks by lr * weight_decay * p before the Adam update.
  double weight_decay = 0;
  bool decoupled_weight_decay = false;
  // Which parameters (by position) weight decay applies to; empty: all. GPT training decays the
  // matrices only, not biases, norm gains or position tables (Radford et al.; nanoGPT).
  std::vector<bool> decay_mask = {};
};

// Adam with bias correction, in PyTorch's torch.optim.Adam formulation. At step t (1, 2, ...):
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// m and v start at 0. t is a host-side counter; lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t)
// are computed in double on the host and fed as scalar data of the parameter's dtype.
// With decoupled_weight_decay (AdamW) the first line is instead
//   p = p * (1 - lr * weight_decay)       (lr of this step, fed as scalar data)
// and g = grad. decay_mask, when given, must have one entry per parameter (else
// kInvalidArgument from Step).
// Source: Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization"; PyTorch
// torch.optim.Adam (eps added after the bias-corrected square root); Loshchilov & Hutter 2019,
// "Decoupled Weight Decay Regularization" (torch.optim.AdamW).
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options) : Optimizer(options.lr), options_(options) {}

  [[nodiscard]] absl::Status Step(absl::Span<Tensor* const> params,
                                  absl::Span<const Tensor> grads) override;

  const AdamOptions& options() const { return options_; }
  // First and second moment estimates (empty until the first Step).
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }

  // Restores the state of an earlier run (a checkpoint): the moments, one per parameter in the
  // order of Step's `params`, and the number of steps taken (t of the bias corrections is
  // step_count + 1 at the next Step). The next Step continues exactly where that run was.
  // Errors: kInvalidArgument if m and v differ in length or shape, a moment's status is an
  // error, or step_count < 0; the state is unchanged then.
  [[nodiscard]] absl::Status SetState(std::vector<Tensor> m, std::vector<Tensor> v,
                                      int64_t step_count);

 private:
  AdamOptions options_;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
};

// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_ with norm_type 2):
//   total_norm = sqrt(sum_i sum(g_i^2)),  coef = min(1, max_norm / (total_norm + 1e-6)),
//   g_i = g_i * coef.
// Recorded lazily: the norm and the scaling join the step graph (no extra execution, no host
// round trip). Shapes: each gradient keeps its shape; total_norm is a scalar of the first
// gradient's dtype (every gradient is converted to it for the sum).
// Errors: a gradient's own error; kInvalidArgument (in total_norm and every returned gradient)
// if max_norm <= 0 or `grads` is empty or not floating.
struct ClippedGradients {
  std::vector<Tensor> grads;
  Tensor total_norm;  // before clipping
};
[[nodiscard]] ClippedGradients ClipGradNorm(absl::Span<const Tensor> grads, double max_norm);

// Learning rate of `step` (0-based) of `total_steps`: linear warmup from peak_lr / warmup_steps
// to peak_lr over the first warmup_steps steps, then cosine annealing from peak_lr to min_lr over
// the rest (Loshchilov & Hutter 2017, SGDR without restarts; the GPT-2/3 and nanoGPT schedule):
//   step < warmup: peak_lr * (step + 1) / warmup_steps
//   else:          min_lr + 0.5 * (peak_lr - min_lr) * (1 + cos(pi * p)),
//                  p = (step - warmup_steps) / max(1, total_steps - warmup_steps), clamped to 1.
// warmup_steps = 0 and min_lr = 0 give torch's CosineAnnealingLR stepped per batch.
[[nodiscard]] double WarmupCosineLr(int64_t step, int64_t warmup_steps, int64_t total_steps,
                                    double peak_lr, double min_lr = 0);

}  // namespace tessel::nn

#endif  // TESSEL_NN_OPTIM_H_
