// How an executing device takes part in collectives: the interface the executor calls for
// all-reduce, all-gather, reduce-scatter, all-to-all and collective-permute, and an in-process
// reference implementation for tests (devices are threads of one process).
//
//   InProcessCollectives collectives(/*num_devices=*/4);
//   // on each device thread d:
//   ExecutorOptions options{.num_threads = 1, .device_id = d, .collectives = &collectives};
//   Executor(options).Run(spmd_program, local_arguments);
//
// Semantics are XLA's, with replica groups in global device ids (an empty list: one group of
// every device): all-reduce combines the inputs
// of a group element-wise; all-gather concatenates them along a dim in group order;
// reduce-scatter all-reduces and keeps the device's chunk (position in its group) of a dim;
// all-to-all splits a dim into group-size chunks, sends chunk i to the i-th device and
// concatenates the received chunks along the same dim; collective-permute sends the buffer along
// (source, target) pairs and a device that is no target gets zeros.
// Reduction order: the group's inputs are combined left to right in group order, on every
// device, so all members compute bit-identical results.
#ifndef TESSEL_CORE_COLLECTIVES_H_
#define TESSEL_CORE_COLLECTIVES_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"

namespace tessel {

using ReplicaGroups = std::vector<std::vector<int64_t>>;

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;

  // Each returns device `device_id`'s result. Every device of the group must make the same call
  // (same kind, group, shape and dtype) in the same program order.
  // Errors: kInvalidArgument when `device_id` is in no group or inputs disagree across the
  // group; kDeadlineExceeded when peers do not arrive in time (implementation-defined).
  [[nodiscard]] virtual absl::StatusOr<Literal> AllReduce(int64_t device_id, const Literal& input,
                                                          const ReplicaGroups& groups,
                                                          ReduceKind kind) = 0;
  [[nodiscard]] virtual absl::StatusOr<Literal> AllGather(int64_t device_id, const Literal& input,
                                                          const ReplicaGroups& groups,
                                                          int64_t dim) = 0;
  [[nodiscard]] virtual absl::StatusOr<Literal> ReduceScatter(int64_t device_id,
                                                              const Literal& input,
                                                              const ReplicaGroups& groups,
                                                              int64_t dim, ReduceKind kind) = 0;
  [[nodiscard]] virtual absl::StatusOr<Literal> AllToAll(int64_t device_id, const Literal& input,
                                                         const ReplicaGroups& groups,
                                                         int64_t dim) = 0;
  [[nodiscard]] virtual absl::StatusOr<Literal> CollectivePermute(
      int64_t device_id, const Literal& input,
      const std::vector<std::pair<int64_t, int64_t>>& pairs) = 0;
};

// Local math shared by collective implementations (so in-process and network backends agree
// bit for bit).
// Combines `inputs` element-wise left to right with `kind`. Precondition: equal shapes.
[[nodiscard]] absl::StatusOr<Literal> CombineLiterals(const std::vector<const Literal*>& inputs,
                                                      ReduceKind kind);
// Concatenates along `dim`.
[[nodiscard]] absl::StatusOr<Literal> ConcatenateLiterals(const std::vector<const Literal*>& parts,
                                                          int64_t dim);
// Chunk `index` of `count` equal chunks of `dim`. Errors: kInvalidArgument if not divisible.
[[nodiscard]] absl::StatusOr<Literal> ChunkOfLiteral(const Literal& value, int64_t dim,
                                                     int64_t count, int64_t index);

// The reference backend: devices 0..num_devices-1 are threads of this process; each collective
// is a rendezvous of its group in shared memory. Calls of one device are matched with its
// peers' by program order (the k-th collective of each device). `timeout` bounds every wait.
class InProcessCollectives : public CollectiveBackend {
 public:
  explicit InProcessCollectives(int64_t num_devices,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60));

  absl::StatusOr<Literal> AllReduce(int64_t device_id, const Literal& input,
                                    const ReplicaGroups& groups, ReduceKind kind) override;
  absl::StatusOr<Literal> AllGather(int64_t device_id, const Literal& input,
                                    const ReplicaGroups& groups, int64_t dim) override;
  absl::StatusOr<Literal> ReduceScatter(int64_t device_id, const Literal& input,
                                        const ReplicaGroups& groups, int64_t dim,
                                        ReduceKind kind) override;
  absl::StatusOr<Literal> AllToAll(int64_t device_id, const Literal& input,
                                   const ReplicaGroups& groups, int64_t dim) override;
  absl::StatusOr<Literal> CollectivePermute(
      int64_t device_id, const Literal& input,
      const std::vector<std::pair<int64_t, int64_t>>& pairs) override;

  // Ends every wait now and every later collective with `why` (a device that failed will never
  // arrive: its peers stop at once instead of waiting out the timeout). Thread-safe; the first
  // reason is kept.
  void Abort(const absl::Status& why);

 private:
  // Deposits `input` for this device's next collective and returns every member's input of
  // `group` (in group order) once all have arrived.
  absl::StatusOr<std::vector<Literal>> Exchange(int64_t device_id, const Literal& input,
                                                const std::vector<int64_t>& group);
  // The group holding `device_id`. Errors: kInvalidArgument if none.
  absl::StatusOr<std::vector<int64_t>> GroupOf(int64_t device_id,
                                               const ReplicaGroups& groups) const;

  struct Slot {
    std::map<int64_t, Literal> inputs;
    int64_t departed = 0;
  };
  const int64_t num_devices_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> sequence_;  // per device: collectives issued so far
  absl::Status aborted_;           // Abort's reason; OK until then
  // Keyed by (sequence number, first device of the group).
  std::map<std::pair<int64_t, int64_t>, Slot> slots_;
};

}  // namespace tessel

#endif  // TESSEL_CORE_COLLECTIVES_H_
