#include "tessel/mesh/runtime/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tessel/core/config_json.h"
#include "tessel/core/dtype.h"
#include "tessel/core/file_util.h"
#include "tessel/core/status_macros.h"
#include "tessel/spmd/sharded_tensor.h"

namespace tessel::mesh {
namespace {

namespace fs = std::filesystem;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

constexpr char kFormat[] = "tessel-checkpoint-1";
constexpr char kMetadataFile[] = "metadata.json";

std::string StepDirName(int64_t step) { return absl::StrFormat("step_%08d", step); }

// The test hook (see the header): _exit at a named point of the save of one step.
void MaybeCrash(std::string_view point, int64_t step) {
  const char* env = std::getenv("TESSEL_TEST_CRASH_AT");
  if (env == nullptr) return;
  std::pair<std::string, std::string> parts = absl::StrSplit(env, absl::MaxSplits(':', 1));
  int64_t at = -1;
  if (parts.first == point && absl::SimpleAtoi(parts.second, &at) && at == step) {
    std::fflush(stdout);
    ::_exit(137);
  }
}

uint32_t Crc32(const void* data, int64_t bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths; feed large buffers in pieces.
  while (bytes > 0) {
    const uInt n = static_cast<uInt>(std::min<int64_t>(bytes, 1 << 30));
    crc = ::crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

// crc32 of each kCheckpointChunkBytes piece of `data`.
std::vector<uint32_t> ChunkCrcs(const std::string& data) {
  std::vector<uint32_t> crcs;
  const int64_t size = static_cast<int64_t>(data.size());
  for (int64_t at = 0; at < size; at += kCheckpointChunkBytes) {
    crcs.push_back(Crc32(data.data() + at, std::min(kCheckpointChunkBytes, size - at)));
  }
  return crcs;
}

int64_t Volume(const Ranges& r) {
  int64_t v = 1;
  for (const auto& [s, l] : r) v *= l - s;
  return v;
}

std::vector<int64_t> Extents(const Ranges& r) {
  std::vector<int64_t> e;
  for (const auto& [s, l] : r) e.push_back(l - s);
  return e;
}

Ranges WholeRanges(const Shape& shape) {
  Ranges r;
  for (int64_t d : shape.dims()) r.emplace_back(0, d);
  return r;
}

// Calls `run(src_element, dst_element, count)` for every contiguous run of `inter` (a box inside
// both `src` and `dst`, global coordinates), with element offsets into row-major buffers of the
// two boxes. Adjacent runs are merged, so a box that spans whole trailing dims is one run.
template <typename Fn>
void ForEachRun(const Ranges& src, const Ranges& dst, const Ranges& inter, Fn run) {
  const size_t rank = inter.size();
  if (rank == 0) {
    run(0, 0, 1);
    return;
  }
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    src_stride[d - 1] = src_stride[d] * (src[d].second - src[d].first);
    dst_stride[d - 1] = dst_stride[d] * (dst[d].second - dst[d].first);
  }
  const int64_t len = inter[rank - 1].second - inter[rank - 1].first;
  std::vector<int64_t> at(rank);
  for (size_t d = 0; d < rank; ++d) at[d] = inter[d].first;
  int64_t pending_src = -1, pending_dst = -1, pending_len = 0;
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      s += (at[d] - src[d].first) * src_stride[d];
      t += (at[d] - dst[d].first) * dst_stride[d];
    }
    if (pending_len > 0 && s == pending_src + pending_len && t == pending_dst + pending_len) {
      pending_len += len;
    } else {
      if (pending_len > 0) run(pending_src, pending_dst, pending_len);
      pending_src = s;
      pending_dst = t;
      pending_len = len;
    }
    // Next row: the odometer over every dim but the last.
    int64_t d = static_cast<int64_t>(rank) - 2;
    for (; d >= 0; --d) {
      if (++at[d] < inter[d].second) break;
      at[d] = inter[d].first;
    }
    if (d < 0) break;
  }
  if (pending_len > 0) run(pending_src, pending_dst, pending_len);
}

// The unpadded data of `piece` (the padded local shape) for a shard of extents `dims`.
std::string UnpaddedBytes(const Literal& piece, const std::vector<int64_t>& dims) {
  const int64_t width = ByteWidth(piece.shape().dtype());
  Ranges padded, data;
  for (size_t d = 0; d < dims.size(); ++d) {
    padded.emplace_back(0, piece.shape().dim(static_cast<int64_t>(d)));
    data.emplace_back(0, dims[d]);
  }
  std::string out(static_cast<size_t>(Volume(data) * width), '\0');
  if (out.empty()) return out;
  const auto* src = reinterpret_cast<const char*>(piece.raw_data());
  ForEachRun(padded, data, data, [&](int64_t s, int64_t t, int64_t n) {
    std::memcpy(out.data() + t * width, src + s * width, static_cast<size_t>(n * width));
  });
  return out;
}

nlohmann::json RangesJson(const Ranges& r) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [s, l] : r) j.push_back({s, l});
  return j;
}

