#include "tessel/mesh/runtime/compute_slots.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessel::mesh {

void ComputeSlots::Acquire() {
  if (slots_ == 0) return;
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  // FIFO: a device that gave its slot back for a collective queues behind the devices that were
  // already waiting, so no device starves while others cycle between kernels and collectives.
  auto my_turn = [this, ticket]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return serving_ == ticket && free_ > 0; };
  mu_.Await(absl::Condition(&my_turn));
  ++serving_;
  --free_;
}

void ComputeSlots::Release() {
  if (slots_ == 0) return;
  absl::MutexLock lock(&mu_);
  ++free_;
}

int64_t ComputeSlots::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(next_ticket_ - serving_);
}

absl::StatusOr<std::optional<int64_t>> ParseComputeSlots(const char* text,
                                                         const std::string& source) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, "=", text, ": expected a non-negative integer (0: no limit)"));
  }
  return value;
}

}  // namespace tessel::mesh
