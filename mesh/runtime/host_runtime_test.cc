// HostRuntime on the 8-device two-slice preset (4 hosts x 2 devices), every host a thread of
// this process over the in-process transport (the same algorithms and accounting as ZeroMQ).
// Sharded programs must compute what the single-device executor computes.
#include "tessel/mesh/runtime/host_runtime.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tessel/core/tensor.h"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/mesh/runtime/compute_slots.h"
#include "tessel/mesh/runtime/testing/in_process_hosts.h"
#include "tessel/nn/functional.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/train.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"
#include "tessel/transport/inproc_transport.h"

namespace tessel::mesh {
namespace {

using testing::RandomLiteral;
using testing::RunHosts;

using spmd::kNone;

Topology MainTopology() {
  return LoadTopology(std::string(TESSEL_CONFIGS_DIR) + "/two_slices_2x2hosts.json").value();
}

spmd::HybridMesh DataModelMesh(const Topology& topology) {
  return spmd::HybridMesh::Create({2, 2}, {2, 1}, {"data", "model"}, topology).value();
}

TEST(HostRuntimeTest, ShardedDotMatchesSingleDevice) {
  const Topology topology = MainTopology();
  const Literal x_value = RandomLiteral({8, 6}, 1);
  const Literal w_value = RandomLiteral({6, 4}, 2);
  Literal want_y, want_sum;
  {
    Tensor y = Tanh(MatMul(Tensor::FromLiteral(x_value), Tensor::FromLiteral(w_value)));
    Tensor sum = ReduceSum(y, {0, 1});
    want_y = y.ToLiteral().value();
    want_sum = sum.ToLiteral().value();
  }
  std::vector<RuntimeMetrics> metrics(topology.num_hosts());
  std::vector<Literal> got_y(topology.num_hosts()), got_sum(topology.num_hosts());
  std::string trace;
  // One compute slot per host, so that the timeline has slot waits to check.
  HostRuntimeOptions slot_options;
  slot_options.compute_slots = 1;
  auto body = [&](HostRuntime& runtime) -> absl::Status {
    spmd::HybridMesh mesh = DataModelMesh(topology);
    runtime.EnableTracing(true);
    for (int step = 0; step < 2; ++step) {
      Tensor x = Tensor::FromLiteral(x_value);
      Tensor w = Tensor::FromLiteral(w_value);
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(x, mesh, {"data", kNone}));
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(w, mesh, {kNone, "model"}));
      Tensor y = Tanh(MatMul(x, w));
      TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(y, mesh, {"data", "model"}));
      Tensor sum = ReduceSum(y, {0, 1});
      TESSEL_RETURN_IF_ERROR(Sync({y, sum}));
      // y is laid out over all 8 devices: reading it gathers from every host.
      TESSEL_ASSIGN_OR_RETURN(got_y[runtime.host_index()], y.ToLiteral());
      TESSEL_ASSIGN_OR_RETURN(got_sum[runtime.host_index()], sum.ToLiteral());
    }
    metrics[runtime.host_index()] = runtime.metrics();
    TESSEL_ASSIGN_OR_RETURN(TraceEventWriter t, runtime.CollectTrace());
    if (runtime.host_index() == 0) trace = t.ToJson();
    return absl::OkStatus();
  };
  std::vector<absl::Status> statuses = RunHosts(topology, body, slot_options);
  // The timeline: 2 executions on each of the 8 devices, and their collectives.
  nlohmann::json parsed = nlohmann::json::parse(trace);
  std::map<int64_t, int> executions;
  // Per device: the spans of its executions, and its compute-slot waits.
  std::map<int64_t, std::vector<std::pair<double, double>>> runs, slot_waits;
  int collectives = 0;
  for (const auto& e : parsed["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int64_t device = e["tid"].get<int64_t>();
    const double start = e["ts"].get<double>(), end = start + e["dur"].get<double>();
    if (e["cat"] == "execute") {
      ++executions[device];
      runs[device].emplace_back(start, end);
    }
    if (e["cat"] == "collective") ++collectives;
    if (e["cat"] == "slot") {
      EXPECT_EQ(e["name"], "compute-slot");
      slot_waits[device].emplace_back(start, end);
    }
    EXPECT_GE(e["dur"].get<double>(), 0);
  }
  EXPECT_EQ(executions.size(), 8u);
  for (const auto& [device, count] : executions) EXPECT_EQ(count, 2) << "device " << device;
  EXPECT_GT(collectives, 0);
  // The compute slot is waited for at the start of every run and after every collective,
  // inside the device's run.
  EXPECT_EQ(slot_waits.size(), 8u);
  for (const auto& [device, waits] : slot_waits) {
    EXPECT_GE(waits.size(), 2u) << "device " << device;
    for (const auto& [start, end] : waits) {
      bool inside = false;
      for (const auto& [run_start, run_end] : runs[device]) {
        inside = inside || (start >= run_start - 1 && end <= run_end + 1);
      }
      EXPECT_TRUE(inside) << "device " << device << " slot wait at " << start;
    }
  }
  for (int64_t h = 0; h < topology.num_hosts(); ++h) {
    ASSERT_TRUE(statuses[h].ok()) << "host " << h << ": " << statuses[h];
    EXPECT_TRUE(AllClose(got_y[h], want_y, 1e-5, 1e-6)) << "host " << h;
    EXPECT_TRUE(AllClose(got_sum[h], want_sum, 1e-5, 1e-5)) << "host " << h;
    EXPECT_EQ(metrics[h].compiles, 1);
    EXPECT_EQ(metrics[h].cache_hits, 1);
    EXPECT_EQ(metrics[h].executions, 2);
    // The sum over the data axis crosses slices: every host sends over DCN.
    EXPECT_GT(metrics[h].collectives.dcn.bytes, 0) << "host " << h;
    // x f32[8,6] on 8 devices as [2,6] pieces (+ w [6,2]), twice, per local device (2).
    EXPECT_EQ(metrics[h].host_to_device_bytes, 2 * 2 * (2 * 6 + 6 * 2) * 4);
  }
}

