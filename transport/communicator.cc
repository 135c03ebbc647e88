#include "tessel/transport/communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/fingerprint.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/internal/algorithms.h"
#include "tessel/transport/internal/call_context.h"
#include "tessel/transport/internal/groups.h"
#include "tessel/transport/internal/host_state.h"
#include "tessel/transport/internal/reduce.h"

namespace tessel::transport {

using internal::CallContext;
using internal::CallSignature;
using internal::GroupView;

DeviceMap DeviceMap::Uniform(int64_t num_hosts, int64_t devices_per_host, int64_t hosts_per_slice) {
  TESSEL_CHECK(num_hosts > 0 && devices_per_host > 0 && hosts_per_slice > 0);
  TESSEL_CHECK(num_hosts % hosts_per_slice == 0);
  DeviceMap map;
  for (int64_t h = 0; h < num_hosts; ++h) {
    for (int64_t d = 0; d < devices_per_host; ++d) {
      map.host_of_device.push_back(h);
      map.slice_of_device.push_back(h / hosts_per_slice);
    }
  }
  return map;
}

absl::Status DeviceMap::Validate(int64_t num_hosts) const {
  if (host_of_device.size() != slice_of_device.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device map: host_of_device has ", host_of_device.size(),
                     " entries but slice_of_device has ", slice_of_device.size()));
  }
  if (host_of_device.empty()) return absl::InvalidArgumentError("device map: no devices");
  if (num_hosts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("device map: ", num_hosts, " hosts"));
  }
  std::vector<int64_t> slice_of_host(num_hosts, -1);
  for (size_t d = 0; d < host_of_device.size(); ++d) {
    const int64_t h = host_of_device[d];
    const int64_t s = slice_of_device[d];
    if (h < 0 || h >= num_hosts) {
      return absl::InvalidArgumentError(absl::StrCat("device map: host_of_device[", d, "] = ", h,
                                                     " is outside [0, ", num_hosts, ")"));
    }
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device map: slice_of_device[", d, "] = ", s, " is negative"));
    }
    if (slice_of_host[h] >= 0 && slice_of_host[h] != s) {
      return absl::InvalidArgumentError(
          absl::StrCat("device map: host ", h, " has devices in slices ", slice_of_host[h], " and ",
                       s, " (device ", d, "); a host lives in one slice"));
    }
    slice_of_host[h] = s;
  }
  for (int64_t h = 0; h < num_hosts; ++h) {
    if (slice_of_host[h] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("device map: host ", h, " owns no device"));
    }
  }
  return absl::OkStatus();
}

uint64_t DeviceMap::Fingerprint() const {
  tessel::Fingerprint h;
  h.U64(host_of_device.size());
  for (int64_t v : host_of_device) h.Int(v);
  for (int64_t v : slice_of_device) h.Int(v);
  return h.value();
}

absl::Duration EffectiveSpinWait(const CommunicatorOptions& options,
                                 int64_t devices_on_this_machine, int64_t hardware_threads) {
  if (options.spin_wait.has_value()) return *options.spin_wait;
  if (hardware_threads <= 0) {
    hardware_threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  }
  return devices_on_this_machine <= hardware_threads ? kDefaultSpinWait : absl::ZeroDuration();
}

Communicator::Communicator(int64_t rank, int64_t size, DeviceMap device_map,
                           CommunicatorOptions options)
    : rank_(rank), size_(size), device_map_(std::move(device_map)), options_(options) {
  TESSEL_CHECK_OK(device_map_.Validate(size_));
  TESSEL_CHECK(rank_ >= 0 && rank_ < size_);
  for (int64_t d = 0; d < device_map_.num_devices(); ++d) {
    if (device_map_.host_of_device[d] == rank_) local_device_ids_.push_back(d);
  }
  devices_on_this_machine_ = device_map_.num_devices();
  state_ =
      std::make_unique<internal::HostState>(rank_, size_, device_map_, options_, local_device_ids_);
}

Communicator::~Communicator() = default;

void Communicator::set_link(internal::HostLink* link) { state_->set_link(link); }

CollectiveStats Communicator::stats() const { return state_->stats().Snapshot(); }
void Communicator::ResetStats() { state_->stats().Reset(); }
absl::Status Communicator::health() const { return state_->mailbox().failure(); }

namespace {

absl::Status CheckCount(int64_t element_count, const void* a, const void* b) {
  if (element_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("element_count must be >= 0, got ", element_count));
  }
  if (element_count > 0 && (a == nullptr || b == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("null buffer for ", element_count, " elements"));
  }
  return absl::OkStatus();
}

