// The host side of the bootstrap (the coordinator is BootstrapCoordinator in zmq_transport.h).
//
// Registration: DEALER -> coordinator ROUTER, frames [header][body]:
//   header: type kHello, channel kControl, src_host = rank, sequence = num_hosts,
//           signature.group_id = DeviceMap::Fingerprint()
//   body:   PackStrings({job_token, data_endpoint})
// Reply: kTable with body PackStrings(endpoint of host 0, 1, ...), or kRefused with the reason.
#ifndef TESSEL_TRANSPORT_INTERNAL_ZMQ_BOOTSTRAP_H_
#define TESSEL_TRANSPORT_INTERNAL_ZMQ_BOOTSTRAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "zmq.hpp"

namespace tessel::transport::internal {

// Registers host `rank` and returns the endpoint table. Errors: kFailedPrecondition with the
// coordinator's reason if refused; kDeadlineExceeded if no answer by `deadline`; kUnavailable
// on socket errors.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> RegisterWithCoordinator(
    zmq::context_t& context, const std::string& coordinator_address, int64_t rank,
    int64_t num_hosts, const std::string& job_token, uint64_t device_map_fingerprint,
    const std::string& endpoint, absl::Time deadline);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_ZMQ_BOOTSTRAP_H_
