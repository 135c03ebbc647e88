#include "transport/internal/mailbox.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessel::transport::internal {

Mailbox::Mailbox(int64_t rank, const std::vector<int64_t>& local_devices)
    : rank_(rank), host_slot_(std::make_unique<Slot>()) {
  for (int64_t d : local_devices) slots_[d] = std::make_unique<Slot>();
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

bool Mailbox::FailLocked(const absl::Status& status) {
  if (!failure_.ok()) return false;
  failure_ = status;
  host_slot_->cv.SignalAll();
  for (auto& [id, slot] : slots_) slot->cv.SignalAll();
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
        slot->cv.Signal();
        return;
      }
    }
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
  host_slot_->cv.SignalAll();
  for (auto& [id, slot] : slots_) slot->cv.SignalAll();
}

absl::StatusOr<Message> Mailbox::Take(const MailKey& key, int64_t src_host, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  Slot* slot = SlotFor(key);
  while (true) {
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
    if (slot->cv.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      if (!failure_.ok()) return failure_;
      auto again = messages_.find(key);
      if (again != messages_.end()) {
        Message message = std::move(again->second);
        messages_.erase(again);
        return message;
      }
      return absl::DeadlineExceededError("timed out");
    }
  }
}

}  // namespace tessel::transport::internal
