// Distributed checkpoints of sharded arrays: every host writes only the shards it owns, one
// metadata file written last makes a checkpoint complete, and a checkpoint loads on any mesh
// (reshard on load), each host reading only the byte ranges its devices need.
// Source: the torch.distributed.checkpoint idea (each rank saves its local shards, the
// coordinator writes the global metadata; load plans read overlapping regions) and orbax's
// commit protocol (a step folder is valid once its metadata exists).
//
//   // Every host, at the same point of the program, after Sync():
//   TESSEL_RETURN_IF_ERROR(SaveCheckpoint(dir, step, arrays, attributes, runtime, mesh).status());
//   // Resuming, on the same mesh or another:
//   TESSEL_ASSIGN_OR_RETURN(std::string step_dir, LatestCheckpoint(dir));
//   TESSEL_ASSIGN_OR_RETURN(CheckpointMetadata meta, ReadCheckpointMetadata(step_dir));
//   TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> values,
//                           LoadCheckpointArrays(meta, targets, runtime, mesh, &stats));
//
// Layout on disk: DIR/step_<8 digits>/ holds one shard file per host
// (`host_<h>-<pid>-<nanoseconds>.shards`: the raw little-endian bytes of the host's owned shards,
// each the row-major unpadded data of one tile, back to back) and `metadata.json`:
//   {"format": "tessel-checkpoint-1", "step": N, "mesh": "<mesh text>", "num_devices": D,
//    "num_hosts": H, "attributes": {...caller's...},
//    "files": {"<file>": <size in bytes>, ...},
//    "arrays": [{"name": "wte", "dtype": "f32", "shape": [256, 128], "sharding": "{...}",
//                "shards": [{"index": [[0, 128], [0, 64]], "file": "...", "offset": 0,
//                            "bytes": 32768, "crc32": 123, "chunk_bytes": 65536,
//                            "chunk_crc32": [123]}, ...]}, ...]}
// Each tile is written once, by one of the devices holding a copy (spmd::Shard::replica_id),
// chosen by tile and array so that the copies' hosts share the writing (no gather to one host).
// Each file is written to a temporary name, fsynced and renamed (WriteFileAtomically); the metadata
// is written by host 0 after every host's file is in place, so a kill -9 at any moment leaves the
// previous checkpoint loadable and never a torn one; a step folder without metadata.json is ignored
// by LatestCheckpoint. A save into an existing step folder writes new file names, so the old
// metadata stays valid until the new one replaces it.
//
// Test hook (test only, never set in production): the environment variable
// TESSEL_TEST_CRASH_AT=<point>:<step> makes every host that reaches <point> of the save of
// checkpoint <step> call _exit(137), as a kill -9 there would. Points, in save order:
// `before_shards`, `mid_shards` (half of the host's shard file written to a temporary name),
// `after_shards` (the shard file renamed into place), `before_metadata` (every host's file in
// place; host 0 only) and `after_metadata` (the checkpoint is complete).
#ifndef TESSEL_MESH_RUNTIME_CHECKPOINT_H_
#define TESSEL_MESH_RUNTIME_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/runtime/host_runtime.h"
#include "tessel/spmd/sharding.h"