// This host's owned shards of `arrays`, appended to `bytes`; one JSON entry per shard
// {"array": i, "index": ..., "offset": ..., "bytes": ..., "crc32": ...}.
absl::StatusOr<nlohmann::json> CollectOwnedShards(absl::Span<const CheckpointArray> arrays,
                                                  HostRuntime* runtime, std::string& bytes,
                                                  std::vector<std::string>& shardings) {
  nlohmann::json entries = nlohmann::json::array();
  auto add = [&](size_t array, const Ranges& index, std::string data) {
    entries.push_back({{"array", array},
                       {"index", RangesJson(index)},
                       {"offset", bytes.size()},
                       {"bytes", data.size()},
                       {"crc32", Crc32(data.data(), static_cast<int64_t>(data.size()))},
                       {"chunk_bytes", kCheckpointChunkBytes},
                       {"chunk_crc32", ChunkCrcs(data)}});
    bytes += data;
  };
  const bool host0 = runtime == nullptr || runtime->host_index() == 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Tensor& value = arrays[i].value;
    TESSEL_RETURN_IF_ERROR(value.status());
    const auto* sharded = dynamic_cast<const ShardedData*>(value.device_data().get());
    if (sharded == nullptr) {
      // Held whole (one device, or host data): every host reads the same value (a host-level
      // read, so every host makes it) and host 0 writes it.
      TESSEL_ASSIGN_OR_RETURN(Literal whole, value.ToLiteral());
      shardings.push_back("");
      if (host0) {
        add(i, WholeRanges(whole.shape()),
            std::string(reinterpret_cast<const char*>(whole.raw_data()),
                        static_cast<size_t>(whole.byte_size())));
      }
      continue;
    }
    const spmd::Sharding& sharding = sharded->layout().sharding();
    if (sharding.IsManual() || sharding.IsUnreduced() ||
        sharding.SubgroupDim(spmd::SubgroupType::kUnreduced) >= 0 ||
        sharding.SubgroupDim(spmd::SubgroupType::kManual) >= 0) {
      return absl::UnimplementedError(
          absl::StrCat("checkpoint: array ", arrays[i].name, " has sharding ", sharded->sharding(),
                       "; saving unreduced or manual values is not supported"));
    }
    shardings.push_back(sharded->sharding());
    const std::vector<spmd::Shard>& all = sharded->layout().shards();
    const int64_t tiles = std::count_if(all.begin(), all.end(),
                                        [](const spmd::Shard& s) { return s.replica_id == 0; });
    const int64_t replicas = std::max<int64_t>(1, static_cast<int64_t>(all.size()) / tiles);
    for (int64_t device : sharded->device_ids()) {
      const spmd::Shard* shard = sharded->layout().shard_for(device);
      std::shared_ptr<const Literal> piece = sharded->piece(device);
      if (shard == nullptr || piece == nullptr) continue;
      // One copy of each tile is its owner, so each tile is written exactly once; the owner
      // rotates over the copies by tile and array, so replicas (the data-parallel slices) share
      // the writing instead of leaving it all to the first.
      int64_t tile = static_cast<int64_t>(i);
      for (int64_t t : shard->tile_index) tile = tile * 31 + t;
      if (shard->replica_id != tile % replicas) continue;
      add(i, shard->index, UnpaddedBytes(*piece, shard->data_dims()));
    }
  }
  return entries;
}

// Host 0: merges every host's entries into the metadata document.
absl::StatusOr<nlohmann::json> BuildMetadata(absl::Span<const CheckpointArray> arrays,
                                             const std::vector<std::string>& shardings,
                                             const std::vector<std::string>& payloads, int64_t step,
                                             const nlohmann::json& attributes,
                                             const std::string& mesh_text, int64_t num_devices) {
  nlohmann::json meta = {{"format", kFormat},
                         {"step", step},
                         {"mesh", mesh_text},
                         {"num_devices", num_devices},
                         {"num_hosts", payloads.size()},
                         {"attributes", attributes},
                         {"files", nlohmann::json::object()},
                         {"arrays", nlohmann::json::array()}};
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Shape& shape = arrays[i].value.shape();
    meta["arrays"].push_back({{"name", arrays[i].name},
                              {"dtype", DTypeName(shape.dtype())},
                              {"shape", shape.dims()},
                              {"sharding", shardings[i]},
                              {"shards", nlohmann::json::array()}});
  }
  for (const std::string& payload : payloads) {
    nlohmann::json host = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (host.is_discarded()) return absl::DataLossError("checkpoint: malformed host payload");
    meta["files"][host["file"].get<std::string>()] = host["size"];
    for (nlohmann::json& e : host["shards"]) {
      const size_t array = e["array"].get<size_t>();
      if (array >= arrays.size()) return absl::DataLossError("checkpoint: bad host payload");
      e.erase("array");
      e["file"] = host["file"];
      meta["arrays"][array]["shards"].push_back(std::move(e));
    }
  }
  return meta;
}

