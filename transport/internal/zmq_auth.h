// Authentication and resource limits of every ZeroMQ socket of the transport, applied before a
// single message of a peer is read (docs/transport.md, "Security"):
//
//   - ipc listeners accept only processes of this user: ZMQ_IPC_FILTER_UID, which libzmq checks
//     with SO_PEERCRED when it accepts the connection, before the ZMTP greeting;
//   - with a job token, the bootstrap coordinator is a CurveZMQ server (RFC 26) whose key pair,
//     and the registering hosts' one, are derived from the token (BootstrapKeys): each side
//     proves it holds the token before anything is sent, and the registration travels
//     encrypted. A process that binds the coordinator's address first learns nothing (it
//     cannot complete the handshake) and the host's error says so;
//   - with a job token (and no CURVE on that socket), data listeners are ZeroMQ PLAIN servers
//     (RFC 24) and the ZAP handler (RFC 27) accepts a client only when its PLAIN password is
//     DataPassword(token): a stranger's connection ends in the handshake, its messages never
//     reach the socket. The endpoints come from the authenticated table, so the password goes
//     only to the job's hosts;
//   - with CURVE, the ZAP handler accepts only the public keys of the job's endpoint table;
//   - every socket has ZMQ_MAXMSGSIZE, the largest frame the protocol sends there, so a peer
//     announcing a larger frame is disconnected before libzmq allocates it.
//
//   zmq::socket_t zap(context, zmq::socket_type::rep);
//   zap.bind(kZapEndpoint);                       // before the first listener of the context
//   ConfigureListener(router, "ipc:///run/user/1000/tessel-x.coord", /*plain=*/true, 4096);
//   ... poll zap ... AnswerZapRequests(zap, policy, "bootstrap coordinator", &log);
//
// PLAIN carries DataPassword(token) in clear; it keeps strangers out, it does not hide the
// password from someone who reads the traffic (CURVE does). The token itself never travels.
#ifndef TESSEL_TRANSPORT_INTERNAL_ZMQ_AUTH_H_
#define TESSEL_TRANSPORT_INTERNAL_ZMQ_AUTH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/transport/communicator.h"
#include "zmq.hpp"