namespace tessel::mesh {

// One array to save: its name in the checkpoint and its (materialized) value.
struct CheckpointArray {
  std::string name;
  Tensor value;
};

// What one host wrote or read.
struct CheckpointIoStats {
  int64_t bytes = 0;   // shard bytes (metadata excluded)
  int64_t reads = 0;   // pread calls (loading) / files written (saving)
  double seconds = 0;  // wall time of the whole call, barriers included
};

// Saves `arrays` and `attributes` (a JSON object of the caller's scalars: step, rng, data
// position, model description) as checkpoint `step` under `dir` (created if missing). On a mesh
// (`runtime` not null) every host must call it at the same point with the same names, shapes and
// attributes; each value must be data (after Sync), normally mesh::ShardedData. A value held
// whole is written by host 0 alone. `mesh_text` describes the mesh (spmd::HybridMesh::ToString;
// "" for one device): a load on the same mesh keeps the saved shardings.
// Returns this host's bytes and files written. Errors (the same on every host: host 0's status
// is shared at the end): kInvalidArgument "cannot write checkpoint file ..." (disk, folder);
// kUnimplemented for a value with an unreduced or manual sharding; the transport's errors.
[[nodiscard]] absl::StatusOr<CheckpointIoStats> SaveCheckpoint(
    const std::string& dir, int64_t step, absl::Span<const CheckpointArray> arrays,
    const nlohmann::json& attributes, HostRuntime* runtime, const std::string& mesh_text);

// The step folder of the newest complete checkpoint under `dir` (the highest step_N holding
// metadata.json). Errors: kNotFound "checkpoint directory DIR does not exist" or "no complete
// checkpoint in DIR (no step_* folder with metadata.json)".
[[nodiscard]] absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

struct CheckpointShardInfo {
  std::vector<std::pair<int64_t, int64_t>> index;  // global [start, limit) per dim
  std::string file;                                // in the step folder
  int64_t offset = 0;
  int64_t bytes = 0;
  uint32_t crc32 = 0;  // zlib crc32 of the shard's bytes
  // zlib crc32 of each kCheckpointChunkBytes piece of the shard's bytes (the last one shorter),
  // so that a shard read only in part is checked too: the load reads the chunks its ranges touch
  // and checks each. Empty in checkpoints written before the chunks existed (then only whole
  // reads are checked).
  int64_t chunk_bytes = 0;
  std::vector<uint32_t> chunk_crc32;
};

// The size of the checksummed chunks of a shard (64 KiB): a partial read reads at most one chunk
// more at each end of each contiguous range it needs.
inline constexpr int64_t kCheckpointChunkBytes = 64 * 1024;

struct CheckpointArrayInfo {
  std::string name;
  Shape shape;           // global
  std::string sharding;  // XLA sharding text on the saving mesh ("" held whole)
  std::vector<CheckpointShardInfo> shards;
};

struct CheckpointMetadata {
  std::string step_dir;
  int64_t step = 0;
  std::string mesh;
  int64_t num_devices = 1;
  nlohmann::json attributes;
  std::vector<CheckpointArrayInfo> arrays;
  // The array named `name`, or nullptr.
  const CheckpointArrayInfo* Find(const std::string& name) const;
};

// Reads and checks `step_dir`/metadata.json: its fields and types, every shard inside its
// array's shape, the shards of each array adding up to its size, and every shard file present
// and long enough (a truncated file is caught here, before any data is read).
// Errors: kNotFound (no metadata.json), kDataLoss naming the file and the field or shard at
// fault ("checkpoint .../step_00000004: shard file host_1-...shards has 1000 bytes, shard 3 of
// array h0.attn.wq ends at 4096").
[[nodiscard]] absl::StatusOr<CheckpointMetadata> ReadCheckpointMetadata(
    const std::string& step_dir);

// What a load wants: an array's name and global shape, and the sharding to load it in on the
// current mesh (ignored on one device; nullopt: held whole).
struct CheckpointTarget {
  std::string name;
  Shape shape;
  std::optional<spmd::Sharding> sharding;
};

// Checks that `meta` holds exactly the targets' arrays, each with the same shape and dtype.
// Errors: kInvalidArgument "checkpoint DIR does not fit this model: array NAME is f32[256,64]
// in the checkpoint but f32[256,128] in the model" (or "it has no array NAME", or "it has array
// NAME, which the model lacks").
[[nodiscard]] absl::Status CheckCheckpointFits(const CheckpointMetadata& meta,
                                               absl::Span<const CheckpointTarget> targets);

// Loads `targets` from `meta` (CheckCheckpointFits first). On a mesh each value is built with
// HostRuntime::MakeShardedInput: each local device's piece is assembled from the saved shards
// that overlap it, reading only the chunks (kCheckpointChunkBytes) that hold the overlapping byte
// ranges (pread); a saved shard read whole is checked against its crc32, one read in part against
// the crc32 of each chunk read. When the checkpoint was saved on this mesh (`mesh_text` and the
// device count equal) a value keeps its saved sharding, so the programs after a resume are
// those of the uninterrupted run; otherwise it takes the target's. On one device (`runtime`
// null) each value is read whole. Every host must call it at the same point; a failure on any
// host fails every host with that host's message (nothing is returned, so nothing is half
// loaded). `stats` (optional) gets this host's bytes and reads.
// Errors: those of CheckCheckpointFits; kDataLoss for a crc mismatch or a short read, naming the
// file, the array and the shard; the transport's errors.
[[nodiscard]] absl::StatusOr<std::vector<Tensor>> LoadCheckpointArrays(
    const CheckpointMetadata& meta, absl::Span<const CheckpointTarget> targets,
    HostRuntime* runtime, const std::string& mesh_text, CheckpointIoStats* stats = nullptr);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_RUNTIME_CHECKPOINT_H_