// fsync of a folder, so the renames into it survive a machine crash.
void SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Writes this host's shard file; returns its name.
absl::StatusOr<std::string> WriteShardFile(const std::string& step_dir, int64_t host, int64_t step,
                                           const std::string& bytes) {
  const std::string file = absl::StrFormat(
      "host_%d-%d-%d.shards", host, static_cast<int64_t>(::getpid()),
      static_cast<int64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  const std::string path = (fs::path(step_dir) / file).string();
  MaybeCrash("before_shards", step);
  if (std::getenv("TESSEL_TEST_CRASH_AT") != nullptr) {
    // What a kill -9 inside WriteFileAtomically leaves: part of the data under a temporary name.
    const std::string torn = path + ".tmp.crash";
    std::ofstream(torn, std::ios::binary).write(bytes.data(), bytes.size() / 2);
    MaybeCrash("mid_shards", step);
    ::unlink(torn.c_str());
  }
  TESSEL_RETURN_IF_ERROR(WriteFileAtomically(path, bytes, "checkpoint file"));
  MaybeCrash("after_shards", step);
  return file;
}

// Host 0, after the metadata: removes files of earlier saves of this step that the metadata no
// longer names (a save into an existing folder writes new names).
void RemoveUnreferenced(const std::string& step_dir, const nlohmann::json& files) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(step_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kMetadataFile || files.contains(name)) continue;
    fs::remove(entry.path(), ec);
  }
}

// Every host's status of one phase, shared: the first failure (by host) fails every host.
absl::Status ShareStatus(HostRuntime* runtime, const std::string& tag, const absl::Status& mine) {
  if (runtime == nullptr) return mine;
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> all,
                          runtime->communicator().Rendezvous(
                              tag, mine.ok() ? std::string() : std::string(mine.message())));
  for (size_t h = 0; h < all.size(); ++h) {
    if (all[h].empty()) continue;
    if (static_cast<int64_t>(h) == runtime->host_index()) return mine;
    return absl::AbortedError(absl::StrCat("host ", h, ": ", all[h]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointIoStats> SaveCheckpoint(const std::string& dir, int64_t step,
                                                 absl::Span<const CheckpointArray> arrays,
                                                 const nlohmann::json& attributes,
                                                 HostRuntime* runtime,
                                                 const std::string& mesh_text) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t host = runtime == nullptr ? 0 : runtime->host_index();
  const std::string step_dir = (fs::path(dir) / StepDirName(step)).string();
  std::string bytes;
  std::vector<std::string> shardings;
  nlohmann::json payload;
  absl::Status status;
  {
    std::error_code ec;
    fs::create_directories(step_dir, ec);
    if (ec) {
      status = absl::InvalidArgumentError(
          absl::StrCat("cannot create checkpoint folder ", step_dir, ": ", ec.message()));
    }
  }
  // Reading values whole is a host-level step, so every host collects even after a failure.
  absl::StatusOr<nlohmann::json> entries = CollectOwnedShards(arrays, runtime, bytes, shardings);
  if (status.ok()) status = entries.status();
  if (status.ok()) {
    absl::StatusOr<std::string> file = WriteShardFile(step_dir, host, step, bytes);
    status = file.status();
    if (file.ok()) payload = {{"file", *file}, {"size", bytes.size()}, {"shards", *entries}};
  }
  TESSEL_RETURN_IF_ERROR(
      ShareStatus(runtime, absl::StrCat("checkpoint ", step, " shards"), status));
  std::vector<std::string> payloads = {payload.dump()};
  if (runtime != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(
        payloads, runtime->communicator().Rendezvous(absl::StrCat("checkpoint ", step, " index"),
                                                     payload.dump()));
  }
  absl::Status committed;
  if (host == 0) {
    MaybeCrash("before_metadata", step);
    absl::StatusOr<nlohmann::json> meta =
        BuildMetadata(arrays, shardings, payloads, step, attributes, mesh_text,
                      runtime == nullptr ? 1 : runtime->num_devices());
    committed = meta.status();
    if (meta.ok()) {
      SyncDir(step_dir);  // the shard files' names are durable before the metadata names them
      committed = WriteFileAtomically((fs::path(step_dir) / kMetadataFile).string(), meta->dump(1),
                                      "checkpoint metadata");
    }
    if (committed.ok()) {
      SyncDir(step_dir);
      RemoveUnreferenced(step_dir, (*meta)["files"]);
    }
  }
  TESSEL_RETURN_IF_ERROR(
      ShareStatus(runtime, absl::StrCat("checkpoint ", step, " metadata"), committed));
  MaybeCrash("after_metadata", step);
  CheckpointIoStats stats;
  stats.bytes = static_cast<int64_t>(bytes.size());
  stats.reads = 1;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " does not exist"));
  }
  int64_t best = -1;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.rfind("step_", 0) != 0 || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    // Only the names SaveCheckpoint writes: "step_9" or "step_+9" would be found here and then
    // reopened as step_00000009, another folder.
    if (step < 0 || name != StepDirName(step)) continue;
    if (!fs::exists(entry.path() / kMetadataFile, ec)) continue;  // an unfinished save
    best = std::max(best, step);
  }
  if (best < 0) {
    return absl::NotFoundError(absl::StrCat("no complete checkpoint in ", dir,
                                            " (no step_* folder with ", kMetadataFile, ")"));
  }
  return (fs::path(dir) / StepDirName(best)).string();
}