// Errors: kInvalidArgument if [input, +bytes) and [output, +bytes) overlap: `what` sends from
// the input while it writes the output, so it cannot run in place.
absl::Status CheckDisjoint(const char* what, const void* input, void* output, int64_t bytes) {
  const auto in = reinterpret_cast<uintptr_t>(input);
  const auto out = reinterpret_cast<uintptr_t>(output);
  if (bytes > 0 && in < out + static_cast<uintptr_t>(bytes) &&
      out < in + static_cast<uintptr_t>(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the input and output buffers overlap (", bytes,
                     " bytes each); it cannot run in place, pass a separate output"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Shared prologue of every collective: numbers the call on the device and runs `body` inside
// a CallContext.
template <typename Body>
absl::Status RunCollective(internal::HostState& host, int64_t device_id, CallSignature signature,
                           const ReplicaGroups* groups, const SourceTargetPairs* pairs,
                           Body&& body) {
  internal::DeviceState* device = host.device(device_id);
  if (device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(signature.kind), ": device ",
                                                   device_id, " is not owned by host ",
                                                   host.rank()));
  }
  CallContext ctx(host, device_id, device->next_sequence++, signature, groups, pairs);
  absl::Status status = ctx.Begin();
  if (status.ok()) status = body(ctx);
  return ctx.Finish(std::move(status));
}

absl::StatusOr<GroupView> Resolve(const Communicator& comm, CollectiveKind kind,
                                  const ReplicaGroups& groups, int64_t device_id) {
  if (device_id < 0 || device_id >= comm.device_map().num_devices() ||
      comm.device_map().host_of_device[device_id] != comm.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(kind), ": device ", device_id, " is not owned by host ",
                     comm.rank(), " (it owns ", absl::StrJoin(comm.local_device_ids(), ","), ")"));
  }
  absl::StatusOr<GroupView> view =
      internal::ResolveGroup(groups, comm.device_map().num_devices(), device_id);
  if (!view.ok()) {
    return absl::Status(view.status().code(),
                        absl::StrCat(CollectiveKindName(kind), ": ", view.status().message()));
  }
  return view;
}

CallSignature Signature(CollectiveKind kind, DType dtype, int reduce, int64_t count,
                        uint64_t group_id) {
  CallSignature s;
  s.kind = kind;
  s.dtype = dtype;
  s.reduce_kind = static_cast<uint8_t>(reduce);
  s.element_count = count;
  s.group_id = group_id;
  return s;
}

}  // namespace

absl::Status Communicator::AllReduce(int64_t device_id, const ReplicaGroups& groups,
                                     ReduceKind kind, DType dtype, const void* input, void* output,
                                     int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckCount(element_count, input, output));
  TESSEL_RETURN_IF_ERROR(internal::CheckReduction(kind, dtype));
  TESSEL_ASSIGN_OR_RETURN(GroupView view,
                          Resolve(*this, CollectiveKind::kAllReduce, groups, device_id));
  return RunCollective(*state_, device_id,
                       Signature(CollectiveKind::kAllReduce, dtype, static_cast<int>(kind),
                                 element_count, view.groups_id),
                       &groups, nullptr, [&](CallContext& ctx) {
                         return internal::RunAllReduce(ctx, view, device_map_, input, output,
                                                       element_count);
                       });
}

absl::Status Communicator::AllGather(int64_t device_id, const ReplicaGroups& groups, DType dtype,
                                     const void* input, void* output, int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckCount(element_count, input, output));
  TESSEL_ASSIGN_OR_RETURN(GroupView view,
                          Resolve(*this, CollectiveKind::kAllGather, groups, device_id));
  return RunCollective(
      *state_, device_id,
      Signature(CollectiveKind::kAllGather, dtype, 0xff, element_count, view.groups_id), &groups,
      nullptr, [&](CallContext& ctx) {
        return internal::RunAllGather(ctx, view, device_map_, input, output, element_count);
      });
}

absl::Status Communicator::ReduceScatter(int64_t device_id, const ReplicaGroups& groups,
                                         ReduceKind kind, DType dtype, const void* input,
                                         void* output, int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckCount(element_count, input, output));
  TESSEL_RETURN_IF_ERROR(internal::CheckReduction(kind, dtype));
  TESSEL_ASSIGN_OR_RETURN(GroupView view,
                          Resolve(*this, CollectiveKind::kReduceScatter, groups, device_id));
  return RunCollective(*state_, device_id,
                       Signature(CollectiveKind::kReduceScatter, dtype, static_cast<int>(kind),
                                 element_count, view.groups_id),
                       &groups, nullptr, [&](CallContext& ctx) {
                         return internal::RunReduceScatter(ctx, view, device_map_, input, output,
                                                           element_count);
                       });
}

