// The transport-specific part of a Communicator: how a message reaches another host.
//
// ZmqTransport sends over sockets; InProcTransport copies into the other host's mailbox.
// Incoming messages are handed to the receiving host's Mailbox by the transport.
#ifndef TESSEL_TRANSPORT_INTERNAL_HOST_LINK_H_
#define TESSEL_TRANSPORT_INTERNAL_HOST_LINK_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tessel/transport/internal/wire.h"

namespace tessel::transport::internal {

// Counts zero-copy sends whose payload the link may still read. A collective waits for all of
// them before it overwrites a region it sent from or returns (the caller's buffers must outlive
// the send). Thread-safe: Release is called from the link's I/O thread.
class SendTracker {
 public:
  void Acquire() {
    absl::MutexLock lock(&mu_);
    outstanding_.fetch_add(1, std::memory_order_relaxed);
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    outstanding_.fetch_sub(1, std::memory_order_release);
  }
  // Waits until every acquired send is released, first polling for up to `spin` (yielding the
  // core between checks, as Mailbox::Take), then asleep; false if `deadline` passed first.
  bool WaitAllReleased(absl::Time deadline, absl::Duration spin = absl::ZeroDuration()) {
    if (spin > absl::ZeroDuration()) {
      const auto until = std::chrono::steady_clock::now() +
                         absl::ToChronoNanoseconds(std::min(spin, deadline - absl::Now()));
      while (outstanding_.load(std::memory_order_acquire) != 0) {
        if (std::chrono::steady_clock::now() >= until) break;
        sched_yield();
      }
    }
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return outstanding_.load(std::memory_order_relaxed) == 0;
    };
    return mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  }
  int64_t outstanding() const { return outstanding_.load(std::memory_order_acquire); }

 private:
  mutable absl::Mutex mu_;
  // Changed only under mu_ (so Await sees every change); read without it while spinning.
  std::atomic<int64_t> outstanding_{0};
};

class HostLink {
 public:
  virtual ~HostLink() = default;

  // Sends `header` and `payload[0, bytes)` to host `dst_host` (never this host). With a
  // non-null `tracker` the link may keep reading `payload` after returning: it then calls
  // tracker->Acquire() before returning and tracker->Release() once when done. With a null
  // tracker the payload is copied before returning. Blocks at most until `deadline` when the
  // peer cannot take the message. Errors: kUnavailable if the peer is lost or the job failed,
  // kDeadlineExceeded.
  virtual absl::Status Send(int64_t dst_host, const WireHeader& header, const void* payload,
                            size_t bytes, SendTracker* tracker, absl::Time deadline) = 0;

  // Tells every other host that this job failed with `status` (best effort, bounded time).
  virtual void BroadcastAbort(const absl::Status& status) = 0;

  // Payloads at least this large are sent zero-copy when the caller offers a tracker.
  virtual size_t zero_copy_min_bytes() const = 0;
};

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_HOST_LINK_H_