const CheckpointArrayInfo* CheckpointMetadata::Find(const std::string& name) const {
  for (const CheckpointArrayInfo& a : arrays) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

namespace {

// An integer of the metadata within [lo, hi]: a JSON integer, never 4.7 or "4" (nlohmann's
// get<int64_t> would truncate the one and throw on the other).
absl::StatusOr<int64_t> Int(const nlohmann::json& v, const std::string& what, int64_t lo,
                            int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (std::optional<int64_t> i = JsonIntegerInRange(v, lo, hi)) return *i;
  return absl::DataLossError(
      absl::StrCat(what, ": expected an integer in [", lo, ", ", hi, "], got ", JsonForMessage(v)));
}

// Elements of the box `r`, or an error when the product does not fit in int64.
absl::StatusOr<int64_t> CheckedVolume(const Ranges& r, const std::string& what) {
  int64_t v = 1;
  for (const auto& [s, l] : r) {
    if (__builtin_mul_overflow(v, l - s, &v)) {
      return absl::DataLossError(absl::StrCat(what, ": more elements than int64 holds"));
    }
  }
  return v;
}

// The shards of one array must tile it: with their volumes summing to the array's, no two may
// share an element, or some elements would be read twice and others never written (a load would
// return uninitialised memory as weights). A sweep over dim 0 compares only shards whose dim-0
// intervals overlap: a grid of tiles costs O(n * tiles per dim-0 band), not O(n^2).
absl::Status CheckDisjoint(const std::vector<CheckpointShardInfo>& shards, const std::string& where,
                           const std::string& name) {
  if (shards.empty() || shards[0].index.empty()) return absl::OkStatus();
  std::vector<size_t> order(shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return shards[a].index[0].first < shards[b].index[0].first;
  });
  std::vector<size_t> active;
  for (size_t i : order) {
    const Ranges& box = shards[i].index;
    active.erase(
        std::remove_if(active.begin(), active.end(),
                       [&](size_t j) { return shards[j].index[0].second <= box[0].first; }),
        active.end());
    for (size_t j : active) {
      bool overlap = true;
      for (size_t d = 0; overlap && d < box.size(); ++d) {
        overlap = std::max(box[d].first, shards[j].index[d].first) <
                  std::min(box[d].second, shards[j].index[d].second);
      }
      if (overlap) {
        return absl::DataLossError(absl::StrCat(where, ": shards ", std::min(i, j), " and ",
                                                std::max(i, j), " of array ", name,
                                                " overlap (a shard holds each element once)"));
      }
    }
    active.push_back(i);
  }
  return absl::OkStatus();
}

// Parses one array entry of the metadata; `file_sizes` checks the shards' byte ranges, and an
// array has at most `max_shards` shards (one per device).
absl::StatusOr<CheckpointArrayInfo> ParseArray(const nlohmann::json& j,
                                               const std::map<std::string, int64_t>& file_sizes,
                                               int64_t max_shards, const std::string& where) {
  CheckpointArrayInfo a;
  a.name = j.at("name").get<std::string>();
  const std::string array = absl::StrCat(where, ": array ", a.name);
  absl::StatusOr<DType> dtype = ParseDType(j.at("dtype").get<std::string>());
  if (!dtype.ok()) return absl::DataLossError(absl::StrCat(array, ": ", dtype.status().message()));
  std::vector<int64_t> dims;
  for (const nlohmann::json& d : j.at("shape")) {
    TESSEL_ASSIGN_OR_RETURN(int64_t dim, Int(d, absl::StrCat(array, ": shape"), 0));
    dims.push_back(dim);
  }
  const int64_t width = ByteWidth(*dtype);
  Ranges whole;
  for (int64_t d : dims) whole.emplace_back(0, d);
  TESSEL_ASSIGN_OR_RETURN(const int64_t elements, CheckedVolume(whole, array));
  int64_t total_bytes = 0;
  if (__builtin_mul_overflow(elements, width, &total_bytes)) {
    return absl::DataLossError(absl::StrCat(array, ": more bytes than int64 holds"));
  }
  a.shape = Shape(*dtype, dims);
  a.sharding = j.at("sharding").get<std::string>();
  const nlohmann::json& shards = j.at("shards");
  if (!shards.is_array() || static_cast<int64_t>(shards.size()) > max_shards) {
    return absl::DataLossError(absl::StrCat(array, ": expected a list of at most ", max_shards,
                                            " shards (one per device)"));
  }
  int64_t covered = 0;
  for (const nlohmann::json& s : shards) {
    CheckpointShardInfo shard;
    const std::string what = absl::StrCat(where, ": shard ", a.shards.size(), " of array ", a.name);
    for (const nlohmann::json& r : s.at("index")) {
      if (!r.is_array() || r.size() != 2) {
        return absl::DataLossError(absl::StrCat(what, ": an index range is not [start, limit]"));
      }
      TESSEL_ASSIGN_OR_RETURN(int64_t start, Int(r[0], absl::StrCat(what, ": index"), 0));
      TESSEL_ASSIGN_OR_RETURN(int64_t limit, Int(r[1], absl::StrCat(what, ": index"), 0));
      shard.index.emplace_back(start, limit);
    }
    shard.file = s.at("file").get<std::string>();
    TESSEL_ASSIGN_OR_RETURN(shard.offset, Int(s.at("offset"), absl::StrCat(what, ": offset"), 0));
    TESSEL_ASSIGN_OR_RETURN(shard.bytes, Int(s.at("bytes"), absl::StrCat(what, ": bytes"), 0));
    TESSEL_ASSIGN_OR_RETURN(int64_t crc, Int(s.at("crc32"), absl::StrCat(what, ": crc32"), 0,
                                             std::numeric_limits<uint32_t>::max()));
    shard.crc32 = static_cast<uint32_t>(crc);
    if (s.contains("chunk_crc32")) {
      // The writer's chunk size; bounding it keeps the chunk count below from overflowing.
      TESSEL_ASSIGN_OR_RETURN(
          shard.chunk_bytes,
          Int(s.at("chunk_bytes"), absl::StrCat(what, ": chunk_bytes"), 1, int64_t{1} << 40));
      for (const nlohmann::json& c : s.at("chunk_crc32")) {
        TESSEL_ASSIGN_OR_RETURN(int64_t chunk, Int(c, absl::StrCat(what, ": chunk_crc32"), 0,
                                                   std::numeric_limits<uint32_t>::max()));
        shard.chunk_crc32.push_back(static_cast<uint32_t>(chunk));
      }
      const int64_t want =
          shard.bytes / shard.chunk_bytes + (shard.bytes % shard.chunk_bytes != 0 ? 1 : 0);
      if (want != static_cast<int64_t>(shard.chunk_crc32.size())) {
        return absl::DataLossError(absl::StrCat(what, " has ", shard.chunk_crc32.size(),
                                                " chunk checksums of ", shard.chunk_bytes,
                                                " bytes for its ", shard.bytes, " bytes"));
      }
    }
    bool inside = shard.index.size() == dims.size();
    for (size_t d = 0; inside && d < dims.size(); ++d) {
      inside = shard.index[d].first <= shard.index[d].second && shard.index[d].second <= dims[d];
    }
    if (!inside) return absl::DataLossError(absl::StrCat(what, " lies outside the shape"));
    // Inside the shape, so its volume and bytes are at most the array's (checked above).
    const int64_t volume = Volume(shard.index);
    if (volume == 0 && elements > 0) {
      return absl::DataLossError(absl::StrCat(what, " holds no element"));
    }
    if (shard.bytes != volume * width) {
      return absl::DataLossError(absl::StrCat(what, " has ", shard.bytes, " bytes for its index"));
    }
    auto size = file_sizes.find(shard.file);
    if (size == file_sizes.end()) {
      return absl::DataLossError(
          absl::StrCat(what, " names file ", shard.file, " which the metadata does not list"));
    }
    // Written so that offset + bytes cannot overflow.
    if (shard.offset > size->second || shard.bytes > size->second - shard.offset) {
      return absl::DataLossError(absl::StrCat(where, ": shard file ", shard.file, " has ",
                                              size->second, " bytes, shard ", a.shards.size(),
                                              " of array ", a.name, " needs bytes ", shard.offset,
                                              " to ", shard.offset, " + ", shard.bytes));
    }
    covered += volume;  // each <= elements, and the loop stops once the sum passes it
    a.shards.push_back(std::move(shard));
    if (covered > elements) break;
  }
  if (covered != elements) {
    return absl::DataLossError(absl::StrCat(where, ": the shards of array ", a.name, " hold ",
                                            covered, " elements, its shape ", a.shape.ToString(),
                                            " has ", elements));
  }
  TESSEL_RETURN_IF_ERROR(CheckDisjoint(a.shards, where, a.name));
  return a;
}

absl::StatusOr<CheckpointMetadata> ParseMetadata(const nlohmann::json& j,
                                                 const std::string& step_dir) {
  const std::string where = absl::StrCat("checkpoint ", step_dir);
  if (!j.is_object() || j.value("format", "") != kFormat) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", kMetadataFile, " is not a ", kFormat, " metadata file"));
  }
  CheckpointMetadata meta;
  meta.step_dir = step_dir;
  TESSEL_ASSIGN_OR_RETURN(meta.step, Int(j.at("step"), absl::StrCat(where, ": step"), 0));
  // A resume continues from `step`: one that disagrees with its folder's name (a copied or
  // edited file) would restart the schedule elsewhere.
  const std::string folder = fs::path(step_dir).filename().string();
  int64_t folder_step = 0;
  if (folder.rfind("step_", 0) == 0 && absl::SimpleAtoi(folder.substr(5), &folder_step) &&
      folder_step != meta.step) {
    return absl::DataLossError(absl::StrCat(where, ": the metadata says step ", meta.step,
                                            ", the folder is step ", folder_step));
  }
  meta.mesh = j.at("mesh").get<std::string>();
  TESSEL_ASSIGN_OR_RETURN(
      meta.num_devices,
      Int(j.at("num_devices"), absl::StrCat(where, ": num_devices"), 1, int64_t{1} << 24));
  meta.attributes = j.at("attributes");
  // A caller that passed no attributes saved null: read as none.
  if (meta.attributes.is_null()) meta.attributes = nlohmann::json::object();
  if (!meta.attributes.is_object()) {
    return absl::DataLossError(absl::StrCat(where, ": attributes: expected a JSON object"));
  }
  // Every host checks every file's actual size, so a truncated file fails every host alike.
  std::map<std::string, int64_t> sizes;
  for (const auto& [file, expected] : j.at("files").items()) {
    // Shard files live in the step folder itself; a path would read outside it.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return absl::DataLossError(absl::StrCat(where, ": bad shard file name \"", file, "\""));
    }
    std::error_code ec;
    // A regular file of the folder itself: a symbolic link there would read whatever it names,
    // outside the checkpoint (a copied or downloaded checkpoint carries its links along).
    const fs::file_status status = fs::symlink_status(fs::path(step_dir) / file, ec);
    if (!ec && status.type() != fs::file_type::regular) {
      return absl::DataLossError(absl::StrCat(
          where, ": shard file ", file, " is not a regular file in the checkpoint folder",
          status.type() == fs::file_type::symlink ? " (a symbolic link)" : ""));
    }
    const auto actual = fs::file_size(fs::path(step_dir) / file, ec);
    if (ec) {
      return absl::DataLossError(
          absl::StrCat(where, ": shard file ", file, " is missing (", ec.message(), ")"));
    }
    TESSEL_ASSIGN_OR_RETURN(int64_t listed,
                            Int(expected, absl::StrCat(where, ": files: ", file), 0));
    if (static_cast<int64_t>(actual) != listed) {
      return absl::DataLossError(absl::StrCat(where, ": shard file ", file, " has ", actual,
                                              " bytes, the metadata says ", listed,
                                              " (truncated?)"));
    }
    sizes[file] = static_cast<int64_t>(actual);
  }
  std::set<std::string> names;
  for (const nlohmann::json& a : j.at("arrays")) {
    TESSEL_ASSIGN_OR_RETURN(CheckpointArrayInfo info,
                            ParseArray(a, sizes, std::max<int64_t>(1, meta.num_devices), where));
    if (!names.insert(info.name).second) {
      return absl::DataLossError(
          absl::StrCat(where, ": array ", info.name, " appears twice in the metadata"));
    }
    meta.arrays.push_back(std::move(info));
  }
  return meta;
}

}  // namespace

