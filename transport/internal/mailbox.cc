#include "tessel/transport/internal/mailbox.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::transport::internal {

Mailbox::Mailbox(int64_t rank, const std::vector<int64_t>& local_devices, absl::Duration spin_wait)
    : rank_(rank),
      spin_wait_(spin_wait),
      own_bells_(std::make_unique<Doorbell[]>(kDoorbells)),
      host_slot_(std::make_unique<Slot>()) {
  for (int64_t d : local_devices) slots_[d] = std::make_unique<Slot>();
  UseDoorbells(own_bells_.get(), nullptr);
}

void Mailbox::UseDoorbells(Doorbell* bells, std::shared_ptr<const void> owner) {
  bells_owner_ = std::move(owner);
  host_slot_->bell = &bells[DoorbellIndex(rank_)];
  for (auto& [device, slot] : slots_) slot->bell = &bells[DoorbellIndex(device)];
}

Mailbox::~Mailbox() = default;

Mailbox::Slot* Mailbox::SlotFor(const MailKey& key) const {
  if (key.channel == Channel::kRendezvous) return key.dst == rank_ ? host_slot_.get() : nullptr;
  auto it = slots_.find(key.dst);
  return it == slots_.end() ? nullptr : it->second.get();
}

absl::Status Mailbox::MismatchError(int64_t device, uint64_t sequence, const CallSignature& mine,
                                    int64_t src, int32_t src_host,
                                    const CallSignature& theirs) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "collective mismatch at call #", sequence, ": device ", device, " (host ", rank_, ") called ",
      mine.ToString(), " but device ", src, " (host ", src_host, ") called ", theirs.ToString()));
}

void Mailbox::WakeAllLocked() {
  RingDoorbell(*host_slot_->bell);
  for (auto& [id, slot] : slots_) RingDoorbell(*slot->bell);
}

bool Mailbox::FailLocked(const absl::Status& status) {
  if (!failure_.ok()) return false;
  failure_ = status;
  WakeAllLocked();
  return true;
}

void Mailbox::Fail(const absl::Status& status, bool broadcast) {
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = FailLocked(status);
  }
  if (first && broadcast && abort_callback_) abort_callback_(status);
}

absl::Status Mailbox::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

size_t Mailbox::pending() const {
  absl::MutexLock lock(&mu_);
  return messages_.size();
}

void Mailbox::Deliver(Message message) {
  const MailKey key = MailKey::Of(message.header);
  absl::Status error;
  Doorbell* ring = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return;  // the job is over; drop
    Slot* slot = SlotFor(key);
    if (slot == nullptr) {
      error = absl::InternalError(absl::StrCat("protocol error: host ", message.header.src_host,
                                               " sent a message for device ", key.dst,
                                               ", which host ", rank_, " does not own"));
    } else if (key.channel == Channel::kCollective) {
      const CallSignature& theirs = message.header.signature;
      if (slot->active && key.sequence == slot->sequence) {
        if (!(theirs == slot->signature)) {
          error = MismatchError(key.dst, key.sequence, slot->signature, key.src,
                                message.header.src_host, theirs);
        }
      } else if (key.sequence < slot->next_sequence) {
        error = absl::FailedPreconditionError(absl::StrCat(
            "collective mismatch: device ", key.src, " (host ", message.header.src_host,
            ") sent a ", theirs.ToString(), " message for call #", key.sequence, " to device ",
            key.dst, " (host ", rank_, "), which already finished that call"));
      } else {
        early_.try_emplace(std::make_pair(key.dst, key.sequence),
                           EarlyArrival{key.src, message.header.src_host, theirs});
      }
    }
    if (error.ok()) {
      auto [it, inserted] = messages_.try_emplace(key, std::move(message));
      if (!inserted) {
        error = absl::InternalError(absl::StrCat("protocol error: duplicate message from device ",
                                                 key.src, " to device ", key.dst, " at call #",
                                                 key.sequence, " phase ", key.phase, " step ",
                                                 key.step, " segment ", key.segment));
      } else {
        ring = slot->bell;
      }
    }
  }
  // After the unlock: the woken waiter finds the message without waiting for the lock.
  if (ring != nullptr) {
    RingDoorbell(*ring);
    return;
  }
  Fail(error, /*broadcast=*/true);
}

