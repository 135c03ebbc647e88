// nn/xla_model.h on one device: replica groups from mesh axes, the collectives' shapes and
// errors, optimizer_step against its parts done by hand, step closures (run once, after the
// step, without another execution) and save / load (safetensors bytes, round trip, damaged
// files). The collectives' values on 8 devices: mesh/runtime/xla_model_local_mesh_test.cc.
#include "tessel/nn/xla_model.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tessel/core/literal.h"
#include "tessel/spmd/mesh.h"

namespace tessel::nn {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

TEST(XlaModelTest, ReplicaGroupsFollowTheNamedAxes) {
  spmd::Mesh mesh = spmd::Mesh::Create({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}, {"data", "model"}).value();
  EXPECT_EQ(replica_groups(mesh, {"data"})->groups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(replica_groups(mesh, {"model"})->groups(), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(replica_groups(mesh, {"data", "model"})->groups(), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // Minor-to-major as given: model first, then data.
  EXPECT_EQ(replica_groups(mesh, {"model", "data"})->groups(), (Groups{{0, 4, 1, 5, 2, 6, 3, 7}}));
  EXPECT_EQ(replica_groups(mesh, {})->groups(), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  absl::StatusOr<CollectiveDeviceList> unknown = replica_groups(mesh, {"z"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("\"z\""), std::string::npos) << unknown.status();
  absl::StatusOr<CollectiveDeviceList> twice = replica_groups(mesh, {"data", "data"});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(XlaModelTest, CollectivesHaveTorchXlaShapes) {
  Tensor x = Tensor::Placeholder(Shape(DType::kF32, {4, 6}));
  const CollectiveDeviceList pairs = Groups{{0, 1}, {2, 3}};
  std::vector<Tensor> reduced = all_reduce(ReduceKind::kAdd, {x, x}, 0.5, pairs);
  ASSERT_EQ(reduced.size(), 2u);
  EXPECT_EQ(reduced[1].shape(), x.shape());
  EXPECT_EQ(all_gather(x, 1, pairs).shape(), Shape(DType::kF32, {4, 12}));
  EXPECT_EQ(reduce_scatter(ReduceKind::kAdd, x, 1.0, 0, 2, pairs).shape(),
            Shape(DType::kF32, {2, 6}));
  EXPECT_EQ(all_to_all(x, 0, 1, 2, pairs).shape(), Shape(DType::kF32, {2, 12}));
  EXPECT_EQ(all_to_all(x, 1, 0, 2, pairs).shape(), Shape(DType::kF32, {8, 3}));
  EXPECT_EQ(all_to_all(x, 1, 1, 2, pairs).shape(), x.shape());
  // The lowering is XLA's ops: one all-reduce per tensor, then the scale.
  absl::StatusOr<TracedGraph> traced = TraceGraph({reduced[0]});
  ASSERT_TRUE(traced.ok()) << traced.status();
  int all_reduces = 0, multiplies = 0;
  for (const Node* node : traced->graph->nodes()) {
    all_reduces += node->opcode() == Opcode::kAllReduce;
    multiplies += node->opcode() == Opcode::kMultiply;
    if (node->opcode() == Opcode::kAllReduce) {
      EXPECT_EQ(node->attrs().replica_groups, pairs);
      EXPECT_TRUE(node->attrs().use_global_device_ids);
    }
  }
  EXPECT_EQ(all_reduces, 1);
  EXPECT_EQ(multiplies, 1);
}

TEST(XlaModelTest, CollectiveErrorsNameTheArgument) {
  spmd::clear_global_mesh();
  Tensor x = Tensor::Placeholder(Shape(DType::kF32, {4, 6}));
  EXPECT_EQ(all_reduce(ReduceKind::kAdd, {x})[0].status().code(),
            absl::StatusCode::kFailedPrecondition);
  const CollectiveDeviceList quad = Groups{{0, 1, 2, 3}};
  absl::Status count = reduce_scatter(ReduceKind::kAdd, x, 1.0, 0, 2, quad).status();
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("shard_count 2"), std::string::npos) << count;
  absl::Status split = all_to_all(x, 1, 0, 4, quad).status();
  EXPECT_EQ(split.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(split.message().find("not divisible by split_count 4"), std::string::npos) << split;
  EXPECT_EQ(all_gather(x, 2, quad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(all_reduce(ReduceKind::kAdd, {x}, 1.0, Groups{{0, 1}, {1, 2}})[0].status().code(),
            absl::StatusCode::kInvalidArgument);
  Tensor ints = Tensor::Placeholder(Shape(DType::kS32, {4}));
  EXPECT_EQ(all_reduce(ReduceKind::kAdd, {ints}, 0.5, quad)[0].status().code(),
            absl::StatusCode::kInvalidArgument);
  // With a global mesh, no groups means all of its devices.
  spmd::set_global_mesh(spmd::Mesh::Create({0, 1, 2, 3}, {4}, {"data"}).value());
  Tensor all = all_gather(x, 0);
  spmd::clear_global_mesh();
  ASSERT_TRUE(all.status().ok()) << all.status();
  EXPECT_EQ(all.shape(), Shape(DType::kF32, {16, 6}));
}

// optimizer_step without groups is clipping and the update, the same numbers as doing both by
// hand; the norm it returns is the norm before clipping.
TEST(XlaModelTest, OptimizerStepClipsAndUpdatesInTheStepGraph) {
  const Literal p0 = Literal::FromVector<float>({2, 2}, {1, 2, 3, 4});
  const Literal g0 = Literal::FromVector<float>({2, 2}, {3, 0, 0, 4});  // norm 5
  Tensor p = Tensor::FromLiteral(p0);
  Sgd sgd({.lr = 0.5});
  std::vector<Tensor*> params = {&p};
  absl::StatusOr<Tensor> norm =
      optimizer_step(sgd, params, {Tensor::FromLiteral(g0)}, {.groups = {}, .max_grad_norm = 1.0});
  ASSERT_TRUE(norm.ok()) << norm.status();
  const int64_t syncs = GetLazyMetrics().syncs;
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(GetLazyMetrics().syncs, syncs + 1);
  EXPECT_NEAR(norm->ToLiteral()->GetAsDouble(0), 5.0, 1e-6);
  const std::vector<double> want = {1 - 0.5 * 0.6, 2, 3, 4 - 0.5 * 0.8};  // g * 1/5, lr 0.5
  Literal got = p.ToLiteral().value();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got.GetAsDouble(i), want[i], 1e-6) << i;
  // No clipping: no norm; a mismatch is the optimizer's error and changes nothing.
  Tensor q = Tensor::FromLiteral(p0);
  std::vector<Tensor*> both = {&q, &q};
  absl::StatusOr<Tensor> bad = optimizer_step(sgd, both, {Tensor::FromLiteral(g0)});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(q.is_data());
  absl::StatusOr<Tensor> plain = optimizer_step(sgd, params, {Tensor::FromLiteral(g0)});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->defined());
}

TEST(XlaModelTest, StepClosureReadsTheStepsValuesWithoutAnotherExecution) {
  Tensor x = Tensor::FromLiteral(Literal::FromVector<float>({3}, {1, 2, 3}));
  Tensor y = x * 2.0;
  std::vector<double> seen;
  int runs = 0;
  add_step_closure([&, y]() -> absl::Status {
    ++runs;
    absl::StatusOr<Literal> value = y.ToLiteral();
    if (!value.ok()) return value.status();
    for (int i = 0; i < 3; ++i) seen.push_back(value->GetAsDouble(i));
    return absl::OkStatus();
  });
  EXPECT_EQ(runs, 0);  // not before the step
  const int64_t syncs = GetLazyMetrics().syncs;
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(seen, (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(GetLazyMetrics().syncs, syncs + 1);  // the read in the closure ran nothing
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(runs, 1);  // once only
  // A failing closure is Sync's result, and stops the closures after it.
  bool later = false;
  add_step_closure([] { return absl::InternalError("closure failed"); });
  add_step_closure([&] {
    later = true;
    return absl::OkStatus();
  });
  absl::Status failed = Sync();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(later);
}

std::string TempPath(const std::string& name) {
  return (std::string(::testing::TempDir()) + "/xla_model_test_" + name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

TEST(XlaModelTest, SaveWritesSafetensorsAndLoadReadsThemBack) {
  Literal ids(Shape(DType::kS32, {3}));
  for (int i = 0; i < 3; ++i) ids.data<int32_t>()[i] = 7 * i - 5;
  Tensor w = Tensor::FromLiteral(Literal::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  StateDict state = {{"w", w * 0.5}, {"ids", Tensor::FromLiteral(ids)}, {"a.bias", w * 0.0}};
  const std::string path = TempPath("state.safetensors");
  ASSERT_TRUE(save(state, path).ok());

  // The bytes are safetensors: the header's length, its JSON, then the data.
  const std::string bytes = ReadAll(path);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) {
    header_bytes |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  EXPECT_EQ(header_bytes % 8, 0u);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_bytes));
  EXPECT_EQ(header["w"]["dtype"], "F32");
  EXPECT_EQ(header["w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["ids"]["dtype"], "I32");
  EXPECT_EQ(bytes.size(), 8 + header_bytes + 24 + 12 + 24);

  absl::StatusOr<StateDict> loaded = load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ((*loaded)[0].first, "w");  // the file's order
  EXPECT_EQ((*loaded)[1].first, "ids");
  EXPECT_EQ((*loaded)[2].first, "a.bias");
  Literal w_back = (*loaded)[0].second.ToLiteral().value();
  EXPECT_EQ(w_back.shape(), Shape(DType::kF32, {2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w_back.GetAsDouble(i), 0.5 * (i + 1));
  Literal ids_back = (*loaded)[1].second.ToLiteral().value();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ids_back.data<int32_t>()[i], 7 * i - 5);

  // write = false (a host other than the master): the values are read, nothing is written.
  const std::string other = TempPath("not_written.safetensors");
  std::remove(other.c_str());
  ASSERT_TRUE(save(state, other, /*write=*/false).ok());
  EXPECT_FALSE(std::ifstream(other).good());
  EXPECT_EQ(save({{"w", w}, {"w", w}}, other).code(), absl::StatusCode::kInvalidArgument);
}

TEST(XlaModelTest, LoadRejectsDamagedFilesWithOneClearError) {
  Tensor w = Tensor::FromLiteral(Literal::FromVector<float>({2, 2}, {1, 2, 3, 4}));
  const std::string path = TempPath("good.safetensors");
  ASSERT_TRUE(save({{"w", w}}, path).ok());
  const std::string good = ReadAll(path);
  EXPECT_EQ(load(TempPath("missing.safetensors")).status().code(), absl::StatusCode::kNotFound);

  struct Case {
    std::string name;
    std::string contents;
    std::string message;
  };
  std::string long_header = good;
  long_header[0] = static_cast<char>(0xff);
  std::string not_json = good;
  not_json[8] = '!';
  std::string wrong_dtype = good;
  wrong_dtype.replace(wrong_dtype.find("F32"), 3, "F8X");
  const std::vector<Case> cases = {
      {"short", good.substr(0, 5), "8-byte header length"},
      {"truncated", good.substr(0, good.size() - 4), "data_offsets"},
      {"long_header", long_header, "header of"},
      {"not_json", not_json, "not JSON"},
      {"dtype", wrong_dtype, "\"F8X\""},
  };
  for (const Case& c : cases) {
    const std::string bad = TempPath(c.name + ".safetensors");
    WriteAll(bad, c.contents);
    absl::StatusOr<StateDict> got = load(bad);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << c.name << ": " << got.status();
    EXPECT_NE(got.status().message().find(c.message), std::string::npos)
        << c.name << ": " << got.status();
    EXPECT_NE(got.status().message().find(bad), std::string::npos) << c.name;
  }
}

}  // namespace
}  // namespace tessel::nn
