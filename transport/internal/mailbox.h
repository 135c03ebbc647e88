// Where a host's incoming messages wait for the device that consumes them, with the matching
// checks (same collective at the same sequence number) and the job's failure state.
//
// Every message is keyed by (channel, destination, source, sequence, phase, step, segment); a
// device asks for exactly the key it expects next (Take), so messages may arrive in any order.
//
//   Mailbox box(/*rank=*/0, /*local_devices=*/{0, 1});
//   box.BeginCall(0, /*sequence=*/7, signature);        // device 0 enters its call #7
//   absl::StatusOr<Message> m = box.Take(key, deadline); // waits for the peer's message
//   box.EndCall(0);
#ifndef TESSEL_TRANSPORT_INTERNAL_MAILBOX_H_
#define TESSEL_TRANSPORT_INTERNAL_MAILBOX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tessel/transport/internal/buffer_pool.h"
#include "tessel/transport/internal/doorbell.h"
#include "tessel/transport/internal/wire.h"

namespace tessel::transport::internal {

// A received message. `payload` is null when the header says 0 payload bytes.
struct Message {
  WireHeader header;
  std::unique_ptr<Payload> payload;

  const std::byte* data() const { return payload ? payload->data() : nullptr; }
  size_t size() const { return payload ? payload->size() : 0; }
};

struct MailKey {
  Channel channel = Channel::kCollective;
  int64_t dst = 0;
  int64_t src = 0;
  uint64_t sequence = 0;
  uint8_t phase = 0;
  uint32_t step = 0;
  uint32_t segment = 0;

  static MailKey Of(const WireHeader& h) {
    return MailKey{h.channel, h.dst, h.src, h.sequence, h.phase, h.step, h.segment};
  }
  bool operator==(const MailKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const MailKey& k) {
    return H::combine(std::move(h), static_cast<uint8_t>(k.channel), k.dst, k.src, k.sequence,
                      k.phase, k.step, k.segment);
  }
};

class Mailbox {
 public:
  // `rank` is this host; `local_devices` the devices that may wait here (plus the host itself
  // for rendezvous messages, whose dst is a host rank). `spin_wait`: how long Take polls before
  // it sleeps (CommunicatorOptions::spin_wait); zero sleeps at once.
  Mailbox(int64_t rank, const std::vector<int64_t>& local_devices,
          absl::Duration spin_wait = absl::ZeroDuration());
  ~Mailbox();

  // Called (outside the mailbox lock) with the failure when Fail(status, /*broadcast=*/true)
  // sets it: the transport tells the other hosts. Set once, before traffic starts.
  void set_abort_callback(std::function<void(const absl::Status&)> callback) {
    abort_callback_ = std::move(callback);
  }

  // Waiters sleep on (and Deliver, Fail and MarkDeparted ring) `bells[DoorbellIndex(dst)]`, an
  // array of kDoorbells kept alive by `owner` (held as long as the mailbox), instead of the
  // mailbox's own: the ZmqTransport passes the bells of its shared-memory segment, which
  // senders in other processes ring after they fill a slot. Set once, before traffic starts.
  void UseDoorbells(Doorbell* bells, std::shared_ptr<const void> owner);

  // Called by a waiting Take, without the mailbox lock, before every look for its message and
  // after every ring: delivers what waits outside the mailbox (the ZmqTransport's
  // shared-memory header queues), so the waiting thread takes its message without a hop
  // through another thread. Thread-safe; may call Deliver and Fail. Set once, before traffic.
  void set_poller(std::function<void()> poller) { poller_ = std::move(poller); }

  // Stores an incoming message and wakes its device. A collective message whose signature
  // differs from the destination's current call at that sequence number, that arrives for a
  // call the destination already finished, or that duplicates a pending key, fails the job.
  void Deliver(Message message);

