// Parsing of the list-valued flags shared by `tessel` subcommands (--mesh-shape 2,4,
// --axis-names data,model, ...).
#ifndef TESSEL_TOOLS_FLAG_PARSING_H_
#define TESSEL_TOOLS_FLAG_PARSING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/mesh/topology/topology.h"

namespace tessel::tools {

// "1,4,1" -> {1, 4, 1}; spaces around entries allowed; a blank text is an empty list. At most
// 15 digits an entry keeps every product of a few entries checkable in int64.
// Errors: kInvalidArgument naming `flag` and the text when an entry is not an integer of at
// most 15 digits.
[[nodiscard]] absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& text,
                                                             const std::string& flag);

// The device ids 0..n-1 of a mesh of `shape` given without --device-ids (n = the product of the
// positive dims; a non-positive dim is left to spmd::Mesh::Create's message). Errors:
// kInvalidArgument naming `flag` when n passes 2^24 (the list would fill memory).
[[nodiscard]] absl::StatusOr<std::vector<int64_t>> DefaultDeviceIds(
    const std::vector<int64_t>& shape, const std::string& flag);

// The line (from 1) of each instruction of the ENTRY computation in the HLO text file at `path`,
// by name (without '%'); empty when the file cannot be read.
absl::flat_hash_map<std::string, int> EntryLines(const std::string& path);

// `status` with "<path>: line N: " in front when its message starts with "%name:" and name is an
// ENTRY instruction of the HLO text file at `path` (errors found after parsing, e.g. a bad
// sharding, then point at the line like parse errors do); `status` unchanged otherwise.
absl::Status WithHloLine(const std::string& path, const absl::Status& status);

// "data, model" -> {"data", "model"}; a blank text is an empty list.
std::vector<std::string> ParseNames(const std::string& text);

// CONFIG, or with `num_slices` > 1 that many copies of its one slice joined by its DCN
// (MaxText's num_slices: identical slices), named "Nx NAME" (`--num-slices`). Errors: those of
// mesh::LoadTopology and mesh::ParseTopology; kInvalidArgument when CONFIG has several slices
// or when the copies would hold more than mesh::kMaxDevices devices.
[[nodiscard]] absl::StatusOr<mesh::Topology> LoadSlices(const std::string& path,
                                                        int64_t num_slices);

}  // namespace tessel::tools

#endif  // TESSEL_TOOLS_FLAG_PARSING_H_
