// libFuzzer target: mesh shape and partition spec parsing (what `tessel mesh --mesh-shape` and
// mark_sharding's partition_spec read). The input is three lines:
//
//   4,2            the mesh shape (comma-separated integers; at most 4096 devices here)
//   x,y            the axis names (comma-separated, may be empty: an unnamed mesh)
//   x,None,(x,y)   the partition spec text, PartitionSpec::Parse's command-line form
//
// Mesh::Create, PartitionSpec::Parse and ShardingFromPartitionSpec must return an error status
// for bad input, never crash; a spec that parses must read back from its ToString().
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"

namespace {

constexpr int64_t kMaxDevices = 4096;  // the fuzzer explores parsing, not large meshes

// absl::string_view: this abseil's string_view is its own type, not std::string_view.
std::vector<std::string> Lines(absl::string_view text) {
  std::vector<std::string> lines = absl::StrSplit(text, absl::MaxSplits(absl::ByChar('\n'), 2));
  lines.resize(3);
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessel::spmd::Mesh;
  using tessel::spmd::PartitionSpec;
  const std::vector<std::string> lines =
      Lines(absl::string_view(reinterpret_cast<const char*>(data), size));

  absl::StatusOr<PartitionSpec> spec = PartitionSpec::Parse(lines[2]);
  if (spec.ok()) {
    const std::string printed = spec->ToString();
    absl::StatusOr<PartitionSpec> back = PartitionSpec::Parse(printed);
    if (!back.ok() || !(*back == *spec)) {
      std::fprintf(stderr, "partition spec \"%s\" does not read back\n", printed.c_str());
      std::abort();
    }
  }

  std::vector<int64_t> shape;
  int64_t devices = 1;
  for (absl::string_view field : absl::StrSplit(lines[0], ',')) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(field, &d)) return 0;
    shape.push_back(d);
    // Mesh::Create checks the shape itself; only the id list built here needs a bound.
    // Both factors are at most kMaxDevices + 1 here, so the product cannot overflow.
    if (d > 0 && devices <= kMaxDevices) devices *= std::min(d, kMaxDevices + 1);
  }
  if (devices > kMaxDevices) devices = kMaxDevices;
  std::vector<int64_t> ids(static_cast<size_t>(devices));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<std::string> names;
  if (!lines[1].empty()) names = absl::StrSplit(lines[1], ',');
  absl::StatusOr<Mesh> mesh = Mesh::Create(ids, shape, names);
  if (!mesh.ok() || !spec.ok()) return 0;
  (void)tessel::spmd::ShardingFromPartitionSpec(*mesh, spec->size(), *spec);
  // A rank other than the spec's size must be refused cleanly too.
  (void)tessel::spmd::ShardingFromPartitionSpec(*mesh, spec->size() + 1, *spec);
  return 0;
}
