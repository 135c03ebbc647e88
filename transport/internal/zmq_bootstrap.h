// The host side of the bootstrap (the coordinator is BootstrapCoordinator in zmq_transport.h).
//
// Registration: DEALER -> coordinator ROUTER, frames [header][body]:
//   header: type kHello, channel kControl, src_host = rank, sequence = num_hosts,
//           signature.group_id = DeviceMap::Fingerprint()
//   body:   PackStrings({job_token, data_endpoint}), or with CURVE
//           PackStrings({job_token, data_endpoint, curve_public_key_z85})
// Reply: kTable with body PackStrings(endpoint of host 0, 1, ...) (no host uses CURVE) or
// PackStrings(endpoint 0 .. n-1, public key 0 .. n-1) (every host does), or kRefused with the
// reason. With a job token the connection is CurveZMQ with key pairs derived from the token
// (zmq_auth.h BootstrapKeys), so both ends prove they hold it and both messages are encrypted;
// without a token (ipc only) it is a NULL connection of this user's processes.
#ifndef TESSEL_TRANSPORT_INTERNAL_ZMQ_BOOTSTRAP_H_
#define TESSEL_TRANSPORT_INTERNAL_ZMQ_BOOTSTRAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "zmq.hpp"

namespace tessel::transport::internal {

// What the coordinator hands every host: index = host rank.
struct EndpointTable {
  std::vector<std::string> endpoints;
  std::vector<std::string> curve_public_keys;  // Z85, 40 characters each; empty without CURVE
};

// Registers host `rank` (with its CURVE public key, or "" without CURVE) and returns the table.
// Errors: kFailedPrecondition with the coordinator's reason if refused; kDeadlineExceeded if no
// answer by `deadline`; kUnavailable on socket errors; kInternal for a malformed table.
[[nodiscard]] absl::StatusOr<EndpointTable> RegisterWithCoordinator(
    zmq::context_t& context, const std::string& coordinator_address, int64_t rank,
    int64_t num_hosts, const std::string& job_token, uint64_t device_map_fingerprint,
    const std::string& endpoint, const std::string& curve_public_key, absl::Time deadline);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_ZMQ_BOOTSTRAP_H_
