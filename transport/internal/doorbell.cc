#include "tessel/transport/internal/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include "absl/time/clock.h"

namespace tessel::transport::internal {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "the futex word is the atomic's object representation");

uint32_t* FutexWord(Doorbell& bell) { return reinterpret_cast<uint32_t*>(&bell.sequence); }

}  // namespace

void RingDoorbell(Doorbell& bell) {
  // Sequentially consistent on both sides (here: increment, then read sleepers; the sleeper:
  // increment sleepers, then the kernel reads the sequence): either this ring sees the sleeper,
  // or the sleeper's futex sees the new sequence and does not sleep.
  bell.sequence.fetch_add(1, std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_seq_cst) == 0) return;
  syscall(SYS_futex, FutexWord(bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void SleepOnDoorbell(Doorbell& bell, uint32_t seen, absl::Time deadline) {
  timespec timeout{};
  timespec* timeout_ptr = nullptr;
  if (deadline != absl::InfiniteFuture()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    timeout = absl::ToTimespec(left);
    timeout_ptr = &timeout;
  }
  bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
  // EAGAIN (the sequence moved), EINTR and ETIMEDOUT all return: the caller re-checks.
  if (bell.sequence.load(std::memory_order_seq_cst) == seen) {
    syscall(SYS_futex, FutexWord(bell), FUTEX_WAIT, seen, timeout_ptr, nullptr, 0);
  }
  bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace tessel::transport::internal
