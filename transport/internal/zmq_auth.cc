#include "tessel/transport/internal/zmq_auth.h"

#include <sodium.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tessel/transport/internal/zmq_util.h"

namespace tessel::transport::internal {

// Enough to see an attack in the log without letting a flood of connections fill it.
constexpr int64_t kMaxLoggedRefusals = 5;

namespace {

// BLAKE2b-256 of `label`, a NUL, then `token`: the label keeps the digests of different uses
// apart, the NUL keeps a label from running into the token.
std::array<unsigned char, 32> Digest(std::string_view label, std::string_view token) {
  std::array<unsigned char, 32> out{};
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, out.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(label.data()),
                            label.size());
  const unsigned char nul = 0;
  crypto_generichash_update(&state, &nul, 1);
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(token.data()),
                            token.size());
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

}  // namespace

absl::StatusOr<CurveKeyPair> BootstrapKeys(std::string_view job_token, BootstrapSide side) {
  if (job_token.empty()) {
    return absl::InvalidArgumentError("bootstrap keys need a job token");
  }
  if (zmq_has("curve") == 0) {
    return absl::FailedPreconditionError(
        "a job token authenticates the bootstrap with CURVE, but the linked libzmq was built "
        "without it (zmq_has(\"curve\") is false); use a libzmq built with libsodium");
  }
  if (sodium_init() < 0) return absl::FailedPreconditionError("libsodium failed to initialize");
  std::array<unsigned char, 32> secret =
      Digest(side == BootstrapSide::kCoordinator ? "tessel bootstrap coordinator"
                                                 : "tessel bootstrap host",
             job_token);
  char secret_z85[41] = {};
  char public_z85[41] = {};
  const bool ok = zmq_z85_encode(secret_z85, secret.data(), secret.size()) != nullptr &&
                  zmq_curve_public(public_z85, secret_z85) == 0;
  sodium_memzero(secret.data(), secret.size());
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot derive the bootstrap's CURVE keys: ", zmq_strerror(errno)));
  }
  return CurveKeyPair{public_z85, secret_z85};
}

std::string DataPassword(std::string_view job_token) {
  if (job_token.empty()) return "";
  // sodium_init only picks the fastest implementation here; the portable one gives the same
  // digest, so a failure (which leaves it) changes nothing.
  if (sodium_init() < 0) std::fputs("tessel transport: libsodium failed to initialize\n", stderr);
  const std::array<unsigned char, 32> digest = Digest("tessel data connection", job_token);
  std::string hex(2 * digest.size() + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), digest.data(), digest.size());
  hex.pop_back();  // the terminating NUL
  return hex;
}

std::string DecodeCurveKey(const std::string& z85) {
  std::string key(32, '\0');
  if (z85.size() != 40 ||
      zmq_z85_decode(reinterpret_cast<uint8_t*>(key.data()), z85.c_str()) == nullptr) {
    return "";
  }
  return key;
}

int64_t MaxTableFrameBytes(int64_t num_hosts) {
  // Per host: endpoint and CURVE key, each with its 4-byte length.
  return 256 +
         std::max<int64_t>(num_hosts, 1) * static_cast<int64_t>(4 + kMaxEndpointBytes + 4 + 64);
}

int64_t MaxDataFrameBytes(const CommunicatorOptions& options) {
  return std::max({int64_t{64} << 10, options.pipeline_chunk_bytes, options.small_message_bytes});
}

void ConfigureListener(zmq::socket_t& socket, const std::string& address, bool plain,
                       int64_t max_frame_bytes) {
  socket.set(zmq::sockopt::maxmsgsize, max_frame_bytes);
  if (plain) socket.set(zmq::sockopt::plain_server, 1);
  if (absl::StartsWith(address, "ipc://")) {
    // Deprecated in libzmq 4.3 but still built into Debian 12's 4.3.4; where it is missing the
    // call fails with EINVAL and the private folder is the only guard.
    const int uid = static_cast<int>(::getuid());
    (void)zmq_setsockopt(socket.handle(), ZMQ_IPC_FILTER_UID, &uid, sizeof(uid));
  }
}

void ConfigureClient(zmq::socket_t& socket, const std::string& plain_password,
                     int64_t max_frame_bytes) {
  socket.set(zmq::sockopt::maxmsgsize, max_frame_bytes);
  if (!plain_password.empty()) {
    socket.set(zmq::sockopt::plain_username, kPlainUsername);
    socket.set(zmq::sockopt::plain_password, plain_password);
  }
}

int64_t AnswerZapRequests(zmq::socket_t& zap, const ZapPolicy& policy, const std::string& who,
                          int64_t* logged) {
  int64_t refused = 0;
  while (true) {
    // Request (RFC 27): version, request id, domain, address, routing id, mechanism, then the
    // mechanism's credentials (PLAIN: user name and password; CURVE: the 32-byte public key).
    std::vector<zmq::message_t> frames;
    zmq::message_t first;
    if (!zap.recv(first, zmq::recv_flags::dontwait)) return refused;
    bool more = first.more();
    frames.push_back(std::move(first));
    while (more) {
      zmq::message_t next;
      (void)zap.recv(next, zmq::recv_flags::none);
      more = next.more();
      frames.push_back(std::move(next));
    }
    const std::string_view mechanism = frames.size() > 5 ? FrameText(frames[5]) : "";
    std::string why;
    if (mechanism == "PLAIN") {
      if (policy.plain_password.empty() || frames.size() != 8 ||
          !TokensEqual(FrameText(frames[7]), policy.plain_password)) {
        why = "PLAIN password is not the job token's";
      }
    } else if (mechanism == "CURVE") {
      bool known = false;
      for (const std::string& key : policy.curve_keys) {
        known = known || (frames.size() == 7 && TokensEqual(FrameText(frames[6]), key));
      }
      if (!known) why = "CURVE public key is not in this job's endpoint table";
    } else if (mechanism != "NULL") {
      why = "unknown security mechanism";
    }
    if (!why.empty()) {
      ++refused;
      if (*logged < kMaxLoggedRefusals) {
        ++*logged;
        const std::string address =
            frames.size() > 3 ? std::string(FrameText(frames[3])) : "an unknown address";
        std::fprintf(stderr, "tessel transport: %s: refused an unauthenticated peer from %s (%s)\n",
                     who.c_str(), address.c_str(), why.c_str());
      }
    }
    const std::string request_id = frames.size() > 1 ? std::string(FrameText(frames[1])) : "";
    const std::vector<std::string> reply = {
        "1.0", request_id, why.empty() ? "200" : "400", why.empty() ? "OK" : why, "", ""};
    for (size_t i = 0; i < reply.size(); ++i) {
      (void)zap.send(zmq::buffer(reply[i]),
                     i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

std::string PeerAddress(const zmq::message_t& message) {
  // zmq_msg_gets takes a non-const message; it only reads the metadata. "Peer-Address" is
  // ZMQ_MSG_PROPERTY_PEER_ADDRESS, whose macro libzmq 4.3 declares among its draft API only.
  const char* address = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "Peer-Address");
  return address != nullptr && *address != '\0' ? std::string(address) : "an unknown address";
}

int64_t IpcPeerUid(const zmq::message_t& message) {
  const std::string address = PeerAddress(message);
  const std::vector<std::string> parts = absl::StrSplit(address, ':');
  int64_t uid = -1;
  if (parts.size() != 4 || parts[0] != "localhost" || !absl::SimpleAtoi(parts[1], &uid)) return -1;
  return uid;
}

}  // namespace tessel::transport::internal