absl::Status Communicator::AllToAll(int64_t device_id, const ReplicaGroups& groups, DType dtype,
                                    const void* input, void* output, int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckCount(element_count, input, output));
  TESSEL_ASSIGN_OR_RETURN(GroupView view,
                          Resolve(*this, CollectiveKind::kAllToAll, groups, device_id));
  TESSEL_RETURN_IF_ERROR(
      CheckDisjoint("all-to-all", input, output, view.size() * element_count * ByteWidth(dtype)));
  return RunCollective(
      *state_, device_id,
      Signature(CollectiveKind::kAllToAll, dtype, 0xff, element_count, view.groups_id), &groups,
      nullptr, [&](CallContext& ctx) {
        return internal::RunAllToAll(ctx, view, input, output, element_count);
      });
}

absl::Status Communicator::CollectivePermute(int64_t device_id, const SourceTargetPairs& pairs,
                                             DType dtype, const void* input, void* output,
                                             int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckCount(element_count, input, output));
  TESSEL_RETURN_IF_ERROR(
      CheckDisjoint("collective-permute", input, output, element_count * ByteWidth(dtype)));
  TESSEL_ASSIGN_OR_RETURN(GroupView unused,
                          Resolve(*this, CollectiveKind::kCollectivePermute, {}, device_id));
  (void)unused;
  const int64_t num_devices = device_map_.num_devices();
  std::vector<bool> is_source(num_devices, false);
  std::vector<bool> is_target(num_devices, false);
  int64_t source = -1;
  int64_t target = -1;
  for (const auto& [s, t] : pairs) {
    if (s < 0 || s >= num_devices || t < 0 || t >= num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collective-permute: source_target_pairs=", internal::PairsToString(pairs), ": pair {", s,
          ",", t, "} names a device outside the job's ", num_devices, " devices"));
    }
    if (is_source[s] || is_target[t]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collective-permute: source_target_pairs=", internal::PairsToString(pairs), ": device ",
          is_source[s] ? s : t, " is the ", is_source[s] ? "source" : "target", " of two pairs"));
    }
    is_source[s] = true;
    is_target[t] = true;
    if (s == device_id) target = t;
    if (t == device_id) source = s;
  }
  return RunCollective(*state_, device_id,
                       Signature(CollectiveKind::kCollectivePermute, dtype, 0xff, element_count,
                                 internal::PairsFingerprint(pairs)),
                       nullptr, &pairs, [&](CallContext& ctx) {
                         return internal::RunCollectivePermute(ctx, source, target, input, output,
                                                               element_count);
                       });
}

absl::Status Communicator::Broadcast(int64_t device_id, const ReplicaGroups& groups,
                                     int64_t root_index, DType dtype, void* buffer,
                                     int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckCount(element_count, buffer, buffer));
  TESSEL_ASSIGN_OR_RETURN(GroupView view,
                          Resolve(*this, CollectiveKind::kBroadcast, groups, device_id));
  if (root_index < 0 || root_index >= view.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast: root_index ", root_index, " is outside device ", device_id, "'s group of ",
        view.size(), " in replica_groups=", internal::GroupsToString(groups)));
  }
  // The root position is part of what all members must agree on.
  const uint64_t group_id =
      view.groups_id ^ (static_cast<uint64_t>(root_index) * 0x9E3779B97F4A7C15ULL);
  return RunCollective(*state_, device_id,
                       Signature(CollectiveKind::kBroadcast, dtype, 0xff, element_count, group_id),
                       &groups, nullptr, [&](CallContext& ctx) {
                         return internal::RunBroadcast(ctx, view, root_index, buffer,
                                                       element_count);
                       });
}

absl::Status Communicator::Barrier(int64_t device_id, const ReplicaGroups& groups) {
  TESSEL_ASSIGN_OR_RETURN(GroupView view,
                          Resolve(*this, CollectiveKind::kBarrier, groups, device_id));
  return RunCollective(*state_, device_id,
                       Signature(CollectiveKind::kBarrier, DType::kPred, 0xff, 0, view.groups_id),
                       &groups, nullptr,
                       [&](CallContext& ctx) { return internal::RunBarrier(ctx, view); });
}

}  // namespace tessel::transport
