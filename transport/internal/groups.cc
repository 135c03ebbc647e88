#include "tessel/transport/internal/groups.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/fingerprint.h"

namespace tessel::transport::internal {

absl::StatusOr<GroupView> ResolveGroup(const ReplicaGroups& groups, int64_t num_devices,
                                       int64_t device_id) {
  GroupView view;
  view.groups_id = GroupsFingerprint(groups, num_devices);
  if (groups.empty()) {
    view.members.resize(num_devices);
    for (int64_t d = 0; d < num_devices; ++d) view.members[d] = d;
    view.index = device_id;
    return view;
  }
  std::vector<bool> seen(num_devices, false);
  int64_t found = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica_groups=", GroupsToString(groups), ": group ", g, " is empty"));
    }
    for (int64_t id : groups[g]) {
      if (id < 0 || id >= num_devices) {
        return absl::InvalidArgumentError(absl::StrCat("replica_groups=", GroupsToString(groups),
                                                       ": device id ", id, " is outside the job's ",
                                                       num_devices, " devices"));
      }
      if (seen[id]) {
        return absl::InvalidArgumentError(absl::StrCat("replica_groups=", GroupsToString(groups),
                                                       ": device ", id, " appears twice"));
      }
      seen[id] = true;
      if (id == device_id) found = static_cast<int64_t>(g);
    }
  }
  if (found < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device_id, " is not in replica_groups=", GroupsToString(groups)));
  }
  view.members = groups[found];
  view.index =
      std::find(view.members.begin(), view.members.end(), device_id) - view.members.begin();
  return view;
}

uint64_t GroupsFingerprint(const ReplicaGroups& groups, int64_t num_devices) {
  Fingerprint h;
  if (groups.empty()) {
    h.U64(1);
    h.Int(num_devices);
    for (int64_t d = 0; d < num_devices; ++d) h.Int(d);
    return h.value();
  }
  h.U64(groups.size());
  for (const auto& group : groups) {
    h.U64(group.size());
    for (int64_t id : group) h.Int(id);
  }
  return h.value();
}

uint64_t PairsFingerprint(const SourceTargetPairs& pairs) {
  Fingerprint h;
  h.U64(0x7065726d75746500ULL);  // "permute": differs from any group list
  h.U64(pairs.size());
  for (const auto& [source, target] : pairs) h.Int(source).Int(target);
  return h.value();
}

std::string GroupsToString(const ReplicaGroups& groups) {
  std::string out = "{";
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g == 16) {
      absl::StrAppend(&out, ",... (", groups.size(), " groups)");
      break;
    }
    absl::StrAppend(&out, g ? "," : "", "{", absl::StrJoin(groups[g], ","), "}");
  }
  return out + "}";
}

std::string PairsToString(const SourceTargetPairs& pairs) {
  std::string out = "{";
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i == 16) {
      absl::StrAppend(&out, ",... (", pairs.size(), " pairs)");
      break;
    }
    absl::StrAppend(&out, i ? "," : "", "{", pairs[i].first, ",", pairs[i].second, "}");
  }
  return out + "}";
}

bool SplitBySlice(const GroupView& view, const DeviceMap& map,
                  std::vector<std::vector<int64_t>>* slices, int64_t* my_slice, int64_t* my_local) {
  slices->clear();
  std::vector<int64_t> slice_ids;
  for (int64_t id : view.members) {
    const int64_t slice = map.slice_of_device[id];
    auto it = std::find(slice_ids.begin(), slice_ids.end(), slice);
    if (it == slice_ids.end()) {
      slice_ids.push_back(slice);
      slices->emplace_back();
      it = slice_ids.end() - 1;
    }
    (*slices)[it - slice_ids.begin()].push_back(id);
  }
  if (slices->size() < 2) return false;
  const size_t per_slice = (*slices)[0].size();
  if (per_slice < 2) return false;
  for (const auto& s : *slices) {
    if (s.size() != per_slice) return false;
  }
  const int64_t me = view.members[view.index];
  for (size_t j = 0; j < slices->size(); ++j) {
    auto it = std::find((*slices)[j].begin(), (*slices)[j].end(), me);
    if (it != (*slices)[j].end()) {
      *my_slice = static_cast<int64_t>(j);
      *my_local = it - (*slices)[j].begin();
    }
  }
  return true;
}

}  // namespace tessel::transport::internal