absl::StatusOr<CheckpointMetadata> ReadCheckpointMetadata(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / kMetadataFile).string();
  // The metadata is a few KiB of JSON; 64 MiB bounds what a damaged or foreign file can cost.
  absl::StatusOr<std::string> text = ReadInputFile(path, "a checkpoint metadata file", 64 << 20);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("cannot read checkpoint metadata ", path));
  }
  if (!text.ok()) return text.status();
  // The configuration files' parser: bounded nesting (a 1,000,000-deep attribute overflowed the
  // stack when copied), no repeated keys.
  absl::StatusOr<nlohmann::json> j = ParseConfigJson(*text, path);
  if (!j.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint metadata is not valid: ", j.status().message()));
  }
  try {
    return ParseMetadata(*j, step_dir);
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong type or missing: one message naming the file.
    return absl::DataLossError(
        absl::StrCat("checkpoint metadata ", path, " is malformed: ", e.what()));
  }
}

absl::Status CheckCheckpointFits(const CheckpointMetadata& meta,
                                 absl::Span<const CheckpointTarget> targets) {
  for (const CheckpointArrayInfo& a : meta.arrays) {
    bool wanted = false;
    for (const CheckpointTarget& t : targets) wanted |= t.name == a.name;
    if (!wanted) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", meta.step_dir,
                                                     " does not fit this model: it has array ",
                                                     a.name, ", which the model lacks"));
    }
  }
  for (const CheckpointTarget& t : targets) {
    const CheckpointArrayInfo* a = meta.Find(t.name);
    if (a == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", meta.step_dir, " does not fit this model: it has no array ", t.name));
    }
    if (a->shape != t.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", meta.step_dir, " does not fit this model: array ", t.name, " is ",
          a->shape.ToString(), " in the checkpoint but ", t.shape.ToString(), " in the model"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Reads the region `want` (global ranges) of array `a` from its shard files.
class RegionReader {
 public:
  explicit RegionReader(const CheckpointMetadata& meta) : meta_(meta) {}
  ~RegionReader() {
    for (auto& [name, fd] : fds_) ::close(fd);
  }

  absl::StatusOr<Literal> Read(const CheckpointArrayInfo& a, const Ranges& want) {
    const int64_t width = ByteWidth(a.shape.dtype());
    Literal out = Literal::Uninitialized(Shape(a.shape.dtype(), Extents(want)));
    char* dst = reinterpret_cast<char*>(out.raw_data());
    int64_t covered = 0;
    for (size_t k = 0; k < a.shards.size(); ++k) {
      const CheckpointShardInfo& s = a.shards[k];
      Ranges inter;
      bool empty = false;
      for (size_t d = 0; d < want.size(); ++d) {
        inter.emplace_back(std::max(want[d].first, s.index[d].first),
                           std::min(want[d].second, s.index[d].second));
        empty |= inter.back().first >= inter.back().second;
      }
      if (empty) continue;
      TESSEL_ASSIGN_OR_RETURN(int fd, Open(s.file));
      const std::string what = absl::StrCat("checkpoint ", meta_.step_dir, ": file ", s.file,
                                            ", shard ", k, " of array ", a.name);
      if (inter == s.index) {
        // The whole shard: one read, and its checksum can be checked.
        std::string buffer(static_cast<size_t>(s.bytes), '\0');
        TESSEL_RETURN_IF_ERROR(PRead(fd, buffer.data(), s.bytes, s.offset, what));
        if (Crc32(buffer.data(), s.bytes) != s.crc32) {
          return absl::DataLossError(absl::StrCat(what, ": checksum mismatch (corrupt data)"));
        }
        ForEachRun(s.index, want, inter, [&](int64_t src, int64_t t, int64_t n) {
          std::memcpy(dst + t * width, buffer.data() + src * width, static_cast<size_t>(n * width));
        });
      } else if (!s.chunk_crc32.empty()) {
        TESSEL_RETURN_IF_ERROR(ReadCheckedPart(fd, s, want, inter, width, dst, what));
      } else {
        absl::Status status;
        ForEachRun(s.index, want, inter, [&](int64_t src, int64_t t, int64_t n) {
          if (status.ok())
            status = PRead(fd, dst + t * width, n * width, s.offset + src * width, what);
        });
        TESSEL_RETURN_IF_ERROR(status);
      }
      covered += Volume(inter);
    }
    if (covered != Volume(want)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", meta_.step_dir, ": the shards of ",
                                              a.name, " do not cover the region it needs"));
    }
    return out;
  }

  int64_t bytes() const { return bytes_; }
  int64_t reads() const { return reads_; }

 private:
  // The part `inter` of shard `s` into `dst` (a buffer of the box `want`): reads each run of
  // consecutive chunks that the needed byte ranges touch, checks every chunk read against its
  // crc32, then copies the ranges out.
  absl::Status ReadCheckedPart(int fd, const CheckpointShardInfo& s, const Ranges& want,
                               const Ranges& inter, int64_t width, char* dst,
                               const std::string& what) {
    const int64_t chunk = s.chunk_bytes;
    const int64_t num_chunks = static_cast<int64_t>(s.chunk_crc32.size());
    std::vector<bool> touched(num_chunks, false);
    ForEachRun(s.index, want, inter, [&](int64_t src, int64_t, int64_t n) {
      for (int64_t c = src * width / chunk; c <= ((src + n) * width - 1) / chunk; ++c) {
        touched[c] = true;
      }
    });
    std::string buffer(static_cast<size_t>(s.bytes), '\0');
    for (int64_t c = 0; c < num_chunks;) {
      if (!touched[c]) {
        ++c;
        continue;
      }
      int64_t end = c;
      while (end < num_chunks && touched[end]) ++end;
      const int64_t begin_byte = c * chunk, end_byte = std::min(end * chunk, s.bytes);
      TESSEL_RETURN_IF_ERROR(PRead(fd, buffer.data() + begin_byte, end_byte - begin_byte,
                                   s.offset + begin_byte, what));
      for (; c < end; ++c) {
        const int64_t at = c * chunk, n = std::min(chunk, s.bytes - at);
        if (Crc32(buffer.data() + at, n) != s.chunk_crc32[c]) {
          return absl::DataLossError(absl::StrCat(what, ": checksum mismatch in bytes [", at, ", ",
                                                  at + n, ") (corrupt data)"));
        }
      }
    }
    ForEachRun(s.index, want, inter, [&](int64_t src, int64_t t, int64_t n) {
      std::memcpy(dst + t * width, buffer.data() + src * width, static_cast<size_t>(n * width));
    });
    return absl::OkStatus();
  }

  absl::StatusOr<int> Open(const std::string& file) {
    auto it = fds_.find(file);
    if (it != fds_.end()) return it->second;
    const std::string path = (fs::path(meta_.step_dir) / file).string();
    // O_NOFOLLOW: the metadata's check that the name is a regular file in the folder holds
    // for what is opened (a link swapped in later would read a file outside the checkpoint).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      return absl::DataLossError(
          absl::StrCat("cannot open checkpoint file ", path, ": ", std::strerror(errno)));
    }
    fds_[file] = fd;
    return fd;
  }

  absl::Status PRead(int fd, char* out, int64_t n, int64_t offset, const std::string& what) {
    ++reads_;
    while (n > 0) {
      const ssize_t got = ::pread(fd, out, static_cast<size_t>(n), offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return absl::DataLossError(absl::StrCat(what, ": short read at byte ", offset, " (",
                                                got < 0 ? std::strerror(errno) : "end of file",
                                                ")"));
      }
      out += got;
      offset += got;
      n -= got;
      bytes_ += got;
    }
    return absl::OkStatus();
  }

  const CheckpointMetadata& meta_;
  std::map<std::string, int> fds_;
  int64_t bytes_ = 0;
  int64_t reads_ = 0;
};

