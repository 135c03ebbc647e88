// A doorbell: the word a device thread sleeps on while it waits for a message, and that whoever
// delivers one rings, in this process or, when it lives in a shared-memory segment, in another.
//
//   Doorbell& bell = ...;                       // Mailbox-owned, or ShmSegment::doorbell(dst)
//   uint32_t seen = bell.sequence.load();       // waiter: read, then look for its message
//   if (!found) SleepOnDoorbell(bell, seen, deadline);
//   ...
//   RingDoorbell(bell);                         // deliverer: after the message is visible
//
// A Linux futex on `sequence` (futex(2), without FUTEX_PRIVATE_FLAG, so that a word in a
// MAP_SHARED mapping is one futex for every process that maps it). Ringing costs one atomic
// increment, plus a FUTEX_WAKE system call only while somebody sleeps (`sleepers`): a receiver
// that is busy or spinning costs its senders no system call, as OpenMPI's shared-memory
// fast boxes and NCCL's proxy flags are polled without one. docs/transport.md, "Waiting".
#ifndef TESSEL_TRANSPORT_INTERNAL_DOORBELL_H_
#define TESSEL_TRANSPORT_INTERNAL_DOORBELL_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace tessel::transport::internal {

// One cache line, so that bells of different devices do not share one.
struct alignas(64) Doorbell {
  // Incremented by every ring: a waiter sleeps only while it still holds the value it read
  // before it looked for its message, so a ring in between is never lost.
  std::atomic<uint32_t> sequence{0};
  // Threads inside SleepOnDoorbell: a ring makes the system call only when this is non-zero.
  std::atomic<uint32_t> sleepers{0};
};
static_assert(sizeof(Doorbell) == 64);
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "doorbells are shared between processes and must be lock-free (address-free)");

// Bells per mailbox (and per shared-memory segment). The bell of a message is
// DoorbellIndex(destination): devices of one host whose ids are equal modulo this share a bell,
// which costs only a spurious wake-up.
inline constexpr int64_t kDoorbells = 64;

// The bell of destination `dst` (a global device id, or a host rank for rendezvous messages):
// dst mod kDoorbells, in [0, kDoorbells). dst >= 0.
inline int64_t DoorbellIndex(int64_t dst) { return dst % kDoorbells; }

// Increments `bell.sequence` and wakes every thread asleep on it (any process). Never blocks.
void RingDoorbell(Doorbell& bell);

// Sleeps while `bell.sequence` still equals `seen`, until a ring or `deadline` (or a spurious
// wake-up: callers re-check what they wait for and call again). Returns at once when the
// sequence already moved or the deadline passed.
void SleepOnDoorbell(Doorbell& bell, uint32_t seen, absl::Time deadline);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_DOORBELL_H_
