#include "tessel/nn/optim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {

namespace {

// Scalar device data (a graph parameter, so its value may change without a recompile),
// one per dtype per step. A constant would bake the learning rate (or Adam's step-dependent
// factors) into the graph's fingerprint, and every step would compile a new graph.
class StepScalar {
 public:
  explicit StepScalar(double value) : value_(value) {}

  // The value broadcast to `shape` (shape's dtype).
  // One literal per dtype, shared by every parameter of that dtype: the graph gets one input
  // per dtype rather than one per parameter, and the update is computed in the parameter's
  // dtype (nn/optim.h).
  Tensor Like(const Shape& shape) {
    auto it = by_dtype_.find(shape.dtype());
    if (it == by_dtype_.end()) {
      Literal lit(Shape(shape.dtype(), {}));
      lit.SetFromDouble(0, value_);
      it = by_dtype_.emplace(shape.dtype(), Tensor::FromLiteral(std::move(lit))).first;
    }
    return Broadcast(it->second, shape.dims(), {});
  }

 private:
  double value_;
  std::map<DType, Tensor> by_dtype_;
};

}  // namespace

absl::Status Optimizer::CheckArguments(const char* name, absl::Span<Tensor* const> params,
                                       absl::Span<const Tensor> grads) {
  if (params.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": got ", params.size(),
                                                   " parameters but ", grads.size(), " gradients"));
  }
  // Optimizer state is kept per position, so the parameter list must keep its length, order
  // and shapes from the first step on; a change would pair a parameter with another's moments.
  if (!shapes_.empty() && shapes_.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": got ", params.size(), " parameters but the first step had ", shapes_.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    TESSEL_RETURN_IF_ERROR(params[i]->status());
    TESSEL_RETURN_IF_ERROR(grads[i].status());
    const Shape& shape = params[i]->shape();
    if (!IsFloating(shape.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": parameter ", i, " has shape ",
                                                     shape.ToString(),
                                                     "; only floating parameters are trained"));
    }
    if (grads[i].shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": gradient ", i, " has shape ",
                                                     grads[i].shape().ToString(),
                                                     " but its parameter has ", shape.ToString()));
    }
    if (!shapes_.empty() && shapes_[i] != shape) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": parameter ", i, " has shape ",
                                                     shape.ToString(), " but had ",
                                                     shapes_[i].ToString(), " at the first step"));
    }
  }
  // Recorded only after every check passed: a failed first call leaves nothing fixed (and, as
  // the header promises, assigns nothing).
  if (shapes_.empty()) {
    for (Tensor* p : params) shapes_.push_back(p->shape());
  }
  return absl::OkStatus();
}

absl::Status Sgd::Step(absl::Span<Tensor* const> params, absl::Span<const Tensor> grads) {
  TESSEL_RETURN_IF_ERROR(CheckArguments("sgd", params, grads));
  const bool use_momentum = options_.momentum != 0;
  // Buffers start at zero, so the first step's buf = momentum * 0 + g = g: torch.optim.SGD's
  // first-step initialisation (buf = g) without a special case, and the same graph every step.
  if (use_momentum && buffers_.empty()) {
    for (Tensor* p : params) buffers_.push_back(Tensor::FromLiteral(Literal(p->shape())));
  }
  StepScalar lr(lr_);
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& p = *params[i];
    Tensor g = grads[i];
    // Hyperparameters that never change are C++ doubles, i.e. graph constants; skipping the
    // term when it is 0 keeps the graph free of dead ops.
    if (options_.weight_decay != 0) g = g + p * options_.weight_decay;
    if (use_momentum) {
      buffers_[i] = buffers_[i] * options_.momentum + g;
      g = buffers_[i];
    }
    p = p - lr.Like(p.shape()) * g;
  }
  ++step_count_;
  return absl::OkStatus();
}

