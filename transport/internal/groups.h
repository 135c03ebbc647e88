// Replica groups: validation, the calling device's group, fingerprints and text.
//
//   absl::StatusOr<GroupView> g = ResolveGroup({{0, 1}, {2, 3}}, /*num_devices=*/4, 3);
//   g->members == {2, 3};  g->index == 1;
#ifndef TESSEL_TRANSPORT_INTERNAL_GROUPS_H_
#define TESSEL_TRANSPORT_INTERNAL_GROUPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/transport/communicator.h"

namespace tessel::transport::internal {

// The group a device takes part in.
struct GroupView {
  std::vector<int64_t> members;  // global device ids in group (rank) order
  int64_t index = 0;             // position of the calling device in `members`
  uint64_t groups_id = 0;        // GroupsFingerprint of the whole replica-group list

  int64_t size() const { return static_cast<int64_t>(members.size()); }
};

// Validates `groups` for a job of `num_devices` devices and returns the group of `device_id`.
// Errors: kInvalidArgument (with the groups text) if an id is outside [0, num_devices), an id
// appears twice, a group is empty, or `device_id` is in no group.
[[nodiscard]] absl::StatusOr<GroupView> ResolveGroup(const ReplicaGroups& groups,
                                                     int64_t num_devices, int64_t device_id);

// FNV-1a over the group list (the empty list hashes as "all devices" of `num_devices`).
[[nodiscard]] uint64_t GroupsFingerprint(const ReplicaGroups& groups, int64_t num_devices);
[[nodiscard]] uint64_t PairsFingerprint(const SourceTargetPairs& pairs);

// XLA text: "{{0,1},{2,3}}"; "{}" for the empty list. Long lists are cut after 16 groups.
[[nodiscard]] std::string GroupsToString(const ReplicaGroups& groups);
[[nodiscard]] std::string PairsToString(const SourceTargetPairs& pairs);

// Splits `view.members` by slice for the hierarchical all-reduce. Returns false (flat) unless
// the members lie in >= 2 slices with the same count (>= 2) in each. On true, `slices[j]` lists
// the members of the j-th slice in order of first appearance, in group order, and
// (my_slice, my_local) locate the calling device.
bool SplitBySlice(const GroupView& view, const DeviceMap& map,
                  std::vector<std::vector<int64_t>>* slices, int64_t* my_slice, int64_t* my_local);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_GROUPS_H_
