// InProcTransport: every host of a job inside one process, each host a Communicator, for
// single-process tests and numerical checks of partitioned programs.
//
//   DeviceMap map = DeviceMap::Uniform(/*num_hosts=*/2, /*devices_per_host=*/2);
//   auto job = InProcTransport::Create(/*num_hosts=*/2, map).value();
//   // One thread per device d in 0..3:
//   Communicator& comm = job->host(map.host_of_device[d]);
//   absl::Status s = comm.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in, out, n);
//
// Hosts run the same algorithms as ZmqTransport; only the link differs: a message to another
// host is copied into that host's mailbox (a pooled buffer) instead of a socket. Traffic is
// still classified local / ICI / DCN by the device map, so statistics equal ZmqTransport's.
#ifndef TESSEL_TRANSPORT_INPROC_TRANSPORT_H_
#define TESSEL_TRANSPORT_INPROC_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/transport/collective_stats.h"
#include "tessel/transport/communicator.h"

namespace tessel::transport {

class InProcTransport {
 public:
  // A job of `num_hosts` hosts over `device_map`. Errors: kInvalidArgument if the map does not
  // validate for `num_hosts` (DeviceMap::Validate) or options are out of range
  // (pipeline_chunk_bytes < 1, pipeline_depth < 0, small_message_bytes < 0, collective_timeout <=
  // 0).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<InProcTransport>> Create(
      int64_t num_hosts, DeviceMap device_map, CommunicatorOptions options = {});
  ~InProcTransport();

  int64_t num_hosts() const { return static_cast<int64_t>(hosts_.size()); }
  // Host `rank`'s communicator. Precondition: 0 <= rank < num_hosts() (TESSEL_CHECK).
  Communicator& host(int64_t rank);
  // The communicator owning global device `device_id`.
  Communicator& host_of_device(int64_t device_id);

  // Sum of every host's statistics.
  [[nodiscard]] CollectiveStats TotalStats() const;
  void ResetStats();

  // Fails every other host as if host `rank` had died: their waiting and later calls return
  // kUnavailable naming it ("lost host 2"). For tests of the error path.
  void SimulateHostLoss(int64_t rank);

  class Host;  // a Communicator plus its in-process link (defined in the .cc)

 private:
  friend class InProcLink;
  InProcTransport() = default;
  std::vector<std::unique_ptr<Host>> hosts_;
};

// Validates the options shared by both transports. Errors: kInvalidArgument naming the field.
[[nodiscard]] absl::Status ValidateOptions(const CommunicatorOptions& options);

}  // namespace tessel::transport

#endif  // TESSEL_TRANSPORT_INPROC_TRANSPORT_H_
