#include "examples/fashion_mnist_mlp/fashion_mnist.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "examples/common/host_setup.h"
#include "nlohmann/json.hpp"
#include "tessel/core/status_macros.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/mesh/runtime/host_runtime.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/data_loader.h"
#include "tessel/nn/functional.h"
#include "tessel/nn/idx.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/train.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::examples {
namespace {

using nn::Adam;
using nn::DataLoader;
using nn::Dataset;
using nn::Mlp;
using spmd::kNone;

constexpr char kProgram[] = "fashion_mnist_mlp";

// Learning rate of step `step` (0-based) of `total`: constant, or cosine annealing from --lr to 0
// (Loshchilov & Hutter 2017, SGDR, without restarts; torch CosineAnnealingLR stepped per batch).
double LearningRate(const FashionMnistFlags& flags, int64_t step, int64_t total) {
  if (flags.lr_schedule == "constant" || total <= 0) return flags.lr;
  return nn::WarmupCosineLr(step, /*warmup_steps=*/0, total, flags.lr);
}

// Megatron-style annotations over "model" (when the mesh has that axis): hidden layers
// alternate column-parallel (weight [in, out] split on out, bias split) and row-parallel
// (weight split on in, bias replicated); the last layer is row-parallel when its input is
// split, else replicated. Other parameters stay replicated: their gradients are all-reduced
// over the data axis by the partitioner.
absl::Status ShardModel(Mlp& model, const spmd::Mesh& mesh, const std::string& model_axis) {
  std::vector<Tensor*> params = model.parameters();
  const size_t layers = params.size() / 2;
  bool input_split = false;
  for (size_t i = 0; i < layers; ++i) {
    Tensor& weight = *params[2 * i];
    Tensor& bias = *params[2 * i + 1];
    const bool last = i + 1 == layers;
    if (input_split) {
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(weight, mesh, {model_axis, kNone}));
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(bias, mesh, {kNone}));
      input_split = false;
    } else if (!last) {
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(weight, mesh, {kNone, model_axis}));
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(bias, mesh, {model_axis}));
      input_split = true;
    }
  }
  return absl::OkStatus();
}

bool HasAxis(const FashionMnistFlags& flags, const std::string& axis) {
  for (const std::string& a : flags.mesh.axis_names) {
    if (a == axis) return true;
  }
  return false;
}

absl::StatusOr<spmd::HybridMesh> MakeMesh(const FashionMnistFlags& flags,
                                          const mesh::Topology& topology,
                                          const std::string& config_path) {
  TESSEL_ASSIGN_OR_RETURN(spmd::HybridMesh hybrid,
                          MakeHybridMesh(flags.mesh, topology, config_path));
  if (!HasAxis(flags, "data")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--axis-names ", absl::StrJoin(flags.mesh.axis_names, ","),
                     " has no \"data\" axis to shard the batch over"));
  }
  return hybrid;
}

// Connects this host process to its job and builds the mesh (examples/common/host_setup.h).
absl::StatusOr<Placement> ConnectFashionMnistHost(const FashionMnistFlags& flags) {
  return ConnectHost(flags.mesh, "fashion-mnist-mlp",
                     [&](const mesh::Topology& topology, const std::string& config_path) {
                       return MakeMesh(flags, topology, config_path);
                     });
}

// Batch `index` of `loader` as tensors: whole (single device) or this host's rows only.
absl::StatusOr<std::pair<Tensor, Tensor>> BatchTensors(const Placement& placement,
                                                       const DataLoader& loader, int64_t index) {
  const int64_t batch_begin = index * loader.options().batch_size;
  const int64_t batch_size =
      std::min(loader.options().batch_size, loader.dataset().num_examples - batch_begin);
  const int64_t features = loader.dataset().num_features();
  if (placement.runtime == nullptr) {
    nn::Batch batch = loader.GetBatch(index);
    return std::make_pair(Tensor::FromLiteral(std::move(batch.images)),
                          Tensor::FromLiteral(std::move(batch.labels)));
  }
  TESSEL_ASSIGN_OR_RETURN(spmd::Sharding image_sharding,
                          spmd::ShardingFromPartitionSpec(*placement.mesh, 2, {"data", kNone}));
  TESSEL_ASSIGN_OR_RETURN(spmd::Sharding label_sharding,
                          spmd::ShardingFromPartitionSpec(*placement.mesh, 1, {"data"}));
  TESSEL_ASSIGN_OR_RETURN(
      Tensor images,
      placement.runtime->MakeShardedInput(
          Shape(DType::kF32, {batch_size, features}), image_sharding,
          [&](const spmd::Shard& shard) -> absl::StatusOr<Literal> {
            return loader.GetBatchRows(index, shard.index[0].first, shard.index[0].second).images;
          }));
  TESSEL_ASSIGN_OR_RETURN(
      Tensor labels,
      placement.runtime->MakeShardedInput(
          Shape(DType::kS32, {batch_size}), label_sharding,
          [&](const spmd::Shard& shard) -> absl::StatusOr<Literal> {
            return loader.GetBatchRows(index, shard.index[0].first, shard.index[0].second).labels;
          }));
  return std::make_pair(std::move(images), std::move(labels));
}