// The Megatron MLP recipe over (data, model): loss at every step equals the single-device loss,
// with the hosts' runtimes made with `options`. `all_reduce_calls` (if set) receives host 0's
// all-reduce calls of the run.
void ExpectMlpTrainingMatchesSingleDevice(const HostRuntimeOptions& options,
                                          int64_t* all_reduce_calls = nullptr) {
  const Topology topology = MainTopology();
  const std::vector<int64_t> sizes = {12, 16, 16, 4};
  constexpr int64_t kBatch = 16;
  constexpr int kSteps = 3;
  std::vector<Literal> images, labels;
  for (int s = 0; s < kSteps; ++s) {
    images.push_back(RandomLiteral({kBatch, sizes.front()}, 10 + s));
    Literal l(Shape(DType::kS32, {kBatch}));
    for (int64_t i = 0; i < kBatch; ++i)
      l.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + s) % 4);
    labels.push_back(std::move(l));
  }
  std::vector<double> want;
  Literal want_w1;
  {
    nn::Mlp model = nn::Mlp::Create(sizes, /*seed=*/3).value();
    nn::Adam adam({.lr = 1e-2});
    for (int s = 0; s < kSteps; ++s) {
      nn::StepResult r =
          nn::TrainStep(model, adam, Tensor::FromLiteral(images[s]), Tensor::FromLiteral(labels[s]))
              .value();
      want.push_back(r.loss);
    }
    want_w1 = model.parameters()[0]->ToLiteral().value();
  }
  std::vector<std::vector<double>> got(topology.num_hosts());
  std::vector<Literal> got_w1(topology.num_hosts());
  std::vector<RuntimeMetrics> metrics(topology.num_hosts());
  auto host = [&](HostRuntime& runtime) -> absl::Status {
    spmd::HybridMesh mesh = DataModelMesh(topology);
    TESSEL_ASSIGN_OR_RETURN(nn::Mlp model, nn::Mlp::Create(sizes, /*seed=*/3));
    std::vector<Tensor*> p = model.parameters();
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(*p[0], mesh, {kNone, "model"}));  // column
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(*p[1], mesh, {"model"}));
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(*p[2], mesh, {"model", kNone}));  // row
    nn::Adam adam({.lr = 1e-2});
    TESSEL_ASSIGN_OR_RETURN(spmd::Sharding image_sharding,
                            spmd::ShardingFromPartitionSpec(mesh, 2, {"data", kNone}));
    TESSEL_ASSIGN_OR_RETURN(spmd::Sharding label_sharding,
                            spmd::ShardingFromPartitionSpec(mesh, 1, {"data"}));
    for (int s = 0; s < kSteps; ++s) {
      auto rows = [&](const Literal& whole) {
        return [&whole](const spmd::Shard& shard) -> absl::StatusOr<Literal> {
          std::vector<int64_t> dims = shard.data_dims();
          Literal piece(Shape(whole.shape().dtype(), dims));
          const int64_t row_bytes = whole.byte_size() / whole.shape().dim(0);
          std::memcpy(piece.raw_data(), whole.raw_data() + shard.index[0].first * row_bytes,
                      static_cast<size_t>(piece.byte_size()));
          return piece;
        };
      };
      TESSEL_ASSIGN_OR_RETURN(
          Tensor x, runtime.MakeShardedInput(images[s].shape(), image_sharding, rows(images[s])));
      TESSEL_ASSIGN_OR_RETURN(
          Tensor y, runtime.MakeShardedInput(labels[s].shape(), label_sharding, rows(labels[s])));
      TESSEL_ASSIGN_OR_RETURN(nn::StepResult r, nn::TrainStep(model, adam, x, y));
      got[runtime.host_index()].push_back(r.loss);
    }
    TESSEL_ASSIGN_OR_RETURN(got_w1[runtime.host_index()], model.parameters()[0]->ToLiteral());
    metrics[runtime.host_index()] = runtime.metrics();
    return absl::OkStatus();
  };
  std::vector<absl::Status> statuses = RunHosts(topology, host, options);
  for (int64_t h = 0; h < topology.num_hosts(); ++h) {
    ASSERT_TRUE(statuses[h].ok()) << "host " << h << ": " << statuses[h];
    ASSERT_EQ(got[h].size(), want.size());
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(got[h][s], want[s], 1e-4 * std::abs(want[s])) << "host " << h << " step " << s;
    }
    EXPECT_TRUE(AllClose(got_w1[h], want_w1, 1e-4, 1e-6)) << "host " << h;
    // Step 1 compiles; steps 2 and 3 (optimizer state now device data) compile once more and
    // then hit the cache.
    EXPECT_LE(metrics[h].compiles, 2) << "host " << h;
    EXPECT_GE(metrics[h].cache_hits, 1) << "host " << h;
    EXPECT_GT(metrics[h].collectives.Kind(transport::CollectiveKind::kAllReduce).dcn.bytes, 0);
  }
  if (all_reduce_calls != nullptr) {
    *all_reduce_calls = metrics[0].collectives.Kind(transport::CollectiveKind::kAllReduce).calls;
  }
}

