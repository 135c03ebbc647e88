// BootstrapCoordinator and the host's registration with it.
#include "tessel/transport/internal/zmq_bootstrap.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/internal/wire.h"
#include "tessel/transport/internal/zmq_auth.h"
#include "tessel/transport/internal/zmq_util.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::transport {

using internal::ControlHeader;
using internal::DecodeHeader;
using internal::FrameText;
using internal::HeaderFrame;
using internal::MessageType;
using internal::PackStrings;
using internal::UnpackStrings;
using internal::WireHeader;

class BootstrapCoordinator::Impl {
 public:
  Impl(int64_t num_hosts, std::string job_token, absl::Duration timeout)
      : num_hosts_(num_hosts), job_token_(std::move(job_token)), timeout_(timeout) {}

  ~Impl() {
    if (thread_.joinable()) thread_.join();
    router_.close();
    zap_.close();  // an open socket would block the context's termination
    context_.close();
    // An ipc endpoint is a file: remove it so jobs leave nothing behind in the directory.
    if (absl::StartsWith(address_, "ipc://")) ::unlink(address_.c_str() + 6);
  }

  absl::Status Bind(const std::string& address) {
    std::optional<internal::CurveKeyPair> keys;
    if (!job_token_.empty()) {
      TESSEL_ASSIGN_OR_RETURN(
          keys, internal::BootstrapKeys(job_token_, internal::BootstrapSide::kCoordinator));
      TESSEL_ASSIGN_OR_RETURN(internal::CurveKeyPair host,
                              internal::BootstrapKeys(job_token_, internal::BootstrapSide::kHost));
      zap_policy_.curve_keys = {internal::DecodeCurveKey(host.public_z85)};
    }
    try {
      if (keys) {
        // Bound before the router: its CURVE handshakes ask this handler (AnswerZapRequests),
        // which admits only the hosts' key; without a handler libzmq would admit any key.
        zap_ = zmq::socket_t(context_, zmq::socket_type::rep);
        zap_.set(zmq::sockopt::linger, 0);
        zap_.bind(internal::kZapEndpoint);
      }
      router_ = zmq::socket_t(context_, zmq::socket_type::router);
      router_.set(zmq::sockopt::linger, 1000);
      internal::ConfigureListener(router_, address, /*plain=*/false,
                                  internal::kMaxRegistrationFrameBytes);
      if (keys) {
        router_.set(zmq::sockopt::curve_server, 1);
        router_.set(zmq::sockopt::curve_secretkey, keys->secret_z85);
        router_.set(zmq::sockopt::zap_domain, "tessel");
      }
      router_.bind(address);
      address_ = router_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return internal::ZmqStatus(e, absl::StrCat("bootstrap coordinator: cannot bind ", address));
    }
    return absl::OkStatus();
  }

