// The wire format of transport messages: a fixed 88-byte little-endian header, then the payload
// as a separate ZeroMQ frame (so large payloads travel zero-copy). docs/transport.md has the
// table; this file is its source of truth.
//
//   WireHeader h;
//   h.type = MessageType::kData;  h.kind = CollectiveKind::kAllReduce;  ...
//   std::array<std::byte, kWireHeaderBytes> bytes;
//   EncodeHeader(h, bytes.data());
//   absl::StatusOr<WireHeader> back = DecodeHeader(bytes.data(), bytes.size());
//
// The first 8 bytes (magic, protocol version, message type, channel) keep their meaning in
// every protocol version, so a peer of another version is recognised and refused.
#ifndef TESSEL_TRANSPORT_INTERNAL_WIRE_H_
#define TESSEL_TRANSPORT_INTERNAL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tessel/core/dtype.h"
#include "tessel/core/graph.h"
#include "tessel/transport/collective_stats.h"

namespace tessel::transport::internal {

inline constexpr uint32_t kWireMagic = 0x4C455354;  // "TSEL" read as little-endian bytes
// 3: shm doorbells, 2-field hello. 4: group_id and the device-map fingerprint are FNV-1a with the
// standard offset basis (core/fingerprint.h); a version-3 host computes other values for both.
// 5: a payload larger than MaxFrameBytes travels as several frames (ZMQ_MAXMSGSIZE bounds every
// frame); job-token jobs authenticate every connection with ZeroMQ's PLAIN mechanism.
inline constexpr uint16_t kProtocolVersion = 5;
inline constexpr size_t kWireHeaderBytes = 88;

enum class MessageType : uint8_t {
  kHello = 1,      // first message on a connection: job token, rank (handshake)
  kData = 2,       // a collective, send-recv or rendezvous payload
  kHeartbeat = 3,  // liveness, no payload
  kBye = 4,        // the sender is shutting down cleanly
  kAbort = 5,      // the sender's job failed; payload = error text
  kRefused = 6,    // bootstrap/handshake refused; payload = reason
  kTable = 7,      // bootstrap: the endpoint table
  kDataShm = 8,    // a kData whose payload is in a shared-memory slot of the receiver (same
                   // machine); body = the slot index, 4 bytes little-endian
};

// Which matching space a kData message belongs to.
enum class Channel : uint8_t {
  kCollective = 0,    // sequence = the device's collective call number
  kPointToPoint = 1,  // sequence = the user tag, step = per-(src, dst, tag) message number
  kRendezvous = 2,    // src/dst are host ranks, sequence = the host's rendezvous number
  kControl = 3,       // hello, heartbeat, bye, abort, refused, table
};

// What a collective call is: two participants at the same sequence number must agree on all of
// it. `reduce_kind` is meaningful only for reducing kinds (kAnyReduce otherwise).
struct CallSignature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DType dtype = DType::kPred;
  uint8_t reduce_kind = 0xff;  // static_cast<uint8_t>(ReduceKind) or 0xff
  int64_t element_count = 0;
  uint64_t group_id = 0;  // GroupsFingerprint() of the call's replica groups / pairs

  bool operator==(const CallSignature&) const = default;
  // "all-reduce(add, f32, 1000 elements, groups #1a2b3c4d5e6f7081)".
  std::string ToString() const;
};

struct WireHeader {
  // Byte offsets in the encoding (little-endian):
  uint32_t magic = kWireMagic;             //  0
  uint16_t version = kProtocolVersion;     //  4
  MessageType type = MessageType::kData;   //  6
  Channel channel = Channel::kCollective;  //  7
  uint64_t sequence = 0;                   //  8
  int64_t src = 0;                         // 16 device id (host rank for rendezvous/control)
  int64_t dst = 0;                         // 24 device id (host rank for rendezvous/control)
  int32_t src_host = 0;                    // 32 sending host rank
  uint8_t phase = 0;                       // 36 algorithm phase (e.g. 0 = reduce-scatter)
  uint8_t reserved[3] = {0, 0, 0};         // 37
  uint32_t step = 0;                       // 40 algorithm step inside the phase
  uint32_t segment = 0;                    // 44 pipelined segment inside the step
  CallSignature signature;                 // 48 kind, 49 dtype, 50 reduce_kind, 51-55 zero,
                                           // 56 element_count, 64 group_id
  uint64_t payload_bytes = 0;              // 72
  uint64_t checksum = 0;                   // 80 reserved (0)
};

// Writes `header` into `out[0, kWireHeaderBytes)`.
void EncodeHeader(const WireHeader& header, std::byte* out);

// Bytes 0-7 of a header, which mean the same in every protocol version: enough to tell a hello
// of another version from garbage before anything else is parsed.
struct WirePrefix {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint8_t type = 0;
  uint8_t channel = 0;
};
// Errors: kInvalidArgument if `size` < 8 or the magic is wrong (not a tessel peer).
[[nodiscard]] absl::StatusOr<WirePrefix> DecodePrefix(const std::byte* data, size_t size);

// Parses a header. Errors: kInvalidArgument if `size` != kWireHeaderBytes (for a foreign
// message size < 8 also) or the magic is wrong; kFailedPrecondition naming both versions if the
// version differs from kProtocolVersion; kInvalidArgument for an unknown type, channel, kind or
// dtype.
[[nodiscard]] absl::StatusOr<WireHeader> DecodeHeader(const std::byte* data, size_t size);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_WIRE_H_
