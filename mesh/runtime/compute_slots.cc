#include "tessel/mesh/runtime/compute_slots.h"

#include <limits>

#include "tessel/core/environment.h"
#include "tessel/core/status_macros.h"

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
  TESSEL_ASSIGN_OR_RETURN(
      int64_t value,
      ParseInt64(text, source, 0, std::numeric_limits<int64_t>::max(), "0: no limit"));
  return value;
}

}  // namespace tessel::mesh