  void StartThread() {
    thread_ = std::thread([this] {
      absl::Status status;
      try {
        status = Serve();
      } catch (const zmq::error_t& e) {
        status = internal::ZmqStatus(e, "bootstrap coordinator");
      }
      absl::MutexLock lock(&mu_);
      result_ = status;
      done_ = true;
    });
  }

  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return result_;
  }

  const std::string& address() const { return address_; }
  int64_t refused() const { return refused_.load(); }

 private:
  struct Registration {
    std::string identity;
    std::string endpoint;
    uint64_t fingerprint = 0;
    std::string curve_public_key;  // empty: the host does not use CURVE
  };

  void Reply(const std::string& identity, MessageType type, const std::string& body) {
    WireHeader h = ControlHeader(type, -1);
    router_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router_.send(HeaderFrame(h), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router_.send(zmq::buffer(body), zmq::send_flags::dontwait);
  }

  // Refuses every registered host (and `extra`) with `reason`, keeps refusing latecomers for a
  // short while, and returns the reason as the coordinator's result.
  absl::Status FailJob(const std::vector<std::optional<Registration>>& registered,
                       const std::string& extra, absl::Status reason) {
    const std::string text =
        absl::StrCat("refused by the bootstrap coordinator at ", address_, ": ", reason.message());
    for (const auto& r : registered) {
      if (r) Reply(r->identity, MessageType::kRefused, text);
    }
    if (!extra.empty()) Reply(extra, MessageType::kRefused, text);
    const absl::Time until = absl::Now() + absl::Seconds(1);
    while (absl::Now() < until) {
      Poll(std::chrono::milliseconds(50));
      std::vector<zmq::message_t> frames;
      if (!ReadMessage(&frames)) continue;
      Reply(std::string(FrameText(frames[0])), MessageType::kRefused, text);
    }
    return reason;
  }

  // Waits up to `timeout` for a message, answering the PLAIN handshakes' ZAP requests meanwhile.
  void Poll(std::chrono::milliseconds timeout) {
    zmq::pollitem_t items[2] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                {zap_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, zap_.handle() != nullptr ? 2 : 1, timeout);
    if (zap_.handle() != nullptr && (items[1].revents & ZMQ_POLLIN)) {
      refused_ += internal::AnswerZapRequests(
          zap_, zap_policy_, absl::StrCat("bootstrap coordinator at ", address_), &logged_);
    }
  }

  // Counts a message that is not a registration with the job token, and names its source in
  // the first few lines on stderr; the job goes on.
  void Drop(const zmq::message_t& frame, const std::string& why) {
    ++refused_;
    if (logged_ >= 5) return;
    ++logged_;
    std::fprintf(stderr,
                 "tessel transport: bootstrap coordinator at %s: dropped a message from an "
                 "unauthenticated peer from %s (%s)\n",
                 address_.c_str(), internal::PeerAddress(frame).c_str(), why.c_str());
  }

  bool ReadMessage(std::vector<zmq::message_t>* frames) {
    frames->clear();
    zmq::message_t frame;
    if (!router_.recv(frame, zmq::recv_flags::dontwait)) return false;
    bool more = frame.more();
    frames->push_back(std::move(frame));
    while (more) {
      zmq::message_t next;
      (void)router_.recv(next, zmq::recv_flags::none);
      more = next.more();
      frames->push_back(std::move(next));
    }
    return true;
  }

  using Registrations = std::vector<std::optional<Registration>>;

  // One message. Authenticates first: whatever does not carry the job token (a stranger's
  // hello, an abort, garbage, another version's hello without the token) is dropped and
  // counted without touching the job; only a token holder's version and fields are looked at.
  // Returns the coordinator's result once the job is decided (table sent, or refused).
  std::optional<absl::Status> HandleMessage(std::vector<zmq::message_t>& frames,
                                            Registrations& registered, int64_t* count) {
    if (frames.size() != 3) {
      if (frames.size() >= 2) Drop(frames[1], "not a registration");
      return std::nullopt;
    }
    const std::string identity(FrameText(frames[0]));
    absl::StatusOr<internal::WirePrefix> prefix =
        internal::DecodePrefix(static_cast<const std::byte*>(frames[1].data()), frames[1].size());
    std::vector<std::string> fields;
    if (!prefix.ok() || prefix->type != static_cast<uint8_t>(MessageType::kHello) ||
        !UnpackStrings(FrameText(frames[2]), &fields) || fields.size() < 2 || fields.size() > 3) {
      Drop(frames[1], prefix.ok() ? "not a registration" : std::string(prefix.status().message()));
      return std::nullopt;
    }
    if (!internal::TokensEqual(fields[0], job_token_)) {
      Drop(frames[1], "job token mismatch");
      Reply(identity, MessageType::kRefused,
            absl::StrCat("refused by the bootstrap coordinator at ", address_,
                         ": job token mismatch"));
      return std::nullopt;
    }
    absl::StatusOr<WireHeader> header =
        DecodeHeader(static_cast<const std::byte*>(frames[1].data()), frames[1].size());
    if (!header.ok()) {
      if (absl::IsFailedPrecondition(header.status())) {
        // A member of the job (it holds the token) built from another version: nothing can work.
        return FailJob(registered, identity,
                       absl::FailedPreconditionError(absl::StrCat(
                           "a host holding the job token (from ", internal::PeerAddress(frames[1]),
                           ") was refused: ", header.status().message())));
      }
      Drop(frames[1], std::string(header.status().message()));
      return std::nullopt;
    }
    return Register(identity, *header, fields, registered, count);
  }

  // A registration that passed authentication: checks it against the others, records it, and
  // hands out the table once every host registered.
  std::optional<absl::Status> Register(const std::string& identity, const WireHeader& header,
                                       const std::vector<std::string>& fields,
                                       Registrations& registered, int64_t* count) {
    const std::string curve_key = fields.size() == 3 ? fields[2] : "";
    const int64_t rank = header.src_host;
    // Compared and printed as sent (unsigned): a cast would show 2^64 - 1 as -1.
    const uint64_t hosts = header.sequence;
    if (hosts != static_cast<uint64_t>(num_hosts_)) {
      return FailJob(registered, identity,
                     absl::FailedPreconditionError(
                         absl::StrCat("host ", rank, " says the job has ", hosts,
                                      " hosts, the coordinator expects ", num_hosts_)));
    }
    if (rank < 0 || rank >= num_hosts_) {
      return FailJob(registered, identity,
                     absl::FailedPreconditionError(
                         absl::StrCat("host rank ", rank, " is outside [0, ", num_hosts_, ")")));
    }
    if (registered[rank] && registered[rank]->identity != identity) {
      return FailJob(registered, identity,
                     absl::FailedPreconditionError(
                         absl::StrCat("host rank ", rank, " registered twice (endpoints ",
                                      registered[rank]->endpoint, " and ", fields[1], ")")));
    }
    for (int64_t other = 0; other < num_hosts_; ++other) {
      if (registered[other] && registered[other]->fingerprint != header.signature.group_id) {
        return FailJob(
            registered, identity,
            absl::FailedPreconditionError(absl::StrFormat(
                "host %d's device map (fingerprint %016x) differs from host %d's "
                "(%016x)",
                rank, header.signature.group_id, other, registered[other]->fingerprint)));
      }
    }
    for (int64_t other = 0; other < num_hosts_; ++other) {
      if (registered[other] && other != rank &&
          registered[other]->curve_public_key.empty() != curve_key.empty()) {
        const int64_t with = curve_key.empty() ? other : rank;
        return FailJob(
            registered, identity,
            absl::FailedPreconditionError(absl::StrCat(
                "host ", with, " uses CURVE encryption but host ", with == rank ? other : rank,
                " does not (set ZmqOptions::curve or TESSEL_CURVE=1 on every host)")));
      }
    }
    if (!registered[rank]) ++*count;
    registered[rank] = Registration{identity, fields[1], header.signature.group_id, curve_key};
    if (*count < num_hosts_) return std::nullopt;
    std::vector<std::string> table;
    for (const auto& r : registered) table.push_back(r->endpoint);
    if (!curve_key.empty()) {
      for (const auto& r : registered) table.push_back(r->curve_public_key);
    }
    const std::string body = PackStrings(table);
    for (const auto& r : registered) Reply(r->identity, MessageType::kTable, body);
    return absl::OkStatus();
  }

  // "" or, when this process is (nearly) out of file descriptors, a clause saying so: about
  // 1000 connections that never finish a handshake use up a 1024 limit, and registrations then
  // cannot get in, which the timeout alone would blame on the hosts.
  static std::string DescriptorShortage() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "";
    std::error_code error;
    int64_t open = 0;
    for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end;
         it.increment(error)) {
      ++open;
    }
    if (error == std::errc::too_many_files_open) open = static_cast<int64_t>(limit.rlim_cur);
    if (error && open < static_cast<int64_t>(limit.rlim_cur)) return "";
    if (open + 16 < static_cast<int64_t>(limit.rlim_cur)) return "";
    return absl::StrCat("; this process has ", open, " of its ", limit.rlim_cur,
                        " file descriptors open: connections that never finish a handshake may "
                        "have used them up, so registrations could not get in");
  }

  absl::Status Serve() {
    const absl::Time deadline = absl::Now() + timeout_;
    Registrations registered(num_hosts_);
    int64_t count = 0;
    while (absl::Now() < deadline) {
      Poll(std::chrono::milliseconds(100));
      std::vector<zmq::message_t> frames;
      while (ReadMessage(&frames)) {
        std::optional<absl::Status> decided = HandleMessage(frames, registered, &count);
        if (decided.has_value()) return *decided;
      }
    }
    std::vector<int64_t> missing;
    for (int64_t r = 0; r < num_hosts_; ++r) {
      if (!registered[r]) missing.push_back(r);
    }
    return FailJob(registered, "",
                   absl::DeadlineExceededError(absl::StrCat(
                       "bootstrap timed out after ", absl::FormatDuration(timeout_), ": hosts [",
                       absl::StrJoin(missing, ","), "] never registered", DescriptorShortage())));
  }

  const int64_t num_hosts_;
  const std::string job_token_;
  const absl::Duration timeout_;
  zmq::context_t context_{1};
  zmq::socket_t zap_;  // ZAP handler (RFC 27) of the CURVE handshakes; unbound without a token
  internal::ZapPolicy zap_policy_;  // the hosts' bootstrap key (BootstrapKeys)
  zmq::socket_t router_;
  std::string address_;
  std::atomic<int64_t> refused_{0};
  int64_t logged_ = 0;  // serving thread: refusals printed on stderr
  std::thread thread_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<BootstrapCoordinator>> BootstrapCoordinator::Start(
    const std::string& bind_address, int64_t num_hosts, const std::string& job_token,
    absl::Duration timeout) {
  if (num_hosts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap coordinator: ", num_hosts, " hosts"));
  }
  std::unique_ptr<BootstrapCoordinator> coordinator(new BootstrapCoordinator());
  coordinator->impl_ = std::make_unique<Impl>(num_hosts, job_token, timeout);
  TESSEL_RETURN_IF_ERROR(coordinator->impl_->Bind(bind_address));
  coordinator->impl_->StartThread();
  return coordinator;
}