TEST(HostRuntimeTest, MlpTrainingMatchesSingleDevice) { ExpectMlpTrainingMatchesSingleDevice({}); }

// The passes after partitioning (all-reduce combining, transposes before all-reduces) change no
// loss, and combining makes fewer all-reduce calls than the program as partitioned.
TEST(HostRuntimeTest, MlpTrainingMatchesSingleDeviceWithAndWithoutProgramPasses) {
  HostRuntimeOptions off;
  off.combine_all_reduce_bytes = 0;
  off.transpose_before_all_reduce = false;
  int64_t calls_off = 0, calls_on = 0;
  ExpectMlpTrainingMatchesSingleDevice(off, &calls_off);
  HostRuntimeOptions on;
  on.combine_all_reduce_bytes = kDefaultCombineAllReduceBytes;
  on.transpose_before_all_reduce = true;
  ExpectMlpTrainingMatchesSingleDevice(on, &calls_on);
  EXPECT_GT(calls_on, 0);
  EXPECT_LT(calls_on, calls_off);
}

TEST(HostRuntimeTest, NegativeCombineThresholdIsRefused) {
  const Topology topology = MainTopology();
  auto job =
      transport::InProcTransport::Create(topology.num_hosts(), DeviceMapOf(topology)).value();
  HostRuntimeOptions options;
  options.combine_all_reduce_bytes = -1;
  absl::StatusOr<std::unique_ptr<HostRuntime>> made =
      HostRuntime::Create(topology, &job->host(0), options);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("combine_all_reduce_bytes must be >= 0"),
            std::string::npos)
      << made.status();
}

// One compute slot per host: a device waiting in a collective must give its slot to the host's
// other device (whose contribution it waits for), else the job would never finish.
TEST(HostRuntimeTest, MlpTrainingMatchesSingleDeviceWithOneComputeSlot) {
  HostRuntimeOptions options;
  options.compute_slots = 1;
  ExpectMlpTrainingMatchesSingleDevice(options);
}