  // Device `device` starts its collective call `sequence` with `signature`. Errors: the job's
  // failure; kFailedPrecondition (also failing the job) if a message that already arrived for
  // this call carries another signature.
  [[nodiscard]] absl::Status BeginCall(int64_t device, uint64_t sequence,
                                       const CallSignature& signature);
  void EndCall(int64_t device);

  // Removes and returns the message with `key` (sent by host `src_host`), waiting until it
  // arrives: first polling the destination's doorbell for up to spin_wait (yielding the core
  // between checks, no lock held), then asleep on it (SleepOnDoorbell); the poller runs before
  // every look. Errors: the job's failure (any code, see Fail); kUnavailable if `src_host` left
  // the job (MarkDeparted) without sending it; kDeadlineExceeded at `deadline`. A message whose
  // payload is not ready() yet (its sender is still copying it into shared memory) is returned once
  // it is, polling; a payload whose ready() fails (kDataLoss: a corrupt shared-memory segment)
  // fails the job with that error, broadcast, prefixed "host <rank>: ".
  [[nodiscard]] absl::StatusOr<Message> Take(const MailKey& key, int64_t src_host,
                                             absl::Time deadline);

  // Host `host` shut down cleanly. Its messages arrive before its goodbye, so a message from it
  // that is still missing will never come: waits for one fail at once.
  void MarkDeparted(int64_t host);

  // Marks the job failed with `status` (the first failure wins; later ones are dropped) and
  // wakes every waiter. With `broadcast`, the abort callback tells the other hosts.
  void Fail(const absl::Status& status, bool broadcast);

  // OK or the first failure.
  [[nodiscard]] absl::Status failure() const;

  // Messages delivered but not yet taken.
  [[nodiscard]] size_t pending() const;

 private:
  struct Slot {
    // Rung by every Deliver to this slot (after the message is in), Fail and MarkDeparted: a
    // waiting Take re-checks when its sequence moves. Shared by the slots of equal
    // DoorbellIndex; fixed once traffic starts.
    Doorbell* bell = nullptr;
    bool active = false;         // inside a collective call
    uint64_t sequence = 0;       // of the current call when active
    uint64_t next_sequence = 0;  // calls finished so far (collective channel)
    CallSignature signature;
  };
  struct EarlyArrival {
    int64_t src = 0;
    int32_t src_host = 0;
    CallSignature signature;
  };

  Slot* SlotFor(const MailKey& key) const;
  absl::Status MismatchError(int64_t device, uint64_t sequence, const CallSignature& mine,
                             int64_t src, int32_t src_host, const CallSignature& theirs) const;
  // Sets the failure under mu_; returns true if it was the first.
  bool FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rings every slot's bell: wakes its waiters, spinning or asleep.
  void WakeAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Take's answer if it is already known: the message, the failure or the departure error;
  // nullopt while the message may still come.
  // Take without waiting for the payload to be ready().
  absl::StatusOr<Message> TakeArrived(const MailKey& key, int64_t src_host, absl::Time deadline);
  std::optional<absl::StatusOr<Message>> TryTakeLocked(const MailKey& key, int64_t src_host)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t rank_;
  const absl::Duration spin_wait_;
  std::function<void(const absl::Status&)> abort_callback_;
  std::function<void()> poller_;
  // The bells used unless UseDoorbells replaced them, and the owner of the replacement.
  std::unique_ptr<Doorbell[]> own_bells_;
  std::shared_ptr<const void> bells_owner_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<MailKey, Message> messages_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> departed_ ABSL_GUARDED_BY(mu_);
  // First message seen for (device, sequence) before that device reached the call.
  absl::flat_hash_map<std::pair<int64_t, uint64_t>, EarlyArrival> early_ ABSL_GUARDED_BY(mu_);
  // Structure fixed at construction; Slot fields guarded by mu_.
  absl::flat_hash_map<int64_t, std::unique_ptr<Slot>> slots_;
  std::unique_ptr<Slot> host_slot_;
};

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_MAILBOX_H_