BootstrapCoordinator::~BootstrapCoordinator() = default;

const std::string& BootstrapCoordinator::address() const { return impl_->address(); }

int64_t BootstrapCoordinator::refused_connections() const { return impl_->refused(); }

absl::Status BootstrapCoordinator::Wait() { return impl_->Wait(); }

namespace internal {

absl::StatusOr<EndpointTable> RegisterWithCoordinator(
    zmq::context_t& context, const std::string& coordinator_address, int64_t rank,
    int64_t num_hosts, const std::string& job_token, uint64_t device_map_fingerprint,
    const std::string& endpoint, const std::string& curve_public_key, absl::Time deadline) {
  try {
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    internal::ConfigureClient(dealer, "", internal::MaxTableFrameBytes(num_hosts));
    if (!job_token.empty()) {
      // The coordinator must prove it holds the token (its key pair derives from it) before
      // the registration, which carries the token, leaves this host: a process that bound the
      // address first cannot complete the handshake and receives nothing.
      TESSEL_ASSIGN_OR_RETURN(internal::CurveKeyPair coordinator,
                              BootstrapKeys(job_token, BootstrapSide::kCoordinator));
      TESSEL_ASSIGN_OR_RETURN(internal::CurveKeyPair host,
                              BootstrapKeys(job_token, BootstrapSide::kHost));
      dealer.set(zmq::sockopt::curve_serverkey, coordinator.public_z85);
      dealer.set(zmq::sockopt::curve_publickey, host.public_z85);
      dealer.set(zmq::sockopt::curve_secretkey, host.secret_z85);
    }
    // A coordinator that refuses this host's handshake (another token, or a token on one side
    // only) never sees a message from it: the handshake's failure is the answer.
    const std::string monitor_address =
        absl::StrFormat("inproc://tessel-register-%p", static_cast<void*>(&dealer));
    if (zmq_socket_monitor(dealer.handle(), monitor_address.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
      throw zmq::error_t();
    }
    zmq::socket_t monitor(context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(monitor_address);
    // Over ipc the coordinator must be this user's process: a socket file of another user means
    // someone bound the path first, and would receive the registration with its token.
    const bool ipc = absl::StartsWith(coordinator_address, "ipc://");
    auto foreign = [&](int64_t uid, const char* how) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host ", rank, ": the bootstrap coordinator at ", coordinator_address, " ", how, " uid ",
          uid, ", not this user (uid ", ::getuid(),
          "): another user bound the path first; not trusting it (put TESSEL_COORDINATOR in a "
          "folder only you can enter)"));
    };
    struct stat socket_file;
    if (ipc && ::stat(coordinator_address.c_str() + 6, &socket_file) == 0 &&
        socket_file.st_uid != ::getuid()) {
      return foreign(socket_file.st_uid, "belongs to");
    }
    dealer.connect(coordinator_address);
    WireHeader h = ControlHeader(MessageType::kHello, rank);
    h.sequence = static_cast<uint64_t>(num_hosts);
    h.signature.group_id = device_map_fingerprint;
    dealer.send(HeaderFrame(h), zmq::send_flags::sndmore);
    std::vector<std::string> body = {job_token, endpoint};
    if (!curve_public_key.empty()) body.push_back(curve_public_key);
    dealer.send(zmq::buffer(PackStrings(body)), zmq::send_flags::none);
    while (absl::Now() < deadline) {
      zmq::pollitem_t items[2] = {{dealer.handle(), 0, ZMQ_POLLIN, 0},
                                  {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(100));
      zmq::message_t event;
      if (monitor.recv(event, zmq::recv_flags::dontwait)) {
        zmq::message_t event_address;
        if (event.more()) (void)monitor.recv(event_address, zmq::recv_flags::none);
        uint16_t id = 0;
        if (event.size() >= 2) std::memcpy(&id, event.data(), 2);
        (void)zmq_socket_monitor(dealer.handle(), nullptr, 0);
        return absl::FailedPreconditionError(absl::StrCat(
            "host ", rank, ": no authenticated bootstrap with the coordinator at ",
            coordinator_address, ": ",
            id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                ? "job token mismatch (its authentication refused this host's TESSEL_JOB_TOKEN)"
                : "job token mismatch: the process at that address did not prove it holds this "
                  "host's TESSEL_JOB_TOKEN (another token, a token on one side only, not a "
                  "tessel coordinator of this version, or another process bound the address "
                  "first); nothing was sent to it"));
      }
      zmq::message_t header_frame;
      if (!dealer.recv(header_frame, zmq::recv_flags::dontwait)) continue;
      zmq::message_t body;
      if (header_frame.more()) (void)dealer.recv(body, zmq::recv_flags::none);
      if (const int64_t uid = internal::IpcPeerUid(header_frame);
          ipc && uid >= 0 && uid != static_cast<int64_t>(::getuid())) {
        return foreign(uid, "answered as");  // its table would point at its sockets
      }
      absl::StatusOr<WireHeader> reply =
          DecodeHeader(static_cast<const std::byte*>(header_frame.data()), header_frame.size());
      if (!reply.ok()) {
        return absl::Status(reply.status().code(),
                            absl::StrCat("bootstrap coordinator at ", coordinator_address, ": ",
                                         reply.status().message()));
      }
      if (reply->type == MessageType::kRefused) {
        return absl::FailedPreconditionError(
            absl::StrCat("host ", rank, ": ", std::string(FrameText(body))));
      }
      if (reply->type == MessageType::kTable) {
        std::vector<std::string> strings;
        const size_t expected = static_cast<size_t>(num_hosts) * (curve_public_key.empty() ? 1 : 2);
        if (!UnpackStrings(FrameText(body), &strings) || strings.size() != expected) {
          return absl::InternalError(absl::StrCat("malformed endpoint table from ",
                                                  coordinator_address, ": ", strings.size(),
                                                  " entries, expected ", expected));
        }
        EndpointTable table;
        table.endpoints.assign(strings.begin(), strings.begin() + num_hosts);
        table.curve_public_keys.assign(strings.begin() + num_hosts, strings.end());
        return table;
      }
    }
  } catch (const zmq::error_t& e) {
    return ZmqStatus(e, absl::StrCat("host ", rank, ": bootstrap via ", coordinator_address));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "host ", rank, ": no endpoint table from the bootstrap coordinator at ", coordinator_address,
      " (is it running, did every host start, or did host 0 already end the bootstrap? "
      "its error says why)"));
}

}  // namespace internal
}  // namespace tessel::transport
