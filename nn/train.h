// One classifier training step and an evaluation loop, torch_xla style.
//
//   absl::StatusOr<Mlp> model = Mlp::Create({784, 512, 256, 10}, /*seed=*/0);
//   Adam adam({.lr = 1e-3});
//   TESSEL_ASSIGN_OR_RETURN(StepResult r, TrainStep(*model, adam, loader.GetBatch(i)));
//   TESSEL_ASSIGN_OR_RETURN(EvalResult test, Evaluate(*model, test_loader));
//
// TrainStep records forward (cross-entropy on the logits), Grad, and the optimizer update, lets
// every intermediate tensor go out of scope, then calls Sync(): the whole step runs as ONE graph
// whose outputs are exactly the live pending tensors: the new parameters, the new optimizer
// state, the loss and the correct count. Every step records the same graph, so only the first
// step compiles (LazyMetrics::compiles) and the later ones hit the cache.
// Caveat (torch_xla mark_step semantics): Sync() also materializes any other pending tensor the
// caller keeps alive on this thread; those join the step graph (and change its fingerprint).
#ifndef TESSEL_NN_TRAIN_H_
#define TESSEL_NN_TRAIN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "tessel/nn/data_loader.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"

namespace tessel::nn {

struct StepResult {
  double loss = 0;          // mean cross-entropy of the batch (before the update), nats
  int64_t num_correct = 0;  // examples whose label was an argmax of the logits
  int64_t batch_size = 0;
};

// One step of `optimizer` on `model` for `batch` (images f32[B, in], labels s32[B]), classifying
// into model's output size. On return the model's parameters and the optimizer's state are
// device data.
// Errors: the first op error (kInvalidArgument for shape mismatches, e.g. images whose feature
// dim is not the model's input size), optimizer errors, executor errors.
[[nodiscard]] absl::StatusOr<StepResult> TrainStep(Module& model, Optimizer& optimizer,
                                                   const Batch& batch);
// The same with the batch already as tensors (images [B, in], labels s32[B]), e.g. sharded input
// pieces from mesh::HostRuntime::MakeShardedInput or tensors annotated with mark_sharding.
// The caller must not keep other pending tensors alive (they would join the step graph).
[[nodiscard]] absl::StatusOr<StepResult> TrainStep(Module& model, Optimizer& optimizer,
                                                   Tensor images, Tensor labels);

struct EvalResult {
  double loss = 0;      // mean cross-entropy over all examples, nats
  double accuracy = 0;  // fraction of examples classified correctly, in [0, 1]
  int64_t num_examples = 0;
};

// Runs the model over every batch of `loader`'s current epoch order (a loader without drop_last
// covers the whole dataset; its last, smaller batch compiles one more graph shape). Only the
// per-batch loss and correct count are synced; parameters are not touched.
// Errors: as TrainStep.
[[nodiscard]] absl::StatusOr<EvalResult> Evaluate(const Module& model, const DataLoader& loader);

}  // namespace tessel::nn

#endif  // TESSEL_NN_TRAIN_H_
