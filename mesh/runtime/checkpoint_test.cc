// Distributed checkpoints: a save on the two-slice preset (4 hosts x 2 devices, each host a
// thread with an InProcTransport) loads on another sharding of the same devices and on one
// device with the same values; damaged checkpoints give one clear error.
#include "tessel/mesh/runtime/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tessel/core/status_macros.h"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/mesh/runtime/testing/in_process_hosts.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"
#include "tessel/transport/inproc_transport.h"

namespace tessel::mesh {
namespace {

using testing::RandomLiteral;
using testing::RunHosts;

namespace fs = std::filesystem;
using spmd::kNone;

Topology MainTopology() {
  return LoadTopology(std::string(TESSEL_CONFIGS_DIR) + "/two_slices_2x2hosts.json").value();
}

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  return dir.string();
}

// A single-device checkpoint of two arrays at step 3 under `dir`.
void SaveSmall(const std::string& dir, const Literal& a, const Literal& b) {
  std::vector<CheckpointArray> arrays = {{"a", Tensor::FromLiteral(a)},
                                         {"b", Tensor::FromLiteral(b)}};
  absl::StatusOr<CheckpointIoStats> stats =
      SaveCheckpoint(dir, 3, arrays, {{"step", 3}}, nullptr, "");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes, a.byte_size() + b.byte_size());
}

std::vector<CheckpointTarget> SmallTargets() {
  return {{"a", Shape(DType::kF32, {5, 3}), std::nullopt},
          {"b", Shape(DType::kF32, {4}), std::nullopt}};
}

TEST(CheckpointTest, SingleDeviceRoundTrip) {
  const std::string dir = FreshDir("ckpt_round_trip");
  const Literal a = RandomLiteral({5, 3}, 1), b = RandomLiteral({4}, 2);
  SaveSmall(dir, a, b);
  // An unfinished later save (no metadata) is not a checkpoint.
  fs::create_directories(fs::path(dir) / "step_00000009");
  absl::StatusOr<std::string> latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000003");
  absl::StatusOr<CheckpointMetadata> meta = ReadCheckpointMetadata(*latest);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 3);
  EXPECT_EQ(meta->attributes["step"], 3);
  CheckpointIoStats stats;
  absl::StatusOr<std::vector<Tensor>> values =
      LoadCheckpointArrays(*meta, SmallTargets(), nullptr, "", &stats);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].ToLiteral().value(), a);
  EXPECT_EQ((*values)[1].ToLiteral().value(), b);
  EXPECT_EQ(stats.bytes, a.byte_size() + b.byte_size());
}

TEST(CheckpointTest, MissingDirAndNoCheckpoint) {
  const std::string dir = FreshDir("ckpt_missing");
  EXPECT_EQ(LatestCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  fs::create_directories(fs::path(dir) / "step_00000001");
  absl::Status status = LatestCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("no complete checkpoint"), std::string::npos) << status;
}

TEST(CheckpointTest, TruncatedShardFileIsDataLoss) {
  const std::string dir = FreshDir("ckpt_truncated");
  SaveSmall(dir, RandomLiteral({5, 3}, 1), RandomLiteral({4}, 2));
  const std::string step_dir = LatestCheckpoint(dir).value();
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    if (entry.path().extension() == ".shards") fs::resize_file(entry.path(), 10);
  }
  absl::Status status = ReadCheckpointMetadata(step_dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("truncated"), std::string::npos) << status;
}

TEST(CheckpointTest, CorruptBytesFailTheChecksum) {
  const std::string dir = FreshDir("ckpt_corrupt");
  SaveSmall(dir, RandomLiteral({5, 3}, 1), RandomLiteral({4}, 2));
  const std::string step_dir = LatestCheckpoint(dir).value();
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    if (entry.path().extension() != ".shards") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    f.put('\x7f');
  }
  CheckpointMetadata meta = ReadCheckpointMetadata(step_dir).value();
  absl::Status status = LoadCheckpointArrays(meta, SmallTargets(), nullptr, "").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("checksum mismatch"), std::string::npos) << status;
  EXPECT_NE(status.message().find("array a"), std::string::npos) << status;
}

