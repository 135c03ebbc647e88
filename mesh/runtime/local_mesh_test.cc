// LocalMesh: N in-process devices must compute what the single-device executor computes, for
// lazily traced programs (a sharded dot, an MLP trained for a few steps) and for HLO text; its
// errors name the value at fault.
#include "tessel/mesh/runtime/local_mesh.h"

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/runtime/testing/in_process_hosts.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/train.h"
#include "tessel/spmd/mark_sharding.h"

namespace tessel::mesh {
namespace {

using testing::RandomLiteral;

using spmd::kNone;

bool UsesLocalClient() {
  return dynamic_cast<LocalComputationClient*>(&GetComputationClient()) != nullptr;
}

TEST(LocalMeshTest, ShardedDotMatchesSingleDeviceAndCountsCollectives) {
  const Literal x_value = RandomLiteral({8, 6}, 1);
  const Literal w_value = RandomLiteral({6, 4}, 2);
  Literal want;
  {
    Tensor y =
        ReduceSum(Tanh(MatMul(Tensor::FromLiteral(x_value), Tensor::FromLiteral(w_value))), {1});
    want = y.ToLiteral().value();
  }
  ASSERT_TRUE(UsesLocalClient());
  {
    auto local = LocalMesh::Create(8).value();
    EXPECT_FALSE(UsesLocalClient());
    EXPECT_EQ(local->num_devices(), 8);
    EXPECT_EQ(local->topology().num_hosts(), 1);
    spmd::Mesh mesh = local->MakeMesh({4, 2}, {"data", "model"}).value();
    for (int step = 0; step < 2; ++step) {
      Tensor x = Tensor::FromLiteral(x_value);
      Tensor w = Tensor::FromLiteral(w_value);
      ASSERT_TRUE(spmd::mark_sharding(x, mesh, {"data", kNone}).ok());
      ASSERT_TRUE(spmd::mark_sharding(w, mesh, {kNone, "model"}).ok());
      Tensor y = ReduceSum(Tanh(MatMul(x, w)), {1});
      absl::StatusOr<Literal> got = y.ToLiteral();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(AllClose(*got, want, 1e-5, 1e-6)) << "step " << step;
    }
    const RuntimeMetrics metrics = local->runtime().metrics();
    EXPECT_EQ(metrics.compiles, 1);
    EXPECT_EQ(metrics.cache_hits, 1);
    // The sum over the model-sharded dim is an all-reduce between the device threads, all of
    // them on the one host.
    EXPECT_GT(metrics.collectives.Kind(transport::CollectiveKind::kAllReduce).calls, 0);
    EXPECT_GT(metrics.collectives.local.bytes, 0);
    EXPECT_EQ(metrics.collectives.ici.bytes + metrics.collectives.dcn.bytes, 0);
  }
  EXPECT_TRUE(UsesLocalClient());
}

// Three SGD steps on one batch of a data x model sharded MLP: the same losses as on one device.
std::vector<double> TrainLosses(const spmd::Mesh* mesh) {
  nn::Mlp model = nn::Mlp::Create({12, 16, 4}, /*seed=*/3).value();
  if (mesh != nullptr) {
    auto& layers = model.layers();
    EXPECT_TRUE(spmd::mark_sharding(layers[0].weight(), *mesh, {kNone, "model"}).ok());
    EXPECT_TRUE(spmd::mark_sharding(layers[0].bias(), *mesh, {"model"}).ok());
    EXPECT_TRUE(spmd::mark_sharding(layers[1].weight(), *mesh, {"model", kNone}).ok());
  }
  nn::Sgd sgd({.lr = 0.1});
  Literal labels(Shape(DType::kS32, {8}));
  for (int64_t i = 0; i < 8; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 4);
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    Tensor images = Tensor::FromLiteral(RandomLiteral({8, 12}, 10));
    Tensor label_tensor = Tensor::FromLiteral(labels);
    if (mesh != nullptr) {
      EXPECT_TRUE(spmd::mark_sharding(images, *mesh, {"data", kNone}).ok());
      EXPECT_TRUE(spmd::mark_sharding(label_tensor, *mesh, {"data"}).ok());
    }
    absl::StatusOr<nn::StepResult> result = nn::TrainStep(model, sgd, images, label_tensor);
    EXPECT_TRUE(result.ok()) << result.status();
    losses.push_back(result.ok() ? result->loss : -1);
  }
  return losses;
}

TEST(LocalMeshTest, ShardedTrainingMatchesSingleDevice) {
  const std::vector<double> want = TrainLosses(nullptr);
  auto local = LocalMesh::Create(4).value();
  spmd::Mesh mesh = local->MakeMesh({2, 2}, {"data", "model"}).value();
  const std::vector<double> got = TrainLosses(&mesh);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "step " << i;
  EXPECT_LT(got.back(), got.front());
  // The first step takes host data, the later ones the device data the step before left: two
  // programs, then cache hits.
  EXPECT_EQ(local->runtime().metrics().compiles, 2);
  EXPECT_EQ(local->runtime().metrics().cache_hits, 1);
}

// On a one-host preset the simulated clock prices the steps on that hardware.
TEST(LocalMeshTest, OneHostTopologyGivesItsDevicesAndClock) {
  Topology dgx = LoadTopology(std::string(TESSEL_CONFIGS_DIR) + "/dgx_h100.json").value();
  auto local = LocalMesh::Create(dgx).value();
  EXPECT_EQ(local->num_devices(), 8);
  spmd::Mesh mesh = local->MakeMesh({8}, {"data"}).value();
  Tensor x = Tensor::FromLiteral(RandomLiteral({16, 32}, 7));
  ASSERT_TRUE(spmd::mark_sharding(x, mesh, {"data", kNone}).ok());
  absl::StatusOr<Literal> sum = ReduceSum(x, {0, 1}).ToLiteral();
  ASSERT_TRUE(sum.ok()) << sum.status();
  const RuntimeMetrics metrics = local->runtime().metrics();
  EXPECT_GT(metrics.last_simulated_step_seconds, 0) << metrics.simulation_note;
  EXPECT_NE(local->runtime().MetricsReport().find("H100"), std::string::npos)
      << local->runtime().MetricsReport();
}

constexpr char kMegatronHlo[] = R"(HloModule megatron, num_partitions=4

ENTRY %main (x: f32[8,16], w1: f32[16,32], w2: f32[32,16]) -> (f32[8,16], f32[8,32]) {
  %x = f32[8,16] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  %w1 = f32[16,32] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}
  %w2 = f32[32,16] parameter(2), sharding={devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}
  %h = f32[8,32] dot(%x, %w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %zero = f32[] constant(0)
  %zeros = f32[8,32] broadcast(%zero), dimensions={}
  %relu = f32[8,32] maximum(%h, %zeros)
  %y = f32[8,16] dot(%relu, %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = (f32[8,16], f32[8,32]) tuple(%y, %relu)
}
)";

TEST(LocalMeshTest, RunHloMatchesSingleDevice) {
  const std::vector<Literal> inputs = {RandomLiteral({8, 16}, 4), RandomLiteral({16, 32}, 5),
                                       RandomLiteral({32, 16}, 6)};
  std::shared_ptr<const Graph> graph(ParseHloModule(kMegatronHlo).value());
  LocalComputationClient single;
  std::vector<std::shared_ptr<const DeviceData>> arguments;
  for (const Literal& input : inputs) arguments.push_back(std::make_shared<LiteralData>(input));
  auto want = single.Execute(graph, GraphFingerprint(*graph), arguments, nullptr).value();
  ASSERT_EQ(want.size(), 2u);

  auto local = LocalMesh::Create(4).value();
  absl::StatusOr<std::vector<Literal>> got = local->RunHlo(kMegatronHlo, inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Literal& expected = static_cast<const LiteralData&>(*want[i]).literal();
    EXPECT_EQ((*got)[i].shape(), expected.shape()) << "output " << i;
    EXPECT_TRUE(AllClose((*got)[i], expected, 1e-5, 1e-6)) << "output " << i;
  }
  // The same module again is a cache hit.
  ASSERT_TRUE(local->RunHlo(kMegatronHlo, inputs).ok());
  EXPECT_EQ(local->runtime().metrics().compiles, 1);
  EXPECT_EQ(local->runtime().metrics().cache_hits, 1);
}

// What the single-device executor gives for kMegatronHlo on `inputs`.
std::vector<Literal> MegatronOnOneDevice(const std::vector<Literal>& inputs) {
  std::shared_ptr<const Graph> graph(ParseHloModule(kMegatronHlo).value());
  LocalComputationClient single;
  std::vector<std::shared_ptr<const DeviceData>> arguments;
  for (const Literal& input : inputs) arguments.push_back(std::make_shared<LiteralData>(input));
  const std::vector<std::shared_ptr<const DeviceData>> results =
      single.Execute(graph, GraphFingerprint(*graph), arguments, nullptr).value();
  std::vector<Literal> outputs;
  for (const auto& data : results) {
    outputs.push_back(static_cast<const LiteralData&>(*data).literal());
  }
  return outputs;
}

// Issue 21: a LocalMesh made on one thread runs HLO from another, which need not install
// anything; the creating thread keeps its client.
TEST(LocalMeshTest, RunHloFromAnotherThread) {
  const std::vector<Literal> inputs = {RandomLiteral({8, 16}, 4), RandomLiteral({16, 32}, 5),
                                       RandomLiteral({32, 16}, 6)};
  const std::vector<Literal> want = MegatronOnOneDevice(inputs);
  auto local = LocalMesh::Create(4).value();
  absl::StatusOr<std::vector<Literal>> got = absl::UnknownError("the thread did not run");
  bool thread_on_local_client = false;
  std::thread worker([&] {
    thread_on_local_client = UsesLocalClient();
    got = local->RunHlo(kMegatronHlo, inputs);
  });
  worker.join();
  EXPECT_TRUE(thread_on_local_client);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(AllClose((*got)[i], want[i], 1e-5, 1e-6)) << "output " << i;
  }
  EXPECT_FALSE(UsesLocalClient());
  EXPECT_EQ(local->metrics().executions, 1);
}

