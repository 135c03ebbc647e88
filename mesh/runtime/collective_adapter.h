// The executor's collective interface (core/collectives.h) over a transport::Communicator: how a
// device of a host process runs the all-reduce / all-gather / reduce-scatter / all-to-all /
// collective-permute instructions of its partitioned program on the real transport.
//
//   transport::Communicator& comm = ...;          // this host's ZmqTransport or InProc host
//   CommunicatorCollectives collectives(&comm);
//   ExecutorOptions options{.device_id = 3, .collectives = &collectives};
//   Executor(options).Run(program, local_arguments);   // on device 3's thread
//
// The transport works on flat row-major buffers along dim 0; XLA's collectives name any
// dimension. A collective over dim d of a group of n splits the full-size buffer [A, n*d', B]
// into the members' chunks [A, d', B]: the transport's member-major layout [n, A, d', B] is one
// copy away, a block of d'*B elements per (a, member). An all-gather gathers the operands as
// they are and makes that one copy into its result; a reduce-scatter copies its operand once and
// receives its result in place; an all-to-all copies once each way. Dim 0 (and any dim preceded
// only by size-1 dims) needs no copy.
// Results are bit-identical on every member (the transport's reduction order, see
// transport/communicator.h), but may differ in the last bits from core's
// InProcessCollectives, which folds left to right.
#ifndef TESSEL_MESH_COLLECTIVE_ADAPTER_H_
#define TESSEL_MESH_COLLECTIVE_ADAPTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/collectives.h"
#include "tessel/core/literal.h"
#include "tessel/mesh/runtime/compute_slots.h"
#include "tessel/transport/communicator.h"

namespace tessel::mesh {

class CommunicatorCollectives final : public CollectiveBackend {
 public:
  // `comm` must outlive this object. Thread safety: as the Communicator (one call at a time per
  // device, devices concurrently).
  explicit CommunicatorCollectives(transport::Communicator* comm) : comm_(comm) {}

  // Called after every collective with the device, the XLA op name ("all-reduce", ...), its wall
  // start and end, and the bytes of the device's input (for timelines). With compute slots, also
  // called with op "compute-slot" (input_bytes 0) for the part of a collective's span the device
  // waited, after the transport returned, for a compute slot to run its kernels again: time in
  // the host's run queue, not in the transport. Set before any call.
  using Observer = std::function<void(
      int64_t device_id, const char* op, std::chrono::steady_clock::time_point start,
      std::chrono::steady_clock::time_point end, int64_t input_bytes)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // While set, a calling device thread holds a slot of `slots` (the host runtime takes it
  // before the device's program runs) and gives it back for the time it waits in the
  // transport. Null (the default): no slots. Set before any call; must outlive the calls.
  void set_compute_slots(ComputeSlots* slots) { slots_ = slots; }

  // Each: device `device_id`'s result, XLA semantics (core/collectives.h). Shapes: `input` is
  // the device's local operand; all-gather multiplies dim `dim` by the group size,
  // reduce-scatter divides it (kInvalidArgument if not divisible), all-to-all keeps the shape
  // (kInvalidArgument if the dim is not divisible by the group size).
  // Errors: those of the Communicator (kInvalidArgument for bad groups or a device this host
  // does not own; kFailedPrecondition for mismatched calls; kUnavailable for a lost host;
  // kDeadlineExceeded), and kInvalidArgument for a tuple input or `dim` out of range.
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

 private:
  // Calls observer_ (if set) for a collective that started at `start`.
  void Observe(int64_t device_id, const char* op, std::chrono::steady_clock::time_point start,
               int64_t input_bytes) const;

  class SlotYield;  // gives the slot back around a transport call (collective_adapter.cc)

  transport::Communicator* comm_;
  Observer observer_;
  ComputeSlots* slots_ = nullptr;
};

// Layout helpers (exposed for tests). `MoveDimToFront` returns `value` with dim `dim` first
// (shape [D, A..., B...] for [A..., D, B...]); `MoveFrontDimTo` is its inverse, giving a value
// of `shape` from one laid out with shape's dim `dim` first. Precondition: array literals,
// 0 <= dim < rank, matching element counts (TESSEL_CHECK).
[[nodiscard]] Literal MoveDimToFront(const Literal& value, int64_t dim);
[[nodiscard]] Literal MoveFrontDimTo(const Literal& front_first, const Shape& shape, int64_t dim);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_COLLECTIVE_ADAPTER_H_
