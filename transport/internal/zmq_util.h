// Helpers shared by the ZeroMQ transport and its bootstrap: frames, length-prefixed strings,
// and the conversion of zmq::error_t into a Status (exceptions stop here).
#ifndef TESSEL_TRANSPORT_INTERNAL_ZMQ_UTIL_H_
#define TESSEL_TRANSPORT_INTERNAL_ZMQ_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tessel/transport/internal/buffer_pool.h"
#include "tessel/transport/internal/wire.h"
#include "zmq.hpp"

namespace tessel::transport::internal {

// kUnavailable "<what>: <zmq message> (errno N)".
inline absl::Status ZmqStatus(const zmq::error_t& e, const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", e.what(), " (errno ", e.num(), ")"));
}

// A received payload used in place (no copy out of the ZeroMQ message).
class ZmqPayload : public Payload {
 public:
  explicit ZmqPayload(zmq::message_t message) : message_(std::move(message)) {}
  const std::byte* data() const override { return static_cast<const std::byte*>(message_.data()); }
  size_t size() const override { return message_.size(); }

 private:
  zmq::message_t message_;
};

inline zmq::message_t HeaderFrame(const WireHeader& header) {
  zmq::message_t frame(kWireHeaderBytes);
  EncodeHeader(header, static_cast<std::byte*>(frame.data()));
  return frame;
}

// A control header (hello, heartbeat, bye, abort, refused, table) from host `src_host`.
inline WireHeader ControlHeader(MessageType type, int64_t src_host) {
  WireHeader h;
  h.type = type;
  h.channel = Channel::kControl;
  h.src = src_host;
  h.src_host = static_cast<int32_t>(src_host);
  return h;
}

// Bodies of control messages: a list of u32-length-prefixed strings.
inline std::string PackStrings(const std::vector<std::string>& strings) {
  std::string out;
  for (const std::string& s : strings) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += s;
  }
  return out;
}

// Errors: false if the body is malformed.
inline bool UnpackStrings(std::string_view body, std::vector<std::string>* out) {
  out->clear();
  while (!body.empty()) {
    if (body.size() < 4) return false;
    uint32_t n;
    std::memcpy(&n, body.data(), 4);
    body.remove_prefix(4);
    if (body.size() < n) return false;
    out->emplace_back(body.substr(0, n));
    body.remove_prefix(n);
  }
  return true;
}

inline std::string_view FrameText(const zmq::message_t& m) {
  return std::string_view(static_cast<const char*>(m.data()), m.size());
}

// Compares secrets without an early exit.
inline bool TokensEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_ZMQ_UTIL_H_