namespace tessel::transport::internal {

// Where libzmq sends the ZAP requests of every socket of a context (RFC 27).
inline constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
// The PLAIN user name of every host (the password is DataPassword(job token)).
inline constexpr char kPlainUsername[] = "tessel";
// Longest job token, in bytes (ZmqTransport::Create refuses longer ones). Only digests of it
// travel, so its length is not bound by PLAIN's 255-byte password.
inline constexpr size_t kMaxJobTokenBytes = 1024;

// A CurveZMQ key pair, each key 40 characters of Z85 (RFC 32).
struct CurveKeyPair {
  std::string public_z85;
  std::string secret_z85;
};

// Which end of the bootstrap connection a key pair is for.
enum class BootstrapSide { kCoordinator, kHost };

// The bootstrap connection's key pair of `side`, the same on every process that holds
// `job_token`: the secret key is BLAKE2b-256 (libsodium crypto_generichash) of a label naming
// the side and the token, the public key its Curve25519 public key (zmq_curve_public). Every
// host shares the kHost pair: the coordinator's ZAP handler accepts only its public key, and
// the hosts accept only the kCoordinator public key, so each end proves it holds the token.
// The token must be a random secret (docs/launch.md: `openssl rand -hex 16`); a guessable one
// could be found offline from a recorded handshake. Errors: kFailedPrecondition when libzmq
// has no CURVE (CurveAvailable) or derivation fails; kInvalidArgument for an empty token.
[[nodiscard]] absl::StatusOr<CurveKeyPair> BootstrapKeys(std::string_view job_token,
                                                         BootstrapSide side);

// The PLAIN password of data connections and the proof in a data connection's hello: 64
// lowercase hex characters of BLAKE2b-256 of a label and `job_token`; "" for an empty token.
[[nodiscard]] std::string DataPassword(std::string_view job_token);

// A Z85 CURVE key (40 characters) as its 32 bytes, as ZAP requests carry it; "" when
// `z85` is not a Z85 key.
[[nodiscard]] std::string DecodeCurveKey(const std::string& z85);
// Longest data endpoint a registration may carry, in bytes.
inline constexpr size_t kMaxEndpointBytes = 1024;
// Largest frame the bootstrap coordinator accepts, in bytes: a registration header (88) or body
// (token <= 1024, endpoint <= 1024, CURVE key 40, each with a 4-byte length).
inline constexpr int64_t kMaxRegistrationFrameBytes = 4096;
// Largest control body a host sends to a peer (hello: token and shared-memory descriptor;
// abort and refusal texts are cut to this), in bytes.
inline constexpr int64_t kMaxControlBodyBytes = 8192;

// Largest frame of the endpoint table for `num_hosts` hosts, in bytes (what a registering host
// accepts from the coordinator).
[[nodiscard]] int64_t MaxTableFrameBytes(int64_t num_hosts);

// Largest frame on a data connection, in bytes: the largest payload a collective sends in one
// message (a pipelined segment, `pipeline_chunk_bytes`, or a whole buffer below
// `small_message_bytes`), at least 64 KiB (control bodies). Larger Send/Recv and rendezvous
// payloads travel as several frames of at most this size. Equal on every host, since
// CommunicatorOptions must be.
[[nodiscard]] int64_t MaxDataFrameBytes(const CommunicatorOptions& options);

// Options of a listening socket (ROUTER) before it binds `address`: ZMQ_MAXMSGSIZE =
// `max_frame_bytes`; a PLAIN server when `plain`; for ipc:// also ZMQ_IPC_FILTER_UID = getuid()
// (skipped where libzmq lacks it; the socket's 0700 folder still keeps others out).
// Throws zmq::error_t (the caller's adapter turns it into a Status).
void ConfigureListener(zmq::socket_t& socket, const std::string& address, bool plain,
                       int64_t max_frame_bytes);

// Options of a connecting socket (DEALER): ZMQ_MAXMSGSIZE = `max_frame_bytes`; a PLAIN client
// with `plain_password` (DataPassword of the token) when it is not empty. Throws zmq::error_t.
void ConfigureClient(zmq::socket_t& socket, const std::string& plain_password,
                     int64_t max_frame_bytes);

// Who may connect, as the ZAP handler decides.
struct ZapPolicy {
  std::string plain_password;           // PLAIN clients must give it; "" refuses every PLAIN one
  std::vector<std::string> curve_keys;  // CURVE clients: the allowed 32-byte public keys
};

// Answers every ZAP request waiting on `zap` (a REP socket bound at kZapEndpoint): PLAIN with
// the policy's password, CURVE with a key of the policy and NULL (ipc, filtered by uid, or a job
// without a token) are accepted, anything else refused with status 400. The first few refusals
// print a line on stderr naming `who` and the peer's address ("tessel transport: host 0: refused
// an unauthenticated peer from 127.0.0.1 (PLAIN password is not the job token's)"); `logged`
// counts them. Returns the number refused. Throws zmq::error_t.
int64_t AnswerZapRequests(zmq::socket_t& zap, const ZapPolicy& policy, const std::string& who,
                          int64_t* logged);

// The user id of the process at the other end of the ipc connection a message came from (libzmq's
// "Peer-Address" of an ipc connection is "localhost:<uid>:<gid>:<pid>", from SO_PEERCRED), or -1
// when the message did not come over ipc or libzmq gave no credentials.
[[nodiscard]] int64_t IpcPeerUid(const zmq::message_t& message);

// The address libzmq gives for the connection a received message came from ("127.0.0.1",
// "localhost:<uid>:<gid>:<pid>" over ipc), or "an unknown address".
[[nodiscard]] std::string PeerAddress(const zmq::message_t& message);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_ZMQ_AUTH_H_