TEST(HostRuntimeTest, MlpTrainingMatchesSingleDeviceWithoutComputeSlots) {
  HostRuntimeOptions options;
  options.compute_slots = 0;
  ExpectMlpTrainingMatchesSingleDevice(options);
}

// Device threads started and joined at every execution (the behaviour before they were kept)
// compute the same; a malformed TESSEL_PERSISTENT_DEVICE_THREADS is refused by Create.
TEST(HostRuntimeTest, MlpTrainingMatchesSingleDeviceWithDeviceThreadsPerExecution) {
  HostRuntimeOptions options;
  options.persistent_device_threads = false;
  ExpectMlpTrainingMatchesSingleDevice(options);
  const Topology topology = MainTopology();
  auto job =
      transport::InProcTransport::Create(topology.num_hosts(), DeviceMapOf(topology)).value();
  setenv("TESSEL_PERSISTENT_DEVICE_THREADS", "sometimes", 1);
  absl::StatusOr<std::unique_ptr<HostRuntime>> made = HostRuntime::Create(topology, &job->host(0));
  unsetenv("TESSEL_PERSISTENT_DEVICE_THREADS");
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("TESSEL_PERSISTENT_DEVICE_THREADS"), std::string::npos)
      << made.status();
}

// HostRuntimeOptions::compute_slots, else TESSEL_COMPUTE_SLOTS, else no limit; bad values are
// refused by Create with the value named.
TEST(HostRuntimeTest, ComputeSlotsFromOptionsEnvironmentOrDefault) {
  const Topology topology = MainTopology();
  auto job =
      transport::InProcTransport::Create(topology.num_hosts(), DeviceMapOf(topology)).value();
  // Every device of an in-process job runs on this machine.
  EXPECT_EQ(job->host(0).devices_on_this_machine(), 8);
  unsetenv("TESSEL_COMPUTE_SLOTS");
  HostRuntimeOptions options;
  options.compute_slots = 2;
  auto made = HostRuntime::Create(topology, &job->host(0), options);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->compute_slots(), 2);
  made = HostRuntime::Create(topology, &job->host(0));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->compute_slots(), 0);

  setenv("TESSEL_COMPUTE_SLOTS", "3", 1);
  made = HostRuntime::Create(topology, &job->host(0));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->compute_slots(), 3);
  // The option wins over the environment.
  options.compute_slots = 1;
  made = HostRuntime::Create(topology, &job->host(0), options);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->compute_slots(), 1);

  setenv("TESSEL_COMPUTE_SLOTS", "two", 1);
  made = HostRuntime::Create(topology, &job->host(0));
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("TESSEL_COMPUTE_SLOTS=\"two\""), std::string::npos)
      << made.status();
  unsetenv("TESSEL_COMPUTE_SLOTS");

  options.compute_slots = -1;
  made = HostRuntime::Create(topology, &job->host(0), options);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("got -1"), std::string::npos) << made.status();
}

// Sets TESSEL_DONATE_PARAMS for one scope.
class DonateParams {
 public:
  explicit DonateParams(const char* value) { setenv("TESSEL_DONATE_PARAMS", value, 1); }
  ~DonateParams() { unsetenv("TESSEL_DONATE_PARAMS"); }
};

// The address of local device `device`'s piece of `t` (the handle is dropped before returning,
// so asking does not keep the value from being donated).
const void* PieceAddress(const Tensor& t, int64_t device) {
  std::shared_ptr<const DeviceData> data = t.device_data();
  const auto* sharded = dynamic_cast<const ShardedData*>(data.get());
  if (sharded == nullptr || sharded->piece(device) == nullptr) return nullptr;
  return sharded->piece(device)->raw_data();
}

struct AdamRun {
  std::vector<double> losses;                 // host 0's
  std::vector<Literal> parameters;            // host 0's, after the last step
  std::vector<const void*> w1_piece_address;  // host 0's first device, after each step
  std::vector<RuntimeMetrics> metrics;        // per host
  std::vector<absl::Status> statuses;
};

