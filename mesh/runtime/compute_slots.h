// ComputeSlots: how many of a host process's device threads may compute at once.
//
// A host runs each local device on its own thread (HostRuntime), and a device that waits for a
// collective must not hold a core its peers need. When the job's device threads outnumber the
// machine's cores (8 devices on 2 cores, in 1 or 4 processes), the kernel time-slices every
// computing thread: each device's working set is evicted from the core's caches every slice, and
// every device reaches its next collective late. With slots, a device thread holds a slot while
// it runs kernels and gives it back while it waits in a collective (CommunicatorCollectives), so
// at most `slots` devices of this process compute at a time, in the order they asked (FIFO).
// This is the budget of XLA's CPU client (one intra-op pool sized to the cores, shared by the
// devices of the process) and of torch's OMP_NUM_THREADS, for device threads that block.
//
//   ComputeSlots slots(/*slots=*/2);
//   slots.Acquire();   // device thread: before running its program
//   ...                // kernels
//   slots.Release();   // around a collective, and at the end
//
// Default: no limit (every device thread computes at once, and the kernel's scheduler shares
// the cores). A limit costs a hand-over per slot: a device leaving a collective sleeps until a
// slot holder reaches its next collective and wakes it, and a core idles for that wake-up. On 8
// devices over 2 cores of an otherwise idle machine, one process of 8 with 2 slots took
// 10-22 % longer per step than with no limit (MLP and GPT steps; 4 processes of 2 with 1 slot
// each: within the noise of no limit), measured in docs/PERFORMANCE.md ("8 devices on one
// machine"). A limit is set by HostRuntimeOptions::compute_slots or the environment variable
// TESSEL_COMPUTE_SLOTS (ParseComputeSlots): a positive count, or 0 for no limit.
#ifndef TESSEL_MESH_RUNTIME_COMPUTE_SLOTS_H_
#define TESSEL_MESH_RUNTIME_COMPUTE_SLOTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tessel::mesh {

class ComputeSlots {
 public:
  // `slots` > 0: at most that many holders at once; 0: no limit (Acquire never waits).
  explicit ComputeSlots(int64_t slots) : slots_(slots), free_(slots) {}
  ComputeSlots(const ComputeSlots&) = delete;
  ComputeSlots& operator=(const ComputeSlots&) = delete;

  // Waits for a free slot; callers are served in the order they called (FIFO).
  void Acquire();
  // Gives back a slot taken by Acquire on this thread.
  void Release();

  // The limit; 0: none.
  int64_t slots() const { return slots_; }
  // Callers of Acquire waiting for a slot now (a snapshot, for tests and reports).
  int64_t waiting() const;

 private:
  const int64_t slots_;
  mutable absl::Mutex mu_;
  int64_t free_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;  // handed to the next caller of Acquire
  uint64_t serving_ ABSL_GUARDED_BY(mu_) = 0;      // the ticket whose turn it is
};

// Parses a TESSEL_COMPUTE_SLOTS value: a non-negative integer (0: no limit). `source` names the
// variable or option in errors. nullopt for an unset or empty value.
// Errors: kInvalidArgument naming `source` and the text (ParseInt64, core/environment.h:
// `TESSEL_COMPUTE_SLOTS="abc": expected an integer in [0, 9223372036854775807] (0: no limit)`).
[[nodiscard]] absl::StatusOr<std::optional<int64_t>> ParseComputeSlots(const char* text,
                                                                       const std::string& source);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_RUNTIME_COMPUTE_SLOTS_H_
