// CollectiveDeviceList: the replica groups of a collective (XLA's `replica_groups`), held in
// shared, immutable storage.
//
//   OpAttributes attrs;
//   attrs.replica_groups = {{0, 1}, {2, 3}};          // from a list, as before
//   for (const std::vector<int64_t>& group : attrs.replica_groups) ...
//   const std::vector<std::vector<int64_t>>& groups = attrs.replica_groups;   // read as a vector
//
// Copies share the groups (one reference count), so the partitioner can hand the same list to
// every collective that uses it: a 96-layer model on 8192 devices carries each distinct list
// once, not once per collective, and a reader (the simulator) can memoize per list through
// `identity()`. An empty list means one group of every device, as in XLA.
// Source: XLA `xla::CollectiveDeviceList` (collective_device_list.h), whose iota form
// (`IotaReplicaGroupList`) the HLO parser expands into this explicit one (ExpandIotaReplicaGroups)
// and the HLO printer writes back when the groups have one (FindIotaReplicaGroups).
#ifndef TESSEL_CORE_COLLECTIVE_DEVICE_LIST_H_
#define TESSEL_CORE_COLLECTIVE_DEVICE_LIST_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel {

class CollectiveDeviceList {
 public:
  using Groups = std::vector<std::vector<int64_t>>;
  using value_type = std::vector<int64_t>;
  using const_iterator = Groups::const_iterator;
  using iterator = const_iterator;

  // No groups (one group of every device).
  CollectiveDeviceList() = default;
  // Takes `groups` (global device ids; each group's order is the collective's rank order).
  CollectiveDeviceList(Groups groups)  // NOLINT: implicit, so a list assigns as it always did
      : groups_(groups.empty() ? nullptr : std::make_shared<const Groups>(std::move(groups))) {}
  CollectiveDeviceList(std::initializer_list<std::vector<int64_t>> groups)
      : CollectiveDeviceList(Groups(groups)) {}

  // The groups, readable wherever a `std::vector<std::vector<int64_t>>` is.
  const Groups& groups() const { return groups_ != nullptr ? *groups_ : Empty(); }
  operator const Groups&() const { return groups(); }  // NOLINT: implicit by design

  bool empty() const { return groups().empty(); }
  size_t size() const { return groups().size(); }
  const std::vector<int64_t>& operator[](size_t i) const { return groups()[i]; }
  const_iterator begin() const { return groups().begin(); }
  const_iterator end() const { return groups().end(); }

  // The same pointer for copies of one list (nullptr for an empty list): a memoization key.
  // Lists with equal groups built separately have different identities.
  const void* identity() const { return groups_.get(); }

  friend bool operator==(const CollectiveDeviceList& a, const CollectiveDeviceList& b) {
    return a.groups_ == b.groups_ || a.groups() == b.groups();
  }
  friend bool operator!=(const CollectiveDeviceList& a, const CollectiveDeviceList& b) {
    return !(a == b);
  }

 private:
  static const Groups& Empty() {
    static const Groups* empty = new Groups();
    return *empty;
  }

  std::shared_ptr<const Groups> groups_;
};

// XLA's iota spelling of replica groups, `[num_groups,group_size]<=[reshape_dims]T(perm)`: the
// device ids 0..N-1 (N = num_groups * group_size = product of reshape_dims) laid out row-major
// with dims `reshape_dims`, transposed by `transpose_perm` (output dim i is input dim perm[i]),
// flattened and cut into `num_groups` groups of `group_size`. Example: [2,2]<=[2,2]T(1,0) is
// {{0,2},{1,3}}. Source: XLA `IotaReplicaGroupList` (collective_device_list.h).
struct IotaReplicaGroups {
  int64_t num_groups = 0;
  int64_t group_size = 0;
  std::vector<int64_t> reshape_dims;
  std::vector<int64_t> transpose_perm;  // a permutation of 0..reshape_dims.size()-1

  // "[2,2]<=[2,2]T(1,0)"; the T(...) is left out when the permutation is the identity.
  std::string ToString() const;
  bool operator==(const IotaReplicaGroups&) const = default;
};

// The explicit groups of `iota`. Precondition (checked by the HLO parser, which reports bad
// text): positive dims whose product is num_groups * group_size, and a permutation of matching
// rank.
[[nodiscard]] std::vector<std::vector<int64_t>> ExpandIotaReplicaGroups(
    const IotaReplicaGroups& iota);

// The iota form of `groups`, if they have one: equal-size groups holding each of 0..N-1 once, in
// an order that a transposed row-major layout produces. The form is the smallest XLA would
// print: dims that stay adjacent through the transpose are merged, so {{0,1},{2,3}} gives
// [2,2]<=[4] and {{0,2},{1,3}} gives [2,2]<=[2,2]T(1,0). nullopt for anything else (an empty
// list, groups of different sizes, ids missing or repeated, an order no transpose gives).
[[nodiscard]] std::optional<IotaReplicaGroups> FindIotaReplicaGroups(
    const std::vector<std::vector<int64_t>>& groups);

}  // namespace tessel

#endif  // TESSEL_CORE_COLLECTIVE_DEVICE_LIST_H_