// nn::Evaluate with the test batches sharded over "data" like the training batches.
absl::StatusOr<nn::EvalResult> Evaluate(const Placement& placement, const Mlp& model,
                                        const DataLoader& loader) {
  nn::EvalResult result;
  double loss_sum = 0;
  int64_t correct_sum = 0;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    Tensor loss;
    Tensor correct;
    int64_t size = 0;
    {
      TESSEL_ASSIGN_OR_RETURN(auto inputs, BatchTensors(placement, loader, i));
      size = inputs.first.dim(0);
      Tensor logits = model.Forward(inputs.first);
      loss = nn::CrossEntropy(logits, inputs.second);
      correct = nn::NumCorrect(logits, inputs.second);
    }
    TESSEL_RETURN_IF_ERROR(Sync({loss, correct}));
    TESSEL_ASSIGN_OR_RETURN(Literal loss_value, loss.ToLiteral());
    TESSEL_ASSIGN_OR_RETURN(Literal correct_value, correct.ToLiteral());
    loss_sum += loss_value.GetAsDouble(0) * static_cast<double>(size);
    correct_sum += std::llround(correct_value.GetAsDouble(0));
    result.num_examples += size;
  }
  if (result.num_examples > 0) {
    result.loss = loss_sum / static_cast<double>(result.num_examples);
    result.accuracy = static_cast<double>(correct_sum) / static_cast<double>(result.num_examples);
  }
  return result;
}

// What one epoch of training measured on this host.
struct EpochResult {
  double loss = 0;            // mean over the epoch's examples
  double train_accuracy = 0;  // fraction of the epoch's examples classified right
  int64_t examples = 0;
  double train_seconds = 0;           // wall time of the training steps (no evaluation)
  double simulated_step_seconds = 0;  // the simulator's step time on the topology; 0 alone
};

// Runs `steps` training steps of epoch `epoch` from global step `first_step`, printing a loss
// line every --log-every steps, and adds this host's collective traffic to `train_traffic`.
absl::StatusOr<EpochResult> TrainEpoch(const FashionMnistFlags& flags, Placement& placement,
                                       Mlp& model, nn::Optimizer& adam, DataLoader& loader,
                                       int64_t epoch, int64_t first_step, int64_t steps,
                                       int64_t planned_steps,
                                       transport::CollectiveStats& train_traffic) {
  const auto start = std::chrono::steady_clock::now();
  loader.StartEpoch(epoch);
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t seen = 0;
  const transport::CollectiveStats before = placement.runtime != nullptr
                                                ? placement.runtime->communicator().stats()
                                                : transport::CollectiveStats();
  const double simulated_before =
      placement.runtime != nullptr ? placement.runtime->metrics().simulated_seconds : 0;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t step = first_step + i;
    // The learning rate is graph data (nn/optim.h): changing it every step recompiles nothing.
    adam.set_lr(LearningRate(flags, step, planned_steps));
    TESSEL_ASSIGN_OR_RETURN(auto inputs, BatchTensors(placement, loader, i));
    TESSEL_ASSIGN_OR_RETURN(
        nn::StepResult result,
        nn::TrainStep(model, adam, std::move(inputs.first), std::move(inputs.second)));
    loss_sum += result.loss * static_cast<double>(result.batch_size);
    correct += result.num_correct;
    seen += result.batch_size;
    if (placement.printer && flags.log_every > 0 && (step + 1) % flags.log_every == 0) {
      if (flags.json) {
        nlohmann::json line = {{"step", step + 1}, {"loss", result.loss}};
        std::printf("%s\n", line.dump().c_str());
      } else {
        std::printf("step %lld  loss %.6f\n", static_cast<long long>(step + 1), result.loss);
      }
      std::fflush(stdout);
    }
  }
  EpochResult r;
  r.train_seconds = SecondsSince(start);
  r.examples = seen;
  r.loss = loss_sum / static_cast<double>(seen);
  r.train_accuracy = static_cast<double>(correct) / static_cast<double>(seen);
  if (placement.runtime != nullptr) {
    AddTraffic(before, placement.runtime->communicator().stats(), train_traffic);
    // Predicted time of one training step on the topology's hardware (mesh/sim/simulator.h).
    r.simulated_step_seconds = (placement.runtime->metrics().simulated_seconds - simulated_before) /
                               static_cast<double>(steps);
  }
  return r;
}