TEST(CheckpointTest, ModelMismatchIsInvalidArgument) {
  const std::string dir = FreshDir("ckpt_mismatch");
  SaveSmall(dir, RandomLiteral({5, 3}, 1), RandomLiteral({4}, 2));
  CheckpointMetadata meta = ReadCheckpointMetadata(LatestCheckpoint(dir).value()).value();
  std::vector<CheckpointTarget> wrong_shape = SmallTargets();
  wrong_shape[0].shape = Shape(DType::kF32, {5, 4});
  absl::Status status = CheckCheckpointFits(meta, wrong_shape);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("array a is f32[5,3] in the checkpoint but f32[5,4]"),
            std::string::npos)
      << status;
  std::vector<CheckpointTarget> missing = SmallTargets();
  missing[1].name = "c";
  EXPECT_NE(CheckCheckpointFits(meta, missing).message().find("it has array b"), std::string::npos);
  missing.pop_back();
  EXPECT_EQ(LoadCheckpointArrays(meta, missing, nullptr, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, MalformedMetadataIsDataLoss) {
  const std::string dir = FreshDir("ckpt_malformed");
  SaveSmall(dir, RandomLiteral({5, 3}, 1), RandomLiteral({4}, 2));
  const std::string step_dir = LatestCheckpoint(dir).value();
  for (const char* text :
       {"{not json", "{\"format\": \"tessel-checkpoint-1\", \"step\": \"x\"}", "[1, 2]",
        // A shard file outside the step folder.
        "{\"format\": \"tessel-checkpoint-1\", \"step\": 3, \"mesh\": \"\", \"num_devices\": 1, "
        "\"attributes\": {}, \"files\": {\"../x\": 0}, \"arrays\": []}"}) {
    std::ofstream(fs::path(step_dir) / "metadata.json") << text;
    absl::Status status = ReadCheckpointMetadata(step_dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << text << ": " << status;
  }
}

// Each edit a damaged or hand-written metadata file could hold is refused when the metadata is
// read, naming what is wrong, before any byte of a shard is read (fuzzing found that overlapping
// shards loaded uninitialised memory as weights, deep attributes overflowed the stack, and
// negative steps or offsets near 2^63 passed).
TEST(CheckpointTest, EditedMetadataIsRefusedNamingTheField) {
  const std::string dir = FreshDir("ckpt_edited");
  SaveSmall(dir, RandomLiteral({5, 3}, 1), RandomLiteral({4}, 2));
  const std::string step_dir = LatestCheckpoint(dir).value();
  const fs::path file = fs::path(step_dir) / "metadata.json";
  std::string original;
  {
    std::ifstream in(file);
    original.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  using Json = nlohmann::json;
  auto check = [&](const std::string& name, const std::function<void(Json&)>& edit,
                   const std::string& expected) {
    Json j = Json::parse(original);
    edit(j);
    std::ofstream(file) << j.dump();
    absl::Status status = ReadCheckpointMetadata(step_dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << name << ": " << status;
    EXPECT_NE(status.message().find(expected), std::string::npos) << name << ": " << status;
  };
  // Array a's shard on a 2-device metadata, over `rows` of its 5 x 3, without chunk checksums.
  auto rows_of_a = [](Json& j, int64_t begin, int64_t end) {
    j["num_devices"] = 2;
    Json shard = j["arrays"][0]["shards"][0];
    shard.erase("chunk_bytes");
    shard.erase("chunk_crc32");
    shard["index"] = {{begin, end}, {0, 3}};
    shard["bytes"] = (end - begin) * 3 * 4;
    return shard;
  };
  // Two shards of equal total volume that overlap (row 2 twice, row 4 never).
  check(
      "overlap",
      [&](Json& j) {
        j["arrays"][0]["shards"] = {rows_of_a(j, 0, 3), rows_of_a(j, 2, 4)};
      },
      "shards 0 and 1 of array a overlap");
  check(
      "more shards than devices",
      [](Json& j) { j["arrays"][0]["shards"].push_back(j["arrays"][0]["shards"][0]); },
      "at most 1 shards");
  check(
      "empty shard", [&](Json& j) { j["arrays"][0]["shards"].push_back(rows_of_a(j, 0, 0)); },
      "holds no element");
  check(
      "deep attributes",
      [](Json& j) {
        Json deep = Json::array();
        for (int i = 0; i < 100; ++i) deep = Json::array({deep});
        j["attributes"]["deep"] = deep;
      },
      "nesting deeper than 64 levels");
  check(
      "attributes not an object", [](Json& j) { j["attributes"] = 5; },
      "attributes: expected a JSON object");
  check(
      "negative step", [](Json& j) { j["step"] = -5; }, "step: expected an integer in [0, ");
  check(
      "fractional step", [](Json& j) { j["step"] = 3.5; }, "step: expected an integer");
  check(
      "step of another folder", [](Json& j) { j["step"] = 4; },
      "the metadata says step 4, the folder is step 3");
  check(
      "offset near 2^63",
      [](Json& j) { j["arrays"][0]["shards"][0]["offset"] = int64_t{9223372036854775797}; },
      "needs bytes 9223372036854775797 to 9223372036854775797 + 60");
  check(
      "chunk size near 2^63",
      [](Json& j) {
        j["arrays"][0]["shards"][0]["chunk_bytes"] = std::numeric_limits<int64_t>::max();
      },
      "chunk_bytes: expected an integer in [1, 1099511627776]");
  check(
      "crc32 past 32 bits", [](Json& j) { j["arrays"][0]["shards"][0]["crc32"] = 1ull << 32; },
      "crc32: expected an integer in [0, 4294967295]");
  check(
      "fractional shape",
      [](Json& j) {
        j["arrays"][0]["shape"] = {5.5, 3};
      },
      "array a: shape: expected an integer");
  check(
      "shape past int64",
      [](Json& j) {
        j["arrays"][0]["shape"] = {int64_t{1} << 62, int64_t{1} << 62};
      },
      "array a: more elements than int64 holds");
  check(
      "array twice", [](Json& j) { j["arrays"][1] = j["arrays"][0]; },
      "array a appears twice in the metadata");
  check(
      "num_devices", [](Json& j) { j["num_devices"] = -1; }, "num_devices: expected an integer");
  std::ofstream(file) << original;
  ASSERT_TRUE(ReadCheckpointMetadata(step_dir).ok());

  // A shard file replaced by a link to a file elsewhere (same bytes): refused, not followed.
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    if (entry.path().extension() != ".shards") continue;
    const fs::path outside = fs::path(dir) / "outside.shards";
    fs::rename(entry.path(), outside);
    fs::create_symlink(outside, entry.path());
  }
  absl::Status linked = ReadCheckpointMetadata(step_dir).status();
  EXPECT_EQ(linked.code(), absl::StatusCode::kDataLoss) << linked;
  EXPECT_NE(linked.message().find("is not a regular file in the checkpoint folder (a symbolic "
                                  "link)"),
            std::string::npos)
      << linked;

  // Folders named unlike the saver's step_%08d are not checkpoints: "step_9" was found as step
  // 9 and then reopened as step_00000009, a folder that does not exist.
  for (const char* name : {"step_9", "step_+9", "step_0000000009"}) {
    fs::create_directories(fs::path(dir) / name);
    fs::copy_file(file, fs::path(dir) / name / "metadata.json");
  }
  EXPECT_EQ(LatestCheckpoint(dir).value(), step_dir);
}

// Saved on 8 devices as [data, model] tiles of a [7, 6] array (uneven: padded pieces) and a
// replicated vector; loaded as [kNone, data] tiles on the same devices (another mesh text, so
// the target sharding is used and every piece is assembled from parts of several saved
// shards), and whole on one device.
TEST(CheckpointTest, ReshardOnLoad) {
  const Topology topology = MainTopology();
  const Literal w_value = RandomLiteral({7, 6}, 3), v_value = RandomLiteral({6}, 4);
  const std::string dir = FreshDir("ckpt_reshard");
  std::vector<CheckpointIoStats> saved(topology.num_hosts());
  std::vector<Literal> w_loaded(topology.num_hosts()), v_loaded(topology.num_hosts());
  std::vector<absl::Status> statuses = RunHosts(topology, [&](HostRuntime& runtime) {
    spmd::HybridMesh mesh =
        spmd::HybridMesh::Create({2, 2}, {2, 1}, {"data", "model"}, topology).value();
    Tensor w = Tensor::FromLiteral(w_value), v = Tensor::FromLiteral(v_value);
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(w, mesh, {"data", "model"}));
    // Materialized as sharded device data by a trivial program.
    w = w * 1.0f;
    v = v * 1.0f;
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(w, mesh, {"data", "model"}));
    TESSEL_RETURN_IF_ERROR(Sync({w, v}));
    std::vector<CheckpointArray> arrays = {{"w", w}, {"v", v}};
    TESSEL_ASSIGN_OR_RETURN(saved[runtime.host_index()],
                            SaveCheckpoint(dir, 1, arrays, {}, &runtime, mesh.ToString()));
    TESSEL_ASSIGN_OR_RETURN(std::string step_dir, LatestCheckpoint(dir));
    TESSEL_ASSIGN_OR_RETURN(CheckpointMetadata meta, ReadCheckpointMetadata(step_dir));
    TESSEL_ASSIGN_OR_RETURN(spmd::Sharding target,
                            spmd::ShardingFromPartitionSpec(mesh, 2, {kNone, "data"}));
    std::vector<CheckpointTarget> targets = {{"w", w_value.shape(), target},
                                             {"v", v_value.shape(), std::nullopt}};
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> loaded,
                            LoadCheckpointArrays(meta, targets, &runtime, "another mesh"));
    TESSEL_ASSIGN_OR_RETURN(w_loaded[runtime.host_index()], loaded[0].ToLiteral());
    TESSEL_ASSIGN_OR_RETURN(v_loaded[runtime.host_index()], loaded[1].ToLiteral());
    return absl::OkStatus();
  });
  int64_t total = 0;
  for (int64_t h = 0; h < topology.num_hosts(); ++h) {
    ASSERT_TRUE(statuses[h].ok()) << "host " << h << ": " << statuses[h];
    EXPECT_EQ(w_loaded[h], w_value) << "host " << h;
    EXPECT_EQ(v_loaded[h], v_value) << "host " << h;
    total += saved[h].bytes;
  }
  // Each tile once (no replica written twice), and no gather: every host wrote a part.
  EXPECT_EQ(total, w_value.byte_size() + v_value.byte_size());
  CheckpointMetadata meta = ReadCheckpointMetadata(LatestCheckpoint(dir).value()).value();
  EXPECT_EQ(meta.Find("w")->shards.size(), 8u);
  // A saved sharding that parses but does not lay w out on this mesh (4 of its 8 devices; an
  // unreduced one): one error naming the checkpoint and the array, before any program runs.
  for (const char* bad : {"{devices=[2,2]0,1,2,3}", "{unreduced}"}) {
    std::vector<absl::Status> loads = RunHosts(topology, [&](HostRuntime& runtime) {
      CheckpointMetadata edited = ReadCheckpointMetadata(LatestCheckpoint(dir).value()).value();
      for (CheckpointArrayInfo& a : edited.arrays) {
        if (a.name == "w") a.sharding = bad;
      }
      return LoadCheckpointArrays(
                 edited,
                 {{"w", w_value.shape(), std::nullopt}, {"v", v_value.shape(), std::nullopt}},
                 &runtime, edited.mesh)
          .status();
    });
    for (const absl::Status& load : loads) {
      // Every host reports host 0's status (ShareStatus: kAborted on the others).
      EXPECT_TRUE(absl::IsDataLoss(load) || absl::IsAborted(load)) << bad << ": " << load;
      EXPECT_NE(load.message().find("array w: its saved sharding"), std::string::npos) << load;
      EXPECT_NE(load.message().find("does not fit this mesh"), std::string::npos) << load;
    }
  }
  absl::StatusOr<std::vector<Tensor>> whole = LoadCheckpointArrays(
      meta, {{"w", w_value.shape(), std::nullopt}, {"v", v_value.shape(), std::nullopt}}, nullptr,
      "");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ((*whole)[0].ToLiteral().value(), w_value);
}