// The sharded Adam MLP step of ExpectMlpTrainingMatchesSingleDevice, 4 steps on the two-slice
// preset, with TESSEL_DONATE_PARAMS=`donate`.
AdamRun TrainShardedAdam(const char* donate) {
  const DonateParams env(donate);
  const Topology topology = MainTopology();
  const std::vector<int64_t> sizes = {12, 16, 16, 4};
  constexpr int64_t kBatch = 16;
  constexpr int kSteps = 4;
  AdamRun run;
  run.metrics.resize(topology.num_hosts());
  run.statuses = RunHosts(topology, [&](HostRuntime& runtime) -> absl::Status {
    spmd::HybridMesh mesh = DataModelMesh(topology);
    TESSEL_ASSIGN_OR_RETURN(nn::Mlp model, nn::Mlp::Create(sizes, /*seed=*/3));
    std::vector<Tensor*> p = model.parameters();
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(*p[0], mesh, {kNone, "model"}));
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(*p[1], mesh, {"model"}));
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(*p[2], mesh, {"model", kNone}));
    nn::Adam adam({.lr = 1e-2});
    TESSEL_ASSIGN_OR_RETURN(spmd::Sharding rows,
                            spmd::ShardingFromPartitionSpec(mesh, 2, {"data", kNone}));
    const bool host0 = runtime.host_index() == 0;
    for (int s = 0; s < kSteps; ++s) {
      const Literal images = RandomLiteral({kBatch, sizes.front()}, 10 + s);
      TESSEL_ASSIGN_OR_RETURN(
          Tensor x,
          runtime.MakeShardedInput(images.shape(), rows, [&](const spmd::Shard& shard) -> Literal {
            Literal piece(Shape(DType::kF32, shard.data_dims()));
            const int64_t row_bytes = images.byte_size() / kBatch;
            std::memcpy(piece.raw_data(), images.raw_data() + shard.index[0].first * row_bytes,
                        static_cast<size_t>(piece.byte_size()));
            return piece;
          }));
      Literal labels(Shape(DType::kS32, {kBatch}));
      for (int64_t i = 0; i < kBatch; ++i) {
        labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + s) % 4);
      }
      TESSEL_ASSIGN_OR_RETURN(nn::StepResult r,
                              nn::TrainStep(model, adam, x, Tensor::FromLiteral(labels)));
      if (host0) {
        run.losses.push_back(r.loss);
        run.w1_piece_address.push_back(PieceAddress(*p[0], runtime.local_device_ids()[0]));
      }
    }
    run.metrics[runtime.host_index()] = runtime.metrics();
    for (Tensor* parameter : p) {
      TESSEL_ASSIGN_OR_RETURN(Literal value, parameter->ToLiteral());
      if (host0) run.parameters.push_back(std::move(value));
    }
    return absl::OkStatus();
  });
  return run;
}

// The parameters and Adam moments a sharded step replaces are donated: each device's executor
// writes the new values into the old pieces, and every loss and parameter is bitwise what the
// same run computes without donation.
TEST(HostRuntimeTest, DonatedShardsAreUpdatedInPlaceWithBitwiseEqualResults) {
  const AdamRun donated = TrainShardedAdam("1");
  const AdamRun kept = TrainShardedAdam("0");
  for (size_t h = 0; h < donated.statuses.size(); ++h) {
    ASSERT_TRUE(donated.statuses[h].ok()) << "host " << h << ": " << donated.statuses[h];
    ASSERT_TRUE(kept.statuses[h].ok()) << "host " << h << ": " << kept.statuses[h];
    EXPECT_GT(donated.metrics[h].donated_pieces, 0) << "host " << h;
    EXPECT_GT(donated.metrics[h].donated_in_place, 0) << "host " << h;
    EXPECT_EQ(kept.metrics[h].donated_pieces, 0) << "host " << h;
    EXPECT_EQ(kept.metrics[h].donated_in_place, 0) << "host " << h;
  }
  ASSERT_EQ(donated.losses.size(), kept.losses.size());
  for (size_t s = 0; s < kept.losses.size(); ++s) {
    EXPECT_EQ(donated.losses[s], kept.losses[s]) << "step " << s;
  }
  ASSERT_EQ(donated.parameters.size(), kept.parameters.size());
  for (size_t i = 0; i < kept.parameters.size(); ++i) {
    EXPECT_EQ(donated.parameters[i], kept.parameters[i]) << "parameter " << i;
  }
  // From the second step on (the first cuts w1 from host data) w1 stays in one buffer.
  ASSERT_EQ(donated.w1_piece_address.size(), 4u);
  for (size_t s = 1; s < 4; ++s) {
    ASSERT_NE(donated.w1_piece_address[s], nullptr);
    EXPECT_EQ(donated.w1_piece_address[s], donated.w1_piece_address[0]) << "step " << s;
  }
  // Without donation each step writes new buffers.
  EXPECT_NE(kept.w1_piece_address[1], kept.w1_piece_address[2]);
}

