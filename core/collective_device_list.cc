#include "tessel/core/collective_device_list.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel {

std::string IotaReplicaGroups::ToString() const {
  std::string text =
      absl::StrCat("[", num_groups, ",", group_size, "]<=[", absl::StrJoin(reshape_dims, ","), "]");
  bool identity = true;
  for (size_t i = 0; i < transpose_perm.size(); ++i) {
    identity = identity && transpose_perm[i] == static_cast<int64_t>(i);
  }
  if (!identity) absl::StrAppend(&text, "T(", absl::StrJoin(transpose_perm, ","), ")");
  return text;
}

std::vector<std::vector<int64_t>> ExpandIotaReplicaGroups(const IotaReplicaGroups& iota) {
  const std::vector<int64_t>& dims = iota.reshape_dims;
  const std::vector<int64_t>& perm = iota.transpose_perm;
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t num_devices = iota.num_groups * iota.group_size;
  // Row-major strides of the untransposed layout.
  std::vector<int64_t> strides(rank, 1);
  for (int64_t i = rank - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  std::vector<std::vector<int64_t>> groups(iota.num_groups);
  std::vector<int64_t> index(rank, 0);  // multi-index into the transposed array
  for (int64_t t = 0; t < num_devices; ++t) {
    int64_t id = 0;
    for (int64_t i = 0; i < rank; ++i) id += index[i] * strides[perm[i]];
    groups[t / iota.group_size].push_back(id);
    for (int64_t i = rank - 1; i >= 0; --i) {
      if (++index[i] < dims[perm[i]]) break;
      index[i] = 0;
    }
  }
  return groups;
}

std::optional<IotaReplicaGroups> FindIotaReplicaGroups(
    const std::vector<std::vector<int64_t>>& groups) {
  if (groups.empty() || groups[0].empty()) return std::nullopt;
  const int64_t group_size = static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> ids;
  for (const std::vector<int64_t>& group : groups) {
    if (static_cast<int64_t>(group.size()) != group_size) return std::nullopt;
    ids.insert(ids.end(), group.begin(), group.end());
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<bool> seen(n, false);
  for (int64_t id : ids) {
    if (id < 0 || id >= n || seen[id]) return std::nullopt;
    seen[id] = true;
  }
  // Read the flattened ids as a mixed-radix number, innermost digit first: position `block`
  // (every inner digit 0) holds the next digit's stride, and the digit runs while positions
  // block * k hold k * stride. Contiguous dims merge here, which keeps the form smallest.
  struct Dim {
    int64_t extent;
    int64_t stride;
  };
  std::vector<Dim> inner_first;
  int64_t block = 1;
  while (block < n) {
    const int64_t stride = ids[block];
    int64_t extent = 2;
    while (block * extent < n && ids[block * extent] == extent * stride) ++extent;
    if (stride == 0 || n % (block * extent) != 0) return std::nullopt;
    inner_first.push_back({extent, stride});
    block *= extent;
  }
  if (inner_first.empty()) inner_first.push_back({1, 1});  // a single device
  // Every position must follow the digits.
  for (int64_t t = 0; t < n; ++t) {
    int64_t rest = t, id = 0;
    for (const Dim& d : inner_first) {
      id += (rest % d.extent) * d.stride;
      rest /= d.extent;
    }
    if (id != ids[t]) return std::nullopt;
  }
  // The layout before the transpose: the dims by decreasing stride must be row-major.
  const int64_t rank = static_cast<int64_t>(inner_first.size());
  std::vector<int64_t> by_stride(rank);  // dims of inner_first, largest stride first
  std::iota(by_stride.begin(), by_stride.end(), 0);
  std::sort(by_stride.begin(), by_stride.end(),
            [&](int64_t a, int64_t b) { return inner_first[a].stride > inner_first[b].stride; });
  IotaReplicaGroups iota;
  iota.num_groups = static_cast<int64_t>(groups.size());
  iota.group_size = group_size;
  int64_t expected_stride = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    const Dim& d = inner_first[by_stride[i]];
    if (d.stride != expected_stride) return std::nullopt;
    expected_stride *= d.extent;
  }
  std::vector<int64_t> position_of(rank);  // inner_first dim -> index in reshape_dims
  for (int64_t i = 0; i < rank; ++i) {
    iota.reshape_dims.push_back(inner_first[by_stride[i]].extent);
    position_of[by_stride[i]] = i;
  }
  // Output (transposed) dims run outermost first: inner_first reversed.
  for (int64_t i = rank - 1; i >= 0; --i) iota.transpose_perm.push_back(position_of[i]);
  return iota;
}

}  // namespace tessel
