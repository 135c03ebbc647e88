// Everything a Communicator keeps about its host: the mailbox, the buffer pool, the traffic
// counters, the per-device sequence numbers and the link to the other hosts.
#ifndef TESSEL_TRANSPORT_INTERNAL_HOST_STATE_H_
#define TESSEL_TRANSPORT_INTERNAL_HOST_STATE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tessel/transport/collective_stats.h"
#include "tessel/transport/communicator.h"
#include "tessel/transport/internal/buffer_pool.h"
#include "tessel/transport/internal/host_link.h"
#include "tessel/transport/internal/mailbox.h"

namespace tessel::transport::internal {

// Thread-safe accumulator behind Communicator::stats().
class StatsRecorder {
 public:
  void Record(CollectiveKind kind, LinkClass link, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    stats_.Record(kind, link, bytes);
  }
  void CountCall(CollectiveKind kind) {
    absl::MutexLock lock(&mu_);
    ++stats_.Kind(kind).calls;
  }
  CollectiveStats Snapshot() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  void Reset() {
    absl::MutexLock lock(&mu_);
    stats_ = CollectiveStats();
  }

 private:
  mutable absl::Mutex mu_;
  CollectiveStats stats_ ABSL_GUARDED_BY(mu_);
};

// State of one local device, touched only by that device's thread.
struct DeviceState {
  uint64_t next_sequence = 0;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, uint32_t> p2p_sent;      // (dst, tag)
  absl::flat_hash_map<std::pair<int64_t, int64_t>, uint32_t> p2p_received;  // (src, tag)
};

class HostState {
 public:
  // The references must outlive this object (the Communicator owns them).
  HostState(int64_t rank, int64_t size, const DeviceMap& device_map,
            const CommunicatorOptions& options, const std::vector<int64_t>& local_devices);

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  const DeviceMap& device_map() const { return device_map_; }
  const CommunicatorOptions& options() const { return options_; }
  BufferPool& pool() { return pool_; }
  Mailbox& mailbox() { return mailbox_; }
  StatsRecorder& stats() { return stats_; }
  HostLink* link() const { return link_; }
  void set_link(HostLink* link) { link_ = link; }

  // Null if `device_id` is not owned by this host.
  DeviceState* device(int64_t device_id) {
    auto it = devices_.find(device_id);
    return it == devices_.end() ? nullptr : &it->second;
  }
  int64_t host_of(int64_t device_id) const { return device_map_.host_of_device[device_id]; }
  LinkClass Classify(int64_t src_device, int64_t dst_device) const;

  // Rendezvous call counter (one rendezvous at a time per host).
  uint64_t next_rendezvous = 0;

 private:
  const int64_t rank_;
  const int64_t size_;
  const DeviceMap& device_map_;
  const CommunicatorOptions& options_;
  // Declared before the mailbox: pooled payloads in the mailbox return here on destruction.
  BufferPool pool_;
  Mailbox mailbox_;
  StatsRecorder stats_;
  HostLink* link_ = nullptr;
  absl::flat_hash_map<int64_t, DeviceState> devices_;
};

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_HOST_STATE_H_