// A sharded value something else still reads is never donated: an older tensor naming it, or
// a caller holding its device data.
TEST(HostRuntimeTest, ShardedValueStillHeldIsNeverClobbered) {
  const DonateParams env("1");
  const Topology topology = MainTopology();
  const Literal start = RandomLiteral({8, 4}, 7);
  std::vector<absl::Status> statuses = RunHosts(topology, [&](HostRuntime& runtime) {
    spmd::HybridMesh mesh = DataModelMesh(topology);
    Tensor p = Tensor::FromLiteral(start);
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(p, mesh, {"data", "model"}));
    p = p * 0.5 + 1.0;
    TESSEL_RETURN_IF_ERROR(Sync());
    TESSEL_ASSIGN_OR_RETURN(const Literal before, p.ToLiteral());
    const int64_t pieces_before = runtime.metrics().donated_pieces;

    Tensor old = p;  // a tensor still names the old value
    p = p * 2.0 + 1.0;
    TESSEL_RETURN_IF_ERROR(Sync());
    TESSEL_ASSIGN_OR_RETURN(const Literal old_value, old.ToLiteral());
    if (!(old_value == before)) return absl::InternalError("the kept tensor's value changed");

    std::shared_ptr<const DeviceData> held = p.device_data();  // a caller holds the value
    TESSEL_ASSIGN_OR_RETURN(const Literal held_before, p.ToLiteral());
    p = p * 2.0 + 1.0;
    TESSEL_RETURN_IF_ERROR(Sync());
    TESSEL_ASSIGN_OR_RETURN(const Literal held_value, runtime.client()->TransferFromDevice(*held));
    if (!(held_value == held_before)) return absl::InternalError("the held value changed");
    if (runtime.metrics().donated_pieces != pieces_before) {
      return absl::InternalError(
          absl::StrCat("pieces were donated: ", runtime.metrics().donated_pieces - pieces_before));
    }
    // With nothing else holding it, the next step's old value is donated.
    p = p * 2.0 + 1.0;
    TESSEL_RETURN_IF_ERROR(Sync());
    if (runtime.metrics().donated_pieces != pieces_before + 2) {
      return absl::InternalError(absl::StrCat("expected 2 donated pieces, got ",
                                              runtime.metrics().donated_pieces - pieces_before));
    }
    return absl::OkStatus();
  });
  for (size_t h = 0; h < statuses.size(); ++h) {
    EXPECT_TRUE(statuses[h].ok()) << "host " << h << ": " << statuses[h];
  }
}

TEST(HostRuntimeTest, TopologyAndJobMustAgree) {
  const Topology topology = MainTopology();
  auto job = transport::InProcTransport::Create(2, transport::DeviceMap::Uniform(2, 4)).value();
  absl::StatusOr<std::unique_ptr<HostRuntime>> runtime =
      HostRuntime::Create(topology, &job->host(0));
  ASSERT_FALSE(runtime.ok());
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runtime.status().message().find("4 hosts"), std::string::npos) << runtime.status();
}

// The dump folder (TESSEL_DUMP_TO or HostRuntimeOptions::dump_to) is made when missing, and one
// that cannot be made fails Create instead of losing every dump silently.
TEST(HostRuntimeTest, DumpFolderIsCreatedOrRefused) {
  const Topology topology = MainTopology();
  auto job =
      transport::InProcTransport::Create(topology.num_hosts(), DeviceMapOf(topology)).value();
  const std::filesystem::path root =
      std::filesystem::path(::testing::TempDir()) / "host_runtime_dump_test";
  std::filesystem::remove_all(root);
  HostRuntimeOptions options;
  options.dump_to = (root / "new" / "dump").string();
  absl::StatusOr<std::unique_ptr<HostRuntime>> made =
      HostRuntime::Create(topology, &job->host(0), options);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(std::filesystem::is_directory(options.dump_to));

  std::ofstream(root / "a_file") << "not a folder";
  options.dump_to = (root / "a_file").string();
  absl::StatusOr<std::unique_ptr<HostRuntime>> refused =
      HostRuntime::Create(topology, &job->host(1), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("a_file: cannot create the dump folder"),
            std::string::npos)
      << refused.status();
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tessel::mesh