// The line (text or --json) after each epoch.
void PrintEpoch(const FashionMnistFlags& flags, const Placement& placement, int64_t epoch,
                int64_t total_steps, int64_t steps, const EpochResult& r,
                const nn::EvalResult& eval, double epoch_seconds) {
  const double samples_per_second = static_cast<double>(r.examples) / r.train_seconds;
  const double step_seconds = r.train_seconds / static_cast<double>(steps);
  if (flags.json) {
    nlohmann::json line = {{"epoch", epoch + 1},
                           {"epochs", flags.epochs},
                           {"steps", total_steps},
                           {"loss", r.loss},
                           {"train_acc", r.train_accuracy},
                           {"test_loss", eval.loss},
                           {"test_acc", eval.accuracy},
                           {"samples_per_second", samples_per_second},
                           {"step_seconds", step_seconds},
                           {"simulated_step_seconds", r.simulated_step_seconds},
                           {"train_seconds", r.train_seconds},
                           {"seconds", epoch_seconds}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::string simulated;
    if (r.simulated_step_seconds > 0) {
      simulated = absl::StrFormat("  step %.1f ms (simulated %s: %.3f ms)", 1e3 * step_seconds,
                                  placement.runtime->topology().device_spec().name,
                                  1e3 * r.simulated_step_seconds);
    }
    std::printf(
        "epoch %lld/%lld  step %lld  loss %.4f  train_acc %.4f  test_acc %.4f  samples/s %.0f%s  "
        "(%.1f s)\n",
        static_cast<long long>(epoch + 1), static_cast<long long>(flags.epochs),
        static_cast<long long>(total_steps), r.loss, r.train_accuracy, eval.accuracy,
        samples_per_second, simulated.c_str(), epoch_seconds);
  }
  std::fflush(stdout);
}

// What the whole run measured, for the closing summary.
struct RunTotals {
  double test_accuracy = 0;
  int64_t test_examples = 0;
  int64_t train_steps = 0;
  int64_t parameters = 0;
  int64_t examples = 0;
  double train_seconds = 0;
  double seconds = 0;
  transport::CollectiveStats job_train_traffic;  // all hosts, evaluation excluded
};

// The closing summary (text or --json) with the metrics report, on the printing host.
void PrintSummary(const FashionMnistFlags& flags, const Placement& placement,
                  const RunTotals& totals) {
  const LazyMetrics& lazy = GetLazyMetrics();
  nlohmann::json summary = {
      {"summary", true},
      {"final_test_acc", totals.test_accuracy},
      {"test_examples", totals.test_examples},
      {"epochs", flags.epochs},
      {"train_steps", totals.train_steps},
      {"batch_size", flags.batch_size},
      {"parameters", totals.parameters},
      {"samples_per_second", totals.train_seconds > 0
                                 ? static_cast<double>(totals.examples) / totals.train_seconds
                                 : 0.0},
      {"graphs_traced", lazy.compiles},
      {"trace_cache_hits", lazy.cache_hits},
      {"seconds", totals.seconds}};
  if (placement.runtime != nullptr) {
    const mesh::RuntimeMetrics m = placement.runtime->metrics();
    summary["devices"] = placement.runtime->num_devices();
    summary["hosts"] = placement.runtime->num_hosts();
    summary["compiles"] = m.compiles;
    summary["cache_hits"] = m.cache_hits;
    summary["compile_seconds"] = m.compile_seconds;
    summary["execute_seconds"] = m.device_seconds;
    summary["host_to_device_bytes"] = m.host_to_device_bytes;
    summary["host0_ici_bytes"] = m.collectives.ici.bytes;
    summary["host0_dcn_bytes"] = m.collectives.dcn.bytes;
    summary["host0_local_bytes"] = m.collectives.local.bytes;
    const double steps = static_cast<double>(std::max<int64_t>(totals.train_steps, 1));
    const transport::CollectiveStats& traffic = totals.job_train_traffic;
    summary["step_local_bytes"] = static_cast<double>(traffic.local.bytes) / steps;
    summary["step_ici_bytes"] = static_cast<double>(traffic.ici.bytes) / steps;
    summary["step_dcn_bytes"] = static_cast<double>(traffic.dcn.bytes) / steps;
  } else {
    summary["execute_seconds"] = lazy.execute_seconds;
  }
  if (flags.json) {
    std::printf("%s\n", summary.dump().c_str());
  } else {
    std::printf("final test accuracy %.4f (%lld examples)  total %.1f s, %.0f samples/s\n",
                totals.test_accuracy, static_cast<long long>(totals.test_examples), totals.seconds,
                summary["samples_per_second"].get<double>());
    if (placement.runtime != nullptr) {
      std::printf(
          "job traffic per training step: ICI %.0f B, DCN %.0f B, host-local %.0f B\n"
          "metrics report (host 0):\n%s",
          summary["step_ici_bytes"].get<double>(), summary["step_dcn_bytes"].get<double>(),
          summary["step_local_bytes"].get<double>(), placement.runtime->MetricsReport().c_str());
    } else {
      std::printf("%lld graphs compiled, %lld cache hits\n", static_cast<long long>(lazy.compiles),
                  static_cast<long long>(lazy.cache_hits));
    }
  }
  std::fflush(stdout);
}

absl::Status Train(const FashionMnistFlags& flags, Placement& placement) {
  const std::string data_dir =
      flags.data_dir.empty() ? std::string(nn::kDefaultFashionMnistDir) : flags.data_dir;
  TESSEL_ASSIGN_OR_RETURN(Dataset train, nn::LoadFashionMnist(data_dir, nn::Split::kTrain));
  TESSEL_ASSIGN_OR_RETURN(Dataset test, nn::LoadFashionMnist(data_dir, nn::Split::kTest));
  TESSEL_ASSIGN_OR_RETURN(DataLoader train_loader,
                          DataLoader::Create(&train, {.batch_size = flags.batch_size,
                                                      .shuffle = true,
                                                      .drop_last = true,
                                                      .seed = flags.seed}));
  TESSEL_ASSIGN_OR_RETURN(DataLoader test_loader,
                          DataLoader::Create(&test, {.batch_size = flags.eval_batch_size}));

  std::vector<int64_t> sizes = {train.num_features()};
  sizes.insert(sizes.end(), flags.hidden.begin(), flags.hidden.end());
  sizes.push_back(train.num_classes);
  TESSEL_ASSIGN_OR_RETURN(Mlp model, Mlp::Create(sizes, flags.seed));
  if (placement.runtime != nullptr && HasAxis(flags, "model")) {
    TESSEL_RETURN_IF_ERROR(ShardModel(model, *placement.mesh, "model"));
  }
  // SGD (--optimizer sgd) serves the executor benchmarks (benchmarks/jax_compare): one update op
  // per parameter against Adam's chain.
  Adam adam_optimizer({.lr = flags.lr});
  nn::Sgd sgd_optimizer({.lr = flags.lr});
  nn::Optimizer& adam = flags.optimizer == "sgd" ? static_cast<nn::Optimizer&>(sgd_optimizer)
                                                 : static_cast<nn::Optimizer&>(adam_optimizer);
  if (placement.printer && !flags.json) {
    std::string where = "single device";
    if (placement.runtime != nullptr) {
      where = absl::StrCat(placement.runtime->num_devices(), " devices on ",
                           placement.runtime->num_hosts(), " hosts of ", placement.config_path,
                           ", mesh ", placement.mesh->ToString());
    }
    std::printf(
        "Fashion-MNIST MLP %s (%lld parameters), %s lr %g (%s schedule), batch %lld, %lld "
        "train / %lld test examples, %s\n",
        absl::StrJoin(sizes, "-").c_str(), static_cast<long long>(model.num_parameters()),
        flags.optimizer == "sgd" ? "SGD" : "Adam", flags.lr, flags.lr_schedule.c_str(),
        static_cast<long long>(flags.batch_size), static_cast<long long>(train.num_examples),
        static_cast<long long>(test.num_examples), where.c_str());
    std::fflush(stdout);
  }

  if (placement.runtime != nullptr && !flags.trace.empty()) {
    placement.runtime->EnableTracing(true);
  }
  ResetLazyMetrics();
  const auto run_start = std::chrono::steady_clock::now();
  int64_t steps_per_epoch = train_loader.num_batches();
  if (flags.steps > 0 && flags.steps < steps_per_epoch) steps_per_epoch = flags.steps;
  const int64_t planned_steps = flags.epochs * steps_per_epoch;
  RunTotals totals;
  totals.test_examples = test.num_examples;
  totals.parameters = model.num_parameters();
  // This host's collective traffic during training steps only (evaluation excluded).
  transport::CollectiveStats train_traffic;
  for (int64_t epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    TESSEL_ASSIGN_OR_RETURN(EpochResult r, TrainEpoch(flags, placement, model, adam, train_loader,
                                                      epoch, totals.train_steps, steps_per_epoch,
                                                      planned_steps, train_traffic));
    totals.train_steps += steps_per_epoch;
    totals.train_seconds += r.train_seconds;
    totals.examples += r.examples;
    TESSEL_ASSIGN_OR_RETURN(nn::EvalResult eval, Evaluate(placement, model, test_loader));
    totals.test_accuracy = eval.accuracy;
    if (placement.printer) {
      PrintEpoch(flags, placement, epoch, totals.train_steps, steps_per_epoch, r, eval,
                 SecondsSince(epoch_start));
    }
  }
  totals.seconds = SecondsSince(run_start);
  if (placement.runtime != nullptr) {  // every host takes part
    TESSEL_ASSIGN_OR_RETURN(totals.job_train_traffic,
                            placement.runtime->SumOverHosts(train_traffic));
    if (!flags.trace.empty()) {
      TESSEL_ASSIGN_OR_RETURN(TraceEventWriter trace, placement.runtime->CollectTrace());
      if (placement.printer) TESSEL_RETURN_IF_ERROR(trace.WriteFile(flags.trace));
    }
  }
  if (placement.printer) PrintSummary(flags, placement, totals);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFashionMnistRun(const FashionMnistFlags& flags, const mesh::Topology& topology,
                                  const std::string& config_path) {
  TESSEL_RETURN_IF_ERROR(MakeMesh(flags, topology, config_path).status());
  const std::string data_dir =
      flags.data_dir.empty() ? std::string(nn::kDefaultFashionMnistDir) : flags.data_dir;
  return nn::LoadFashionMnist(data_dir, nn::Split::kTest).status();
}

void AddFashionMnistFlags(CLI::App& app, FashionMnistFlags* flags) {
  app.add_option("--data-dir", flags->data_dir,
                 "directory with the Fashion-MNIST IDX files (default " +
                     std::string(nn::kDefaultFashionMnistDir) + ")");
  app.add_option("--epochs", flags->epochs, "passes over the training set")
      ->check(Positive())
      ->capture_default_str();
  app.add_option("--batch-size", flags->batch_size, "global training batch size")
      ->check(Positive())
      ->capture_default_str();
  app.add_option("--eval-batch-size", flags->eval_batch_size, "test-set batch size")
      ->check(Positive())
      ->capture_default_str();
  app.add_option("--optimizer", flags->optimizer, "adam, or plain sgd (for benchmarks)")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  app.add_option("--lr", flags->lr, "learning rate")->check(Positive())->capture_default_str();
  app.add_option("--lr-schedule", flags->lr_schedule,
                 "cosine: anneal the learning rate from --lr to 0 over the run (per step); "
                 "constant: keep --lr")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  app.add_option("--seed", flags->seed,
                 "seed of the parameter initialization and of the shuffling (seed + epoch)")
      ->capture_default_str();
  app.add_option("--hidden", flags->hidden, "hidden layer sizes, comma separated")
      ->delimiter(',')
      ->check(Positive())
      ->default_str("1024,1024");
  app.add_option("--steps", flags->steps,
                 "at most this many training steps per epoch (0: the whole epoch), for quick runs")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_option("--threads", flags->threads,
                 "executor threads of the single-device run (0: one per core)")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_option("--log-every", flags->log_every, "print the loss every N steps (0: never)")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_flag("--json", flags->json,
               "print one JSON object per epoch (and per logged step) and "
               "a summary object");
  app.add_flag("--single-device", flags->single_device, "train on one device, no mesh")
      ->excludes(app.add_option("--trace", flags->trace,
                                "write a Chrome-trace JSON timeline of every device's steps and "
                                "collectives (sharded runs; open in Perfetto)"));
  AddMeshFlags(app, &flags->mesh,
               "the batch is sharded over \"data\", hidden layers over \"model\"");
}

int RunFashionMnist(const FashionMnistFlags& flags) {
  return RunExample(
      kProgram, flags.single_device, flags.threads, [&] { return ConnectFashionMnistHost(flags); },
      [&](Placement& p) { return Train(flags, p); });
}

}  // namespace tessel::examples