// Concurrent RunHlo calls (each program all-reduces between the device threads, so two
// interleaved programs would mismatch their collectives) run one at a time: every call gets
// the result of its own inputs, and the counters add up to one compile and a cache hit for each
// later call. metrics() may be read meanwhile.
TEST(LocalMeshTest, ConcurrentRunHloCallsRunOneAtATime) {
  constexpr int kThreads = 4;
  constexpr int kCalls = 3;
  auto local = LocalMesh::Create(4).value();
  std::vector<std::vector<Literal>> inputs(kThreads);
  std::vector<std::vector<Literal>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    inputs[t] = {RandomLiteral({8, 16}, 10 * t + 1), RandomLiteral({16, 32}, 10 * t + 2),
                 RandomLiteral({32, 16}, 10 * t + 3)};
    want[t] = MegatronOnOneDevice(inputs[t]);
  }
  std::vector<std::string> failures(kThreads);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const RuntimeMetrics m = local->metrics();
      EXPECT_LE(m.executions, kThreads * kCalls);
      EXPECT_LE(m.compiles, 1);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < kCalls; ++call) {
        absl::StatusOr<std::vector<Literal>> got = local->RunHlo(kMegatronHlo, inputs[t]);
        if (!got.ok()) {
          failures[t] = std::string(got.status().message());
          return;
        }
        for (size_t i = 0; i < want[t].size(); ++i) {
          if (!AllClose((*got)[i], want[t][i], 1e-5, 1e-6)) {
            failures[t] = absl::StrCat("call ", call, ": output ", i, " differs");
            return;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  reader.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  const RuntimeMetrics metrics = local->metrics();
  EXPECT_EQ(metrics.executions, kThreads * kCalls);
  EXPECT_EQ(metrics.compiles, 1);
  EXPECT_EQ(metrics.cache_hits, kThreads * kCalls - 1);
}

// Lazy tensors on another thread: UseOnThisThread installs the mesh's client there for the
// scope's life; the sharded result equals the single-device one.
TEST(LocalMeshTest, TensorsTracedOnAnotherThreadRunOnTheMesh) {
  const Literal x_value = RandomLiteral({8, 6}, 1);
  const Literal w_value = RandomLiteral({6, 4}, 2);
  const Literal want =
      ReduceSum(Tanh(MatMul(Tensor::FromLiteral(x_value), Tensor::FromLiteral(w_value))), {1})
          .ToLiteral()
          .value();
  auto local = LocalMesh::Create(8).value();
  const spmd::Mesh mesh = local->MakeMesh({4, 2}, {"data", "model"}).value();
  absl::StatusOr<Literal> got = absl::UnknownError("the thread did not run");
  bool on_mesh_in_scope = false;
  bool local_after_scope = false;
  std::thread worker([&] {
    {
      LocalMesh::ThreadScope scope = local->UseOnThisThread();
      on_mesh_in_scope = !UsesLocalClient();
      Tensor x = Tensor::FromLiteral(x_value);
      Tensor w = Tensor::FromLiteral(w_value);
      if (!spmd::mark_sharding(x, mesh, {"data", kNone}).ok() ||
          !spmd::mark_sharding(w, mesh, {kNone, "model"}).ok()) {
        got = absl::InternalError("mark_sharding failed");
        return;
      }
      got = ReduceSum(Tanh(MatMul(x, w)), {1}).ToLiteral();
    }
    local_after_scope = UsesLocalClient();
  });
  worker.join();
  EXPECT_TRUE(on_mesh_in_scope);
  EXPECT_TRUE(local_after_scope);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(AllClose(*got, want, 1e-5, 1e-6));
  EXPECT_EQ(local->metrics().executions, 1);
  EXPECT_GT(local->metrics().collectives.Kind(transport::CollectiveKind::kAllReduce).calls, 0);
}

// A mesh destroyed on another thread than the one it was made on: the creating thread, whose
// client it still is, gets a clear kFailedPrecondition from Sync instead of touching freed
// memory, and is back to normal after SetComputationClient(nullptr).
TEST(LocalMeshTest, DestroyedOnAnotherThreadLeavesAClearError) {
  auto local = LocalMesh::Create(2).value();
  ASSERT_FALSE(UsesLocalClient());
  std::thread destroyer([&] { local.reset(); });
  destroyer.join();
  ASSERT_FALSE(UsesLocalClient());
  absl::StatusOr<Literal> sum =
      ReduceSum(Tensor::FromLiteral(RandomLiteral({4, 4}, 3)), {0, 1}).ToLiteral();
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(sum.status().message()),
              ::testing::HasSubstr("the LocalMesh whose client this thread uses was destroyed"));
  SetComputationClient(nullptr);
  EXPECT_TRUE(ReduceSum(Tensor::FromLiteral(RandomLiteral({4, 4}, 3)), {0, 1}).ToLiteral().ok());
}

// A sharded value an execution took over is spent: passing it again or reading it is a clear
// error, not a read of moved-from buffers; a value not donated stays readable.
TEST(LocalMeshTest, DonatedValueIsSpent) {
  auto local = LocalMesh::Create(8).value();
  std::unique_ptr<Graph> graph = ParseHloModule(R"(HloModule m
ENTRY e {
  p = f32[16] parameter(0), sharding={devices=[8]0,1,2,3,4,5,6,7}
  two = f32[] constant(2)
  b = f32[16] broadcast(two), dimensions={}
  ROOT r = f32[16] multiply(p, b), sharding={devices=[8]0,1,2,3,4,5,6,7}
}
)")
                                     .value();
  std::shared_ptr<const Graph> program(std::move(graph));
  const uint64_t fingerprint = GraphFingerprint(*program);
  ComputationClient& client = GetComputationClient();
  const Literal x = RandomLiteral({16}, 3);
  std::vector<std::shared_ptr<const DeviceData>> args = {std::make_shared<LiteralData>(x)};
  // Host data is cut into fresh pieces: the literal itself is never consumed.
  auto first = client.ExecuteDonated(program, fingerprint, args, {true}, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(args[0]->donated());
  std::shared_ptr<const DeviceData> doubled = (*first)[0];
  ASSERT_FALSE(doubled->donated());
  auto kept = client.ExecuteDonated(program, fingerprint, {doubled}, {false}, nullptr);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(doubled->donated());
  auto taken = client.ExecuteDonated(program, fingerprint, {doubled}, {true}, nullptr);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(doubled->donated());
  absl::StatusOr<Literal> result = client.TransferFromDevice(*(*taken)[0]);
  ASSERT_TRUE(result.ok()) << result.status();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(result->data<float>()[i], x.data<float>()[i] * 4);

  auto again = client.Execute(program, fingerprint, {doubled}, nullptr);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()),
              ::testing::HasSubstr("parameter 0 was donated to an earlier execution"));
  EXPECT_EQ(client.TransferFromDevice(*doubled).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Flags must match the arguments.
  EXPECT_EQ(client.ExecuteDonated(program, fingerprint, args, {}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A value bound to two parameters is read twice and never taken.
  std::unique_ptr<Graph> add = ParseHloModule(R"(HloModule m
ENTRY e {
  p = f32[16] parameter(0), sharding={devices=[8]0,1,2,3,4,5,6,7}
  q = f32[16] parameter(1), sharding={devices=[8]0,1,2,3,4,5,6,7}
  ROOT r = f32[16] add(p, q), sharding={devices=[8]0,1,2,3,4,5,6,7}
}
)")
                                   .value();
  std::shared_ptr<const Graph> sum(std::move(add));
  std::shared_ptr<const DeviceData> twice = (*kept)[0];
  auto summed =
      client.ExecuteDonated(sum, GraphFingerprint(*sum), {twice, twice}, {true, true}, nullptr);
  ASSERT_TRUE(summed.ok()) << summed.status();
  EXPECT_FALSE(twice->donated());
  absl::StatusOr<Literal> sum_value = client.TransferFromDevice(*(*summed)[0]);
  ASSERT_TRUE(sum_value.ok()) << sum_value.status();
  EXPECT_EQ(sum_value->data<float>()[5], x.data<float>()[5] * 8);
}

TEST(LocalMeshTest, ErrorsNameTheValue) {
  EXPECT_EQ(LocalMesh::Create(0).status().message(),
            "LocalMesh: num_devices must be in [1, 1024], got 0");
  LocalMeshOptions no_threads;
  no_threads.threads_per_device = 0;
  EXPECT_EQ(LocalMesh::Create(2, no_threads).status().message(),
            "LocalMesh: threads_per_device must be at least 1, got 0");
  Topology two_hosts = MakeUniformTopology(1, {4}, 2).value();
  absl::Status multi_host = LocalMesh::Create(two_hosts).status();
  EXPECT_EQ(multi_host.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(multi_host.message().find("has 2 hosts and 4 devices"), std::string::npos)
      << multi_host;
  // A failed Create leaves the thread on the single-device client.
  EXPECT_TRUE(UsesLocalClient());

  auto local = LocalMesh::Create(4).value();
  EXPECT_EQ(local->MakeMesh({2, 3}, {"a", "b"}).status().message(),
            "LocalMesh::MakeMesh: mesh shape [2, 3] has 6 devices, the local mesh has 4");
  EXPECT_EQ(local->MakeMesh({2, 2}, {"a", "a"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<Literal> two = {RandomLiteral({8, 16}, 4), RandomLiteral({16, 32}, 5)};
  EXPECT_EQ(local->RunHlo(kMegatronHlo, two).status().message(),
            "LocalMesh::RunHlo: the module has 3 parameters, got 2 inputs");
  const std::vector<Literal> wrong = {RandomLiteral({8, 16}, 4), RandomLiteral({16, 32}, 5),
                                      RandomLiteral({16, 32}, 6)};
  EXPECT_EQ(local->RunHlo(kMegatronHlo, wrong).status().message(),
            "LocalMesh::RunHlo: parameter 2 (w2) is f32[32,16], input 2 is f32[16,32]");
  absl::Status bad_text =
      local->RunHlo("HloModule m\nENTRY e {\n  ROOT r = f32[2] nope()\n}\n", {}).status();
  EXPECT_NE(bad_text.message().find("line 3"), std::string::npos) << bad_text;
}

}  // namespace
}  // namespace tessel::mesh