// A corrupt byte inside a shard that every host reads only in part (the load splits the columns,
// the save split rows and columns) fails the chunk checksum on every host: no partial load.
TEST(CheckpointTest, CorruptByteInAShardReadInPartFailsItsChunkChecksum) {
  const Topology topology = MainTopology();
  const Literal w_value = RandomLiteral({7, 6}, 3);
  const std::string dir = FreshDir("ckpt_partial_corrupt");
  auto save = [&](HostRuntime& runtime) -> absl::Status {
    spmd::HybridMesh mesh =
        spmd::HybridMesh::Create({2, 2}, {2, 1}, {"data", "model"}, topology).value();
    Tensor w = Tensor::FromLiteral(w_value) * 1.0f;
    TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(w, mesh, {"data", "model"}));
    TESSEL_RETURN_IF_ERROR(Sync({w}));
    return SaveCheckpoint(dir, 1, {{"w", w}}, {}, &runtime, mesh.ToString()).status();
  };
  for (const absl::Status& s : RunHosts(topology, save)) ASSERT_TRUE(s.ok()) << s;
  const std::string step_dir = LatestCheckpoint(dir).value();
  CheckpointMetadata meta = ReadCheckpointMetadata(step_dir).value();
  for (const CheckpointShardInfo& shard : meta.Find("w")->shards) {
    EXPECT_EQ(shard.chunk_bytes, kCheckpointChunkBytes);
    EXPECT_EQ(shard.chunk_crc32.size(), 1u);
  }
  const CheckpointShardInfo& victim = meta.Find("w")->shards[3];
  {
    std::fstream f(fs::path(step_dir) / victim.file,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(victim.offset + victim.bytes / 2);
    f.put('\x7f');
  }
  std::vector<absl::Status> statuses = RunHosts(topology, [&](HostRuntime& runtime) {
    spmd::HybridMesh mesh =
        spmd::HybridMesh::Create({2, 2}, {2, 1}, {"data", "model"}, topology).value();
    TESSEL_ASSIGN_OR_RETURN(spmd::Sharding target,
                            spmd::ShardingFromPartitionSpec(mesh, 2, {kNone, "data"}));
    return LoadCheckpointArrays(meta, {{"w", w_value.shape(), target}}, &runtime, "another mesh")
        .status();
  });
  // The first host (by index) whose read fails the checksum reports DATA_LOSS; the load shares
  // that status, so every other host fails with ABORTED naming it and the same message.
  int64_t data_loss_hosts = 0;
  for (int64_t h = 0; h < topology.num_hosts(); ++h) {
    const absl::StatusCode code = statuses[h].code();
    EXPECT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kAborted)
        << "host " << h << ": " << statuses[h];
    if (code == absl::StatusCode::kDataLoss) ++data_loss_hosts;
    EXPECT_NE(statuses[h].message().find("checksum mismatch in bytes"), std::string::npos)
        << "host " << h << ": " << statuses[h];
  }
  EXPECT_GE(data_loss_hosts, 1);
}

}  // namespace
}  // namespace tessel::mesh