// The sharding a value is loaded in: its saved one on the saving mesh, else the target's.
absl::StatusOr<spmd::Sharding> LoadSharding(const CheckpointMetadata& meta,
                                            const CheckpointArrayInfo& a, const CheckpointTarget& t,
                                            HostRuntime* runtime, const std::string& mesh_text) {
  if (meta.mesh == mesh_text && meta.num_devices == runtime->num_devices() && !a.sharding.empty()) {
    absl::StatusOr<spmd::Sharding> saved = spmd::ParseSharding(a.sharding);
    if (!saved.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", meta.step_dir, ": array ", a.name,
                                              ": ", saved.status().message()));
    }
    // Checked here, naming the checkpoint: a saved sharding that parses but does not lay the
    // array out on this mesh failed later, in the program, naming only a parameter.
    const int64_t n = runtime->num_devices();
    absl::Status fits = saved->Validate(a.shape, n);
    if (fits.ok() && saved->IsTiled() && saved->tile_assignment().num_elements() != n) {
      fits = absl::InvalidArgumentError(absl::StrCat(
          "it tiles ", saved->tile_assignment().num_elements(), " devices, the mesh has ", n));
    }
    if (fits.ok()) fits = spmd::ShardedTensor::Create(a.shape, *saved, n).status();
    if (fits.ok() && (saved->IsUnreduced() || saved->IsTuple())) {
      fits = absl::InvalidArgumentError("a checkpoint holds whole arrays, not unreduced parts");
    }
    if (!fits.ok()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", meta.step_dir, ": array ", a.name, ": its saved sharding ",
                       a.sharding.size() <= 200 ? a.sharding : a.sharding.substr(0, 200) + "...",
                       " does not fit this mesh: ", fits.message()));
    }
    return *saved;
  }
  return t.sharding.value_or(spmd::Sharding::Replicate());
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> LoadCheckpointArrays(const CheckpointMetadata& meta,
                                                         absl::Span<const CheckpointTarget> targets,
                                                         HostRuntime* runtime,
                                                         const std::string& mesh_text,
                                                         CheckpointIoStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  RegionReader reader(meta);
  std::vector<Tensor> out;
  absl::Status status = CheckCheckpointFits(meta, targets);
  for (size_t i = 0; status.ok() && i < targets.size(); ++i) {
    const CheckpointArrayInfo& a = *meta.Find(targets[i].name);
    if (runtime == nullptr) {
      absl::StatusOr<Literal> whole = reader.Read(a, WholeRanges(a.shape));
      status = whole.status();
      if (whole.ok()) out.push_back(Tensor::FromLiteral(std::move(*whole)));
      continue;
    }
    absl::StatusOr<spmd::Sharding> sharding = LoadSharding(meta, a, targets[i], runtime, mesh_text);
    status = sharding.status();
    if (!status.ok()) break;
    absl::StatusOr<Tensor> value = runtime->MakeShardedInput(
        a.shape, *sharding, [&](const spmd::Shard& shard) { return reader.Read(a, shard.index); });
    status = value.status();
    if (value.ok()) out.push_back(*std::move(value));
  }
  TESSEL_RETURN_IF_ERROR(ShareStatus(runtime, "checkpoint load", status));
  if (stats != nullptr) {
    stats->bytes = reader.bytes();
    stats->reads = reader.reads();
    stats->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return out;
}

}  // namespace tessel::mesh