absl::Status Adam::Step(absl::Span<Tensor* const> params, absl::Span<const Tensor> grads) {
  TESSEL_RETURN_IF_ERROR(CheckArguments("adam", params, grads));
  if (!options_.decay_mask.empty() && options_.decay_mask.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("adam: decay_mask has ",
                                                   options_.decay_mask.size(), " entries for ",
                                                   params.size(), " parameters"));
  }
  if (m_.empty()) {
    for (Tensor* p : params) {
      m_.push_back(Tensor::FromLiteral(Literal(p->shape())));
      v_.push_back(Tensor::FromLiteral(Literal(p->shape())));
    }
  }
  if (m_.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adam: got ", params.size(), " parameters but the state has ", m_.size(), " moments"));
  }
  // t counts from 1, as in torch.optim.Adam; the bias corrections are computed on the host in
  // double and enter as StepScalars, so they change per step without changing the graph.
  const double t = static_cast<double>(step_count_ + 1);
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, t);
  StepScalar step_size(lr_ / bias_correction1);
  StepScalar inv_sqrt_bias_correction2(1.0 / std::sqrt(bias_correction2));
  // AdamW's shrink factor depends on this step's learning rate, so it is step data too.
  StepScalar shrink(1.0 - lr_ * options_.weight_decay);
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& p = *params[i];
    Tensor g = grads[i];
    const bool decay =
        options_.weight_decay != 0 && (options_.decay_mask.empty() || options_.decay_mask[i]);
    if (decay && options_.decoupled_weight_decay) {
      p = p * shrink.Like(p.shape());
    } else if (decay) {
      g = g + p * options_.weight_decay;
    }
    m_[i] = m_[i] * options_.beta1 + g * (1.0 - options_.beta1);
    v_[i] = v_[i] * options_.beta2 + g * g * (1.0 - options_.beta2);
    // sqrt(v) / sqrt(1 - beta2^t) + eps, with eps after the correction as PyTorch (not
    // sqrt(v_hat + eps)); multiplying by the precomputed inverse avoids a per-element divide.
    Tensor denom = Sqrt(v_[i]) * inv_sqrt_bias_correction2.Like(p.shape()) + options_.eps;
    p = p - step_size.Like(p.shape()) * m_[i] / denom;
  }
  ++step_count_;
  return absl::OkStatus();
}

absl::Status Adam::SetState(std::vector<Tensor> m, std::vector<Tensor> v, int64_t step_count) {
  if (m.size() != v.size() || step_count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("adam: SetState got ", m.size(), " first and ",
                                                   v.size(), " second moments, step count ",
                                                   step_count));
  }
  for (size_t i = 0; i < m.size(); ++i) {
    TESSEL_RETURN_IF_ERROR(m[i].status());
    TESSEL_RETURN_IF_ERROR(v[i].status());
    if (m[i].shape() != v[i].shape()) {
      return absl::InvalidArgumentError(absl::StrCat("adam: SetState: moment ", i, " has shapes ",
                                                     m[i].shape().ToString(), " and ",
                                                     v[i].shape().ToString()));
    }
  }
  m_ = std::move(m);
  v_ = std::move(v);
  step_count_ = step_count;
  return absl::OkStatus();
}

ClippedGradients ClipGradNorm(absl::Span<const Tensor> grads, double max_norm) {
  ClippedGradients out;
  for (const Tensor& g : grads) {
    if (!g.status().ok()) {
      out.total_norm = g;
      break;
    }
  }
  if (out.total_norm.defined()) {
    out.grads.assign(grads.size(), out.total_norm);
    return out;
  }
  absl::Status bad;
  if (grads.empty() || max_norm <= 0) {
    bad =
        absl::InvalidArgumentError(absl::StrCat("clip_grad_norm: need max_norm > 0 (got ", max_norm,
                                                ") and gradients (got ", grads.size(), ")"));
  } else {
    for (const Tensor& g : grads) {
      if (!IsFloating(g.dtype())) {
        bad = absl::InvalidArgumentError(
            absl::StrCat("clip_grad_norm: gradients must be floating, got ", g.shape().ToString()));
      }
    }
  }
  if (!bad.ok()) {
    out.total_norm = Tensor::Error(bad);
    out.grads.assign(grads.size(), out.total_norm);
    return out;
  }
  const DType dtype = grads[0].dtype();
  Tensor sum_sq = Scalar(dtype, 0);
  for (const Tensor& g : grads) {
    Tensor gd = g.dtype() == dtype ? g : Convert(g, dtype);
    std::vector<int64_t> all(gd.rank());
    for (int64_t d = 0; d < gd.rank(); ++d) all[d] = d;
    sum_sq = sum_sq + ReduceSum(gd * gd, all);
  }
  out.total_norm = Sqrt(sum_sq);
  // max_norm never changes during a run, so it is a graph constant; the coefficient is data
  // computed in the graph, so clipping costs no host round trip.
  Tensor coef = Min(Scalar(dtype, max_norm) / (out.total_norm + 1e-6), Scalar(dtype, 1));
  for (const Tensor& g : grads) {
    Tensor c = coef.dtype() == g.dtype() ? coef : Convert(coef, g.dtype());
    out.grads.push_back(g * Broadcast(c, g.shape().dims(), {}));
  }
  return out;
}

double WarmupCosineLr(int64_t step, int64_t warmup_steps, int64_t total_steps, double peak_lr,
                      double min_lr) {
  if (warmup_steps > 0 && step < warmup_steps) {
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace tessel::nn