absl::Status Mailbox::BeginCall(int64_t device, uint64_t sequence, const CallSignature& signature) {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    Slot* slot = slots_.at(device).get();
    slot->active = true;
    slot->sequence = sequence;
    slot->signature = signature;
    auto it = early_.find(std::make_pair(device, sequence));
    if (it != early_.end()) {
      if (!(it->second.signature == signature)) {
        error = MismatchError(device, sequence, signature, it->second.src, it->second.src_host,
                              it->second.signature);
      }
      early_.erase(it);
    }
  }
  if (!error.ok()) {
    Fail(error, /*broadcast=*/true);
    return error;
  }
  return absl::OkStatus();
}

void Mailbox::EndCall(int64_t device) {
  absl::MutexLock lock(&mu_);
  Slot* slot = slots_.at(device).get();
  slot->active = false;
  slot->next_sequence = slot->sequence + 1;
}

void Mailbox::MarkDeparted(int64_t host) {
  absl::MutexLock lock(&mu_);
  departed_.push_back(host);
  WakeAllLocked();
}

std::optional<absl::StatusOr<Message>> Mailbox::TryTakeLocked(const MailKey& key,
                                                              int64_t src_host) {
  if (!failure_.ok()) return failure_;
  auto it = messages_.find(key);
  if (it != messages_.end()) {
    Message message = std::move(it->second);
    messages_.erase(it);
    return message;
  }
  if (std::find(departed_.begin(), departed_.end(), src_host) != departed_.end()) {
    return absl::UnavailableError(absl::StrCat(
        "host ", src_host, " left the job (clean shutdown) without sending the message"));
  }
  return std::nullopt;
}

absl::StatusOr<Message> Mailbox::Take(const MailKey& key, int64_t src_host, absl::Time deadline) {
  absl::StatusOr<Message> message = TakeArrived(key, src_host, deadline);
  if (!message.ok() || message->payload == nullptr) return message;
  // A shared-memory payload whose header overtook its bytes: the sender is copying them now
  // (a slot's worth takes tens of microseconds). Poll, yielding the core, until they are
  // there, the job fails (a sender that dies mid-copy is found by failure detection) or the
  // deadline passes. A corrupt segment fails the job on every host, as a corrupt header queue
  // does (ZmqTransport's DrainShmQueues): no later message from it can be trusted either.
  for (int64_t i = 1;; ++i) {
    absl::StatusOr<bool> ready = message->payload->ready();
    if (!ready.ok()) {
      Fail(absl::Status(ready.status().code(),
                        absl::StrCat("host ", rank_, ": ", ready.status().message())),
           /*broadcast=*/true);
      return failure();
    }
    if (*ready) break;
    sched_yield();
    if (i % 64 == 0) {
      TESSEL_RETURN_IF_ERROR(failure());
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("timed out waiting for the bytes of a shared-memory payload from host ",
                         src_host, " (the sender claimed the slot and never filled it)"));
      }
    }
  }
  return message;
}

absl::StatusOr<Message> Mailbox::TakeArrived(const MailKey& key, int64_t src_host,
                                             absl::Time deadline) {
  Slot* slot = SlotFor(key);
  if (slot == nullptr) {
    return absl::InternalError(absl::StrCat("host ", rank_, " waited for a message to device ",
                                            key.dst, ", which it does not own"));
  }
  Doorbell& bell = *slot->bell;
  // Spin phase: re-check whenever the bell rings, yield the core in between, so that a message
  // arriving soon is taken without the sleep/wake-up round trip (23-46 us here, more on a busy
  // VM whose idle virtual CPU must be rescheduled) and the core stays with the threads that
  // deliver it. OpenMPI's ranks wait the same way. Then sleep on the bell.
  // Never past the deadline (absl::Time and steady_clock differ, so compare durations).
  const auto spin_until = std::chrono::steady_clock::now() +
                          absl::ToChronoNanoseconds(
                              std::clamp(spin_wait_, absl::ZeroDuration(), deadline - absl::Now()));
  while (true) {
    // Read before looking: a ring after this makes the sleep below return at once.
    const uint32_t seen = bell.sequence.load(std::memory_order_acquire);
    if (poller_) poller_();
    {
      absl::MutexLock lock(&mu_);
      std::optional<absl::StatusOr<Message>> result = TryTakeLocked(key, src_host);
      if (result.has_value()) return *std::move(result);
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      while (bell.sequence.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < spin_until) {
        sched_yield();
      }
      continue;
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("timed out");
    SleepOnDoorbell(bell, seen, deadline);
  }
}

}  // namespace tessel::transport::internal
