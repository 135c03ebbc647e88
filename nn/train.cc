#include "tessel/nn/train.h"

#include <cmath>
#include <utility>
#include <vector>

#include "tessel/core/status_macros.h"
#include "tessel/nn/functional.h"

namespace tessel::nn {

namespace {

// The one host read of a step's results; after Sync the tensor is device data, so ToLiteral
// copies it out without running anything.
absl::StatusOr<double> ScalarValue(const Tensor& t) {
  TESSEL_ASSIGN_OR_RETURN(Literal value, t.ToLiteral());
  return value.GetAsDouble(0);
}

}  // namespace

absl::StatusOr<StepResult> TrainStep(Module& model, Optimizer& optimizer, const Batch& batch) {
  return TrainStep(model, optimizer, Tensor::FromLiteral(batch.images),
                   Tensor::FromLiteral(batch.labels));
}

absl::StatusOr<StepResult> TrainStep(Module& model, Optimizer& optimizer, Tensor images,
                                     Tensor labels) {
  std::vector<Tensor*> params = model.parameters();
  // Read before `images` is moved into the step scope below.
  const int64_t batch_size = images.rank() > 0 ? images.dim(0) : 0;
  Tensor loss;
  Tensor correct;
  {
    // Everything recorded in this scope except the new parameters, the optimizer state, the
    // loss and the count dies before Sync, so it is not a graph output. The inputs are moved
    // in so they die here too.
    Tensor step_images = std::move(images);
    Tensor step_labels = std::move(labels);
    Tensor logits = model.Forward(step_images);
    loss = CrossEntropy(logits, step_labels);
    correct = NumCorrect(logits, step_labels);
    TESSEL_RETURN_IF_ERROR(loss.status());
    TESSEL_RETURN_IF_ERROR(correct.status());
    std::vector<Tensor> values;
    values.reserve(params.size());
    for (Tensor* p : params) values.push_back(*p);
    // Gradients of the pre-update parameters (copies in `values`); Step then replaces the
    // parameters through the pointers, so the graph holds forward, backward and update.
    std::vector<Tensor> grads = Grad(loss, values);
    TESSEL_RETURN_IF_ERROR(optimizer.Step(params, grads));
  }
  TESSEL_RETURN_IF_ERROR(Sync());
  StepResult result;
  TESSEL_ASSIGN_OR_RETURN(result.loss, ScalarValue(loss));
  TESSEL_ASSIGN_OR_RETURN(double num_correct, ScalarValue(correct));
  // The count comes back as a float (the logits' dtype), exact below 2^24 in f32; llround
  // turns it into the integer it holds.
  result.num_correct = std::llround(num_correct);
  result.batch_size = batch_size;
  return result;
}

absl::StatusOr<EvalResult> Evaluate(const Module& model, const DataLoader& loader) {
  double loss_sum = 0;
  int64_t correct_sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    Batch batch = loader.GetBatch(i);
    Tensor loss;
    Tensor correct;
    {
      Tensor images = Tensor::FromLiteral(std::move(batch.images));
      Tensor labels = Tensor::FromLiteral(std::move(batch.labels));
      Tensor logits = model.Forward(images);
      loss = CrossEntropy(logits, labels);
      correct = NumCorrect(logits, labels);
    }
    // Only these two: the parameters are untouched device data, and the intermediates died
    // with the scope above, so the graph's outputs are exactly the loss and the count.
    TESSEL_RETURN_IF_ERROR(Sync({loss, correct}));
    TESSEL_ASSIGN_OR_RETURN(double batch_loss, ScalarValue(loss));
    TESSEL_ASSIGN_OR_RETURN(double batch_correct, ScalarValue(correct));
    // Weighted by batch size: each batch's loss is a mean, and the last batch may be smaller,
    // so this gives the mean over examples, not over batches.
    loss_sum += batch_loss * static_cast<double>(batch.size);
    correct_sum += std::llround(batch_correct);
    count += batch.size;
  }
  EvalResult result;
  result.num_examples = count;
  if (count > 0) {
    result.loss = loss_sum / static_cast<double>(count);
    result.accuracy = static_cast<double>(correct_sum) / static_cast<double>(count);
  }
  return result;
}

}  // namespace tessel::nn
