// One training step of the Fashion-MNIST MLP (784-512-256-10, ReLU, Adam) on random data:
// forward, cross-entropy, Grad, Adam update, traced lazily and run as one cached graph
// (nn::TrainStep). The argument is the batch size; 128 is the example's default.
// BM_MlpWide*: the same for the example's 784-1024-1024-10 (benchmarks/jax_compare).
//
// Counters: us_per_sample (wall time of the timed steps divided by the samples they processed,
// microseconds), samples_per_second, and the split of a step into trace_ms (tracing the lazy
// graph, fingerprinting it and finding it in the compilation cache) and execute_ms (the
// executor), plus compiles (0: every timed step hit the cache), cpu_ms (CPU time of the
// process, all threads, per step), and donated / donated_in_place (per step: arguments donated
// to the step and outputs written into their buffers; TESSEL_DONATE_PARAMS=0 for none). Wall time
// (UseRealTime) because the executor runs kernels on TBB worker threads. The first step (graph
// compilation) runs before timing starts.
//
//   mlp_step_bench --benchmark_min_time=2
#include <sys/resource.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/data_loader.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/train.h"

namespace tessel::nn {
namespace {

Batch RandomBatch(int64_t batch_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch batch;
  batch.size = batch_size;
  batch.images = Literal::Uninitialized(Shape(DType::kF32, {batch_size, 784}));
  for (float& v : batch.images.data<float>()) v = static_cast<float>(UniformDouble(rng, 0, 1));
  batch.labels = Literal::Uninitialized(Shape(DType::kS32, {batch_size}));
  for (int32_t& label : batch.labels.data<int32_t>()) label = static_cast<int32_t>(rng() % 10);
  return batch;
}

// User + system CPU seconds of this process so far, all threads.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Times TrainStep of the MLP `sizes` with `optimizer` at batch size state.range(0).
void RunSteps(benchmark::State& state, Optimizer& optimizer,
              std::vector<int64_t> sizes = {784, 512, 256, 10}) {
  const int64_t batch_size = state.range(0);
  absl::StatusOr<Mlp> model = Mlp::Create(sizes, /*seed=*/0);
  if (!model.ok()) {
    state.SkipWithError(std::string(model.status().message()).c_str());
    return;
  }
  Batch batch = RandomBatch(batch_size, 1);
  absl::StatusOr<StepResult> warmup = TrainStep(*model, optimizer, batch);  // compiles the graph
  if (!warmup.ok()) {
    state.SkipWithError(std::string(warmup.status().message()).c_str());
    return;
  }
  ResetLazyMetrics();
  const double cpu_start_s = ProcessCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    absl::StatusOr<StepResult> step = TrainStep(*model, optimizer, batch);
    if (!step.ok()) {
      state.SkipWithError(std::string(step.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(step->loss);
  }
  const double elapsed_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const double cpu_s = ProcessCpuSeconds() - cpu_start_s;
  const double steps = static_cast<double>(state.iterations());
  const double samples = steps * static_cast<double>(batch_size);
  state.counters["us_per_sample"] = elapsed_us / samples;
  state.counters["samples_per_second"] = samples / (elapsed_us * 1e-6);
  // Where a step's time goes: tracing + fingerprint + cache lookup, and the executor.
  state.counters["trace_ms"] = GetLazyMetrics().compile_seconds * 1e3 / steps;
  state.counters["execute_ms"] = GetLazyMetrics().execute_seconds * 1e3 / steps;
  state.counters["compiles"] = static_cast<double>(GetLazyMetrics().compiles);
  // Buffer donation (core/tensor.h Sync; TESSEL_DONATE_PARAMS=0 turns it off): graph arguments
  // donated per step, and outputs written into a donated buffer per step (new parameters and
  // optimizer moments written in place).
  state.counters["donated"] = static_cast<double>(GetLazyMetrics().donated_arguments) / steps;
  state.counters["donated_in_place"] =
      static_cast<double>(GetLazyMetrics().donated_in_place) / steps;
  // CPU time of the whole process (TBB workers included) per step: on a loaded machine a
  // steadier figure than wall time.
  state.counters["cpu_ms"] = cpu_s * 1e3 / steps;
}
void BM_MlpAdamStep(benchmark::State& state) {
  Adam adam({.lr = 1e-3});
  RunSteps(state, adam);
}
BENCHMARK(BM_MlpAdamStep)
    ->Arg(32)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Plain SGD (one update op per parameter instead of Adam's ~20): the difference to
// BM_MlpAdamStep is the cost of the Adam update.
void BM_MlpSgdStep(benchmark::State& state) {
  Sgd sgd({.lr = 0.01});
  RunSteps(state, sgd);
}
BENCHMARK(BM_MlpSgdStep)->Arg(128)->UseRealTime()->Unit(benchmark::kMillisecond);

// The wide MLP of the Fashion-MNIST example and of benchmarks/jax_compare (784-1024-1024-10):
// the single-device rows of the Tessel vs JAX table.
void BM_MlpWideAdamStep(benchmark::State& state) {
  Adam adam({.lr = 1e-3});
  RunSteps(state, adam, {784, 1024, 1024, 10});
}
void BM_MlpWideSgdStep(benchmark::State& state) {
  Sgd sgd({.lr = 1e-3});
  RunSteps(state, sgd, {784, 1024, 1024, 10});
}
BENCHMARK(BM_MlpWideSgdStep)
    ->Arg(32)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MlpWideAdamStep)
    ->Arg(32)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel::nn
