// Self-checking collective workloads shared by the in-process tests and the multi-process
// worker (transport_worker): every device of a job runs the same sequence of collectives on
// deterministic inputs and compares its output with a locally computed expectation.
//
//   // On every device thread of every host:
//   absl::Status s = RunCollectiveChecks(comm, device_id, CheckOptions{});
//
// Inputs are small integers, so every dtype (bf16 included) represents inputs and results
// exactly and the expectation does not depend on the reduction order.
#ifndef TESSEL_TRANSPORT_TESTING_COLLECTIVE_CHECKS_H_
#define TESSEL_TRANSPORT_TESTING_COLLECTIVE_CHECKS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tessel/core/dtype.h"
#include "tessel/core/graph.h"
#include "tessel/transport/communicator.h"

namespace tessel::transport::testing {

struct CheckOptions {
  // Element types to cover (default: the six of the issue plus u8 and f16).
  std::vector<DType> dtypes = {DType::kF32, DType::kF64,  DType::kBF16, DType::kS32,
                               DType::kS64, DType::kPred, DType::kU8,   DType::kF16};
  // Per-device element counts; a value of -1 means "3 * group size + 1" (uneven).
  std::vector<int64_t> counts = {1, -1, 300};
  // Also run with replica groups that are the rows and the columns of a 2D mesh over the
  // devices (when the device count factors as R x C, R, C >= 2) and a reversed full group.
  bool mesh_groups = true;
  // Include Send/Recv around the ring of devices.
  bool point_to_point = true;
};

// Runs every collective kind (all-reduce with each reduction valid for the dtype, all-gather,
// reduce-scatter, all-to-all, collective-permute, broadcast, barrier) for each dtype, count and
// replica-group set of `options`, as device `device_id` of `comm`. All devices of the job must
// call it concurrently with equal options. Returns the first wrong result as kInternal naming
// the collective, dtype, count, groups and first differing element, or the first error of a
// collective.
[[nodiscard]] absl::Status RunCollectiveChecks(Communicator& comm, int64_t device_id,
                                               const CheckOptions& options);

// The replica-group sets RunCollectiveChecks uses for `num_devices`.
[[nodiscard]] std::vector<ReplicaGroups> CheckGroupSets(int64_t num_devices, bool mesh_groups);

// Deterministic test inputs: element `index` of device `device_id`'s buffer for a collective of
// reduction `kind` (nullopt-like -1 for data movement), as an integer exactly representable
// in `dtype`.
[[nodiscard]] int64_t InputValue(int reduce_kind, DType dtype, int64_t device_id, int64_t index,
                                 int64_t salt);
// Writes integers as `dtype` (pred: != 0; unsigned: wraps).
void FillBuffer(DType dtype, const std::vector<int64_t>& values, void* out);

}  // namespace tessel::transport::testing

#endif  // TESSEL_TRANSPORT_TESTING_COLLECTIVE_CHECKS_H_
