#include "tessel/transport/zmq_transport.h"

#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "tessel/core/environment.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/inproc_transport.h"
#include "tessel/transport/internal/host_link.h"
#include "tessel/transport/internal/host_state.h"
#include "tessel/transport/internal/shared_memory.h"
#include "tessel/transport/internal/wire.h"
#include "tessel/transport/internal/zmq_auth.h"
#include "tessel/transport/internal/zmq_bootstrap.h"
#include "tessel/transport/internal/zmq_util.h"

namespace tessel::transport {

using internal::Channel;
using internal::ControlHeader;
using internal::DecodeHeader;
using internal::FrameText;
using internal::HeaderFrame;
using internal::Message;
using internal::MessageType;
using internal::PackStrings;
using internal::WireHeader;

namespace {

// Called by ZeroMQ's I/O thread when it no longer needs a zero-copy payload.
void ReleaseZeroCopy(void* /*data*/, void* hint) {
  static_cast<internal::SendTracker*>(hint)->Release();
}

std::string RandomHex() {
  std::random_device device;
  return absl::StrFormat("%08x", device());
}

constexpr size_t kMaxIpcPathBytes = sizeof(sockaddr_un{}.sun_path) - 1;  // 107 on Linux

}  // namespace

absl::Status ApplyEnvironment(ZmqOptions* options) {
  if (options->coordinator_address.empty()) {
    if (const char* v = std::getenv("TESSEL_COORDINATOR")) options->coordinator_address = v;
  }
  if (options->job_token.empty()) {
    if (const char* v = std::getenv("TESSEL_JOB_TOKEN")) options->job_token = v;
  }
  // Strict: a misspelt TESSEL_CURVE must stop the job, not run it unencrypted.
  TESSEL_ASSIGN_OR_RETURN(std::optional<bool> external, GetBoolEnv("TESSEL_EXTERNAL_COORDINATOR"));
  if (external.has_value()) options->external_coordinator = *external;
  TESSEL_ASSIGN_OR_RETURN(std::optional<bool> curve, GetBoolEnv("TESSEL_CURVE"));
  if (curve.has_value()) options->curve = *curve;
  TESSEL_ASSIGN_OR_RETURN(std::optional<bool> shared_memory, GetBoolEnv("TESSEL_SHARED_MEMORY"));
  if (shared_memory.has_value()) options->shared_memory = *shared_memory;
  return absl::OkStatus();
}

bool CurveAvailable() { return zmq_has("curve") != 0; }

// The sockets, the progress thread and the HostLink of one host.
class ZmqTransport::Impl : public internal::HostLink {
 public:
  Impl(ZmqOptions options, internal::HostState* state)
      : options_(std::move(options)), state_(state), rank_(options_.rank) {}

  ~Impl() override { Shutdown(); }

  absl::Status Start();
  void Shutdown();

  absl::Status Send(int64_t dst_host, const WireHeader& header, const void* payload, size_t bytes,
                    internal::SendTracker* tracker, absl::Time deadline) override;
  void BroadcastAbort(const absl::Status& status) override;
  size_t zero_copy_min_bytes() const override {
    return static_cast<size_t>(options_.zero_copy_min_bytes);
  }

  const std::string& endpoint() const { return endpoint_; }
  int64_t refused() const { return refused_.load(); }
  const std::string& curve_public_key() const { return curve_public_; }
  int64_t shared_memory_messages() const { return shm_messages_.load(); }
  int64_t shared_memory_queued_headers() const { return shm_queued_.load(); }
  int64_t shared_memory_peers() const { return shm_peers_.load(); }

 private:
  struct Peer {
    absl::Mutex mu;
    std::unique_ptr<zmq::socket_t> out ABSL_GUARDED_BY(mu);  // DEALER; null once closed
    bool hello_sent ABSL_GUARDED_BY(mu) = false;             // our hello is queued on `out`
    std::unique_ptr<zmq::socket_t> monitor;  // PAIR receiving `out`'s events (progress thread)
    // Progress-thread state.
    absl::Time last_heard;
    absl::Time disconnected_at = absl::InfiniteFuture();
    // The peer's incoming shared-memory segment, mapped when its hello arrived (progress
    // thread); null until then, or when shared memory is off or could not be mapped.
    std::shared_ptr<internal::ShmSegment> shm_owner;
    std::atomic<internal::ShmSegment*> shm{nullptr};
    absl::Mutex queue_mu;  // serializes this host's pushes into the peer's header queue
    // Set by whichever thread drained a header of this peer from the shared-memory queue; the
    // progress thread turns it into last_heard (liveness).
    std::atomic<bool> heard_through_shm{false};
  };

  // PLAIN authentication of the data connections: a job token and no CURVE (which
  // authenticates by key).
  bool UsesPlain() const { return !options_.job_token.empty() && !options_.curve; }
  // Shared-memory payloads: ipc, no curve, more than one host, and asked for.
  bool UsesSharedMemory() const {
    return options_.shared_memory && options_.protocol == ZmqProtocol::kIpc && !options_.curve &&
           options_.num_hosts > 1;
  }
  // Creates this host's incoming segment (a failure leaves shm_ null and says why on stderr:
  // payloads then go through ZeroMQ).
  void CreateSharedMemory();
  // Maps peer `p`'s segment from the descriptor in its hello (progress thread).
  void MapPeerSharedMemory(int64_t p, const std::string& descriptor);
  // Hands the payload in slot `slot` of peer `peer`'s region to the mailbox, after checking
  // that the header is a data header from that peer naming a slot that exists (else a protocol
  // error fails the job) and that the slot was claimed (else the segment is corrupt: kDataLoss
  // fails the job, ShmSegment::CheckClaimed).
  void DeliverShm(int64_t peer, const WireHeader& header, uint32_t slot);
  // Delivers every header waiting in this host's shared-memory queues: the mailbox's poller (a
  // waiting device thread), the progress thread after every poll, and before a departure.
  void DrainShmQueues();
  // Puts the payload into a slot of the peer's segment and sends the header naming the slot.
  // False (nothing sent) when the payload does not qualify or no slot is free.
  bool TrySendThroughSharedMemory(int64_t dst_host, const WireHeader& header, const void* payload,
                                  size_t bytes, absl::Time deadline, absl::Status* status);
  // The send loop: header frame plus optional body, retried while the peer's connection is
  // not up (ZMQ_IMMEDIATE), until `deadline`.
  absl::Status SendFrames(int64_t dst_host, zmq::message_t& head,
                          std::vector<zmq::message_t>& bodies, absl::Time deadline);

  absl::Status BindData();
  absl::Status ConnectPeers(const internal::EndpointTable& table);
  // Answers the CURVE and PLAIN handshakes' ZAP requests (RFC 27) waiting on zap_: accepts a
  // client whose public key is in the job's table, or whose PLAIN password is the job token;
  // refuses (and counts) any other.
  void AnswerZap();
  // The hello is the first message on every connection: the peer drops anything else on a
  // connection that has not said one (HandleFrames). Every send on a peer's DEALER calls this
  // first; it queues the hello if that has not been done (without blocking) and says whether
  // it is queued. False while the connection is not up (ZMQ_IMMEDIATE): then nothing else may
  // be sent either, since the connection could come up between the two sends. Throws
  // zmq::error_t.
  bool HelloQueued(Peer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer.mu);
  // Runs `attempt` on peer `p` under its lock until it returns true (queued), retrying every
  // 2 ms while it returns false (the connection is not up yet), until `deadline`. Errors:
  // kUnavailable if the connection is closed, kDeadlineExceeded, a zmq::error_t `attempt`
  // throws as its status.
  absl::Status RetryUntilQueued(int64_t p, absl::Time deadline,
                                absl::FunctionRef<bool(Peer&)> attempt);
  // Queues the hello to peer `p`, retrying while the connection is not up yet, until
  // `deadline`.
  absl::Status SendHello(int64_t p, absl::Time deadline);
  // Sends a header (and optional body) on peer `p`'s socket, after the hello, retrying while
  // the connection is not up yet, until `deadline`.
  absl::Status SendControl(int64_t p, const WireHeader& header, const std::string& body,
                           absl::Time deadline);
  void ProgressLoop();
  void ReadIncoming();
  void HandleFrames(std::vector<zmq::message_t>& frames);
  // The hello on a connection that has not said one (progress thread).
  void HandleHello(std::vector<zmq::message_t>& frames);
  // A kData message of authenticated peer `peer`: its payload (one frame or several) to the
  // mailbox.
  void DeliverData(int64_t peer, const WireHeader& header, std::vector<zmq::message_t>& frames);
  // Counts a message of an unauthenticated peer and names its address on stderr (the first
  // few); the job goes on.
  void Drop(const zmq::message_t& frame, const std::string& why);
  void ReadMonitor(int64_t p);
  void CheckPeers(absl::Time now);
  void SendHeartbeats();
  void CloseOutgoing(int linger_ms);
  void Refuse(const std::string& identity, const std::string& reason);

  const ZmqOptions options_;
  internal::HostState* state_;
  const int64_t rank_;
  // Largest frame on a data connection (internal::MaxDataFrameBytes): ZMQ_MAXMSGSIZE of the
  // incoming socket, and the size larger payloads are cut into.
  const size_t max_frame_bytes_ =
      static_cast<size_t>(internal::MaxDataFrameBytes(options_.communicator));
  zmq::context_t context_{1};
  // CURVE: this host's keypair (Z85), the REP socket of the context's ZAP handler (progress
  // thread once started), and the public keys (32 bytes, binary) allowed to connect.
  std::string curve_public_;
  std::string curve_secret_;
  std::unique_ptr<zmq::socket_t> zap_;
  internal::ZapPolicy zap_policy_;  // DataPassword(token); with CURVE the table's public keys
  // DataPassword(job token): the PLAIN password and the proof in a hello; "" without a token.
  const std::string data_password_ = internal::DataPassword(options_.job_token);
  zmq::socket_t in_;  // ROUTER, progress thread only once started
  std::string endpoint_;
  std::vector<std::unique_ptr<Peer>> peers_;
  // The hello's body: the job token and this host's shared-memory descriptor. Set before the
  // progress thread starts, read-only after.
  std::string hello_body_;
  std::unique_ptr<BootstrapCoordinator> coordinator_;
  std::thread progress_;
  std::atomic<bool> stop_{false};
  // Set before the goodbyes go out: no heartbeat follows a goodbye on a connection.
  std::atomic<bool> leaving_{false};
  std::atomic<int64_t> refused_{0};
  int64_t logged_ = 0;    // progress thread: refusals printed on stderr
  bool started_ = false;  // the progress thread runs
  std::string ipc_path_;  // the data socket's file (ipc only), removed at shutdown
  bool ready_ = false;    // Start() succeeded
  bool shut_down_ = false;
  bool outgoing_closed_ = false;                          // progress thread
  absl::Time failure_seen_ = absl::InfiniteFuture();      // progress thread
  absl::flat_hash_map<std::string, int64_t> identities_;  // progress thread: ROUTER id -> rank
  std::shared_ptr<internal::ShmSegment> shm_;             // this host's incoming slots, or null
  // Serializes DrainShmQueues (the queues have one consumer at a time) and orders a departure
  // after the drain of the headers its host queued before it.
  absl::Mutex drain_mu_;
  std::atomic<int64_t> shm_messages_{0};
  std::atomic<int64_t> shm_queued_{0};
  std::atomic<int64_t> shm_peers_{0};

  absl::Mutex mu_;
  std::vector<bool> hello_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> bye_ ABSL_GUARDED_BY(mu_);
};

absl::Status ZmqTransport::Impl::BindData() {
  std::string address;
  if (options_.protocol == ZmqProtocol::kIpc) {
    std::string dir = options_.ipc_dir;
    if (dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    const std::string path = absl::StrCat(dir, "/tessel-", getpid(), "-h", rank_, "-", RandomHex());
    if (path.size() > kMaxIpcPathBytes) {
      return absl::InvalidArgumentError(absl::StrCat("ipc socket path \"", path, "\" is ",
                                                     path.size(), " bytes, the limit is ",
                                                     kMaxIpcPathBytes, "; set a shorter ipc_dir"));
    }
    address = absl::StrCat("ipc://", path);
    ipc_path_ = path;
  } else {
    address = absl::StrCat("tcp://", options_.tcp_interface, ":*");
  }
  try {
    if (options_.curve || UsesPlain()) {
      // The ZAP handler must be bound before the first CURVE or PLAIN socket of the context:
      // without one, libzmq accepts every client key.
      zap_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::rep);
      zap_->set(zmq::sockopt::linger, 0);
      zap_->bind(internal::kZapEndpoint);
    }
    in_ = zmq::socket_t(context_, zmq::socket_type::router);
    in_.set(zmq::sockopt::linger, 0);
    in_.set(zmq::sockopt::rcvhwm, 0);
    internal::ConfigureListener(in_, address, UsesPlain(), static_cast<int64_t>(max_frame_bytes_));
    if (options_.socket_buffer_bytes > 0 && options_.protocol == ZmqProtocol::kIpc) {
      in_.set(zmq::sockopt::rcvbuf, static_cast<int>(options_.socket_buffer_bytes));
    }
    if (options_.curve) {
      in_.set(zmq::sockopt::curve_server, 1);
      in_.set(zmq::sockopt::curve_secretkey, curve_secret_);
      in_.set(zmq::sockopt::zap_domain, "tessel");
    }
    in_.bind(address);
    endpoint_ = in_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return internal::ZmqStatus(e, absl::StrCat("host ", rank_, ": cannot bind ", address));
  }
  return absl::OkStatus();
}

absl::Status ZmqTransport::Impl::ConnectPeers(const internal::EndpointTable& table) {
  const int64_t n = options_.num_hosts;
  peers_.resize(n);
  try {
    for (int64_t p = 0; p < n; ++p) {
      peers_[p] = std::make_unique<Peer>();
      if (p == rank_) continue;
      auto out = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      out->set(zmq::sockopt::immediate, 1);
      out->set(zmq::sockopt::sndhwm, 0);
      if (options_.socket_buffer_bytes > 0 && options_.protocol == ZmqProtocol::kIpc) {
        out->set(zmq::sockopt::sndbuf, static_cast<int>(options_.socket_buffer_bytes));
      }
      out->set(zmq::sockopt::linger, 0);
      // A peer's ROUTER sends nothing back but a refusal.
      internal::ConfigureClient(*out, UsesPlain() ? data_password_ : "",
                                internal::kMaxControlBodyBytes + 1024);
      if (options_.curve) {
        out->set(zmq::sockopt::curve_serverkey, table.curve_public_keys[p]);
        out->set(zmq::sockopt::curve_publickey, curve_public_);
        out->set(zmq::sockopt::curve_secretkey, curve_secret_);
      }
      const std::string monitor_address =
          absl::StrFormat("inproc://tessel-monitor-%p-%d", static_cast<void*>(this), p);
      if (zmq_socket_monitor(out->handle(), monitor_address.c_str(),
                             ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
        throw zmq::error_t();
      }
      auto monitor = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pair);
      monitor->set(zmq::sockopt::linger, 0);
      monitor->connect(monitor_address);
      out->connect(table.endpoints[p]);
      absl::MutexLock lock(&peers_[p]->mu);
      peers_[p]->out = std::move(out);
      peers_[p]->monitor = std::move(monitor);
      peers_[p]->last_heard = absl::Now();
    }
  } catch (const zmq::error_t& e) {
    return internal::ZmqStatus(e, absl::StrCat("host ", rank_, ": connecting to peers"));
  }
  return absl::OkStatus();
}

absl::Status ZmqTransport::Impl::Start() {
  const int64_t n = options_.num_hosts;
  {
    absl::MutexLock lock(&mu_);
    hello_.assign(n, false);
    bye_.assign(n, false);
  }
  if (n == 1) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.bootstrap_timeout;
  zap_policy_.plain_password = data_password_;
  if (options_.curve) {
    char public_z85[41] = {};
    char secret_z85[41] = {};
    if (zmq_curve_keypair(public_z85, secret_z85) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("host ", rank_, ": cannot generate a CURVE keypair: ", zmq_strerror(errno)));
    }
    curve_public_ = public_z85;
    curve_secret_ = secret_z85;
  }
  TESSEL_RETURN_IF_ERROR(BindData());
  if (rank_ == 0 && !options_.external_coordinator) {
    TESSEL_ASSIGN_OR_RETURN(
        coordinator_, BootstrapCoordinator::Start(options_.coordinator_address, n,
                                                  options_.job_token, options_.bootstrap_timeout));
  }
  // Wait a little longer than the coordinator, so its explanation (who is missing) arrives.
  TESSEL_ASSIGN_OR_RETURN(
      internal::EndpointTable table,
      internal::RegisterWithCoordinator(context_, options_.coordinator_address, rank_, n,
                                        options_.job_token, options_.device_map.Fingerprint(),
                                        endpoint_, curve_public_, deadline + absl::Seconds(1)));
  if (options_.curve) {
    for (int64_t p = 0; p < n; ++p) {
      std::string key(32, '\0');
      if (table.curve_public_keys[p].size() != 40 ||
          zmq_z85_decode(reinterpret_cast<uint8_t*>(key.data()),
                         table.curve_public_keys[p].c_str()) == nullptr) {
        return absl::InternalError(absl::StrCat("host ", rank_, ": host ", p,
                                                "'s CURVE public key in the endpoint table is "
                                                "not 40 characters of Z85"));
      }
      zap_policy_.curve_keys.push_back(std::move(key));
    }
  }
  TESSEL_RETURN_IF_ERROR(ConnectPeers(table));
  // Before the progress thread starts (it reads shm_) and before any device thread waits.
  if (UsesSharedMemory()) CreateSharedMemory();
  // The receiver maps the connection to our rank. Before the progress thread starts: its
  // heartbeats (and an abort) send the hello first where it has not gone yet.
  hello_body_ = PackStrings({data_password_, shm_ != nullptr ? shm_->descriptor() : ""});
  started_ = true;
  progress_ = std::thread([this] { ProgressLoop(); });
  for (int64_t p = 0; p < n; ++p) {
    if (p == rank_) continue;
    TESSEL_RETURN_IF_ERROR(SendHello(p, deadline));
  }
  // Every peer's hello received: all connections are up in both directions.
  {
    absl::MutexLock lock(&mu_);
    auto all_hello = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (int64_t p = 0; p < options_.num_hosts; ++p) {
        if (p != rank_ && !hello_[p]) return false;
      }
      return true;
    };
    while (!all_hello()) {
      if (mu_.AwaitWithDeadline(absl::Condition(&all_hello),
                                std::min(deadline, absl::Now() + absl::Milliseconds(50)))) {
        break;
      }
      TESSEL_RETURN_IF_ERROR(state_->mailbox().failure());
      if (absl::Now() >= deadline) {
        std::vector<int64_t> missing;
        for (int64_t p = 0; p < n; ++p) {
          if (p != rank_ && !hello_[p]) missing.push_back(p);
        }
        return absl::DeadlineExceededError(absl::StrCat("host ", rank_, ": no hello from hosts [",
                                                        absl::StrJoin(missing, ","),
                                                        "] within the bootstrap timeout"));
      }
    }
  }
  if (coordinator_ != nullptr) {
    absl::Status served = coordinator_->Wait();
    refused_ += coordinator_->refused_connections();
    coordinator_.reset();
    TESSEL_RETURN_IF_ERROR(served);
  }
  ready_ = true;
  return absl::OkStatus();
}

bool ZmqTransport::Impl::HelloQueued(Peer& peer) {
  if (peer.hello_sent) return true;
  // Under ZMQ_IMMEDIATE a multipart message whose first frame was accepted is accepted whole.
  if (peer.out->send(HeaderFrame(ControlHeader(MessageType::kHello, rank_)),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    (void)peer.out->send(zmq::buffer(hello_body_), zmq::send_flags::none);
    peer.hello_sent = true;
  }
  return peer.hello_sent;
}

absl::Status ZmqTransport::Impl::RetryUntilQueued(int64_t p, absl::Time deadline,
                                                  absl::FunctionRef<bool(Peer&)> attempt) {
  while (true) {
    {
      absl::MutexLock lock(&peers_[p]->mu);
      if (peers_[p]->out == nullptr) {
        return absl::UnavailableError(absl::StrCat("connection to host ", p, " is closed"));
      }
      try {
        if (attempt(*peers_[p])) return absl::OkStatus();
      } catch (const zmq::error_t& e) {
        return internal::ZmqStatus(e, absl::StrCat("host ", rank_, ": send to host ", p));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("host ", rank_, ": could not connect to host ", p));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::Status ZmqTransport::Impl::SendHello(int64_t p, absl::Time deadline) {
  // RetryUntilQueued holds peer.mu while it calls the lambda; the analysis cannot see that.
  return RetryUntilQueued(
      p, deadline, [this](Peer& peer) ABSL_NO_THREAD_SAFETY_ANALYSIS { return HelloQueued(peer); });
}

absl::Status ZmqTransport::Impl::SendControl(int64_t p, const WireHeader& header,
                                             const std::string& body, absl::Time deadline) {
  return RetryUntilQueued(p, deadline, [&](Peer& peer) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // Not connected yet (no hello queued): nothing else may go first; retry.
    if (!HelloQueued(peer)) return false;
    zmq::message_t head = HeaderFrame(header);
    if (body.empty()) return peer.out->send(head, zmq::send_flags::dontwait).has_value();
    if (!peer.out->send(head, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return false;
    }
    (void)peer.out->send(zmq::buffer(body), zmq::send_flags::none);
    return true;
  });
}

void ZmqTransport::Impl::CreateSharedMemory() {
  // One slot holds one pipelined segment (1 MiB by default), capped at 64 MiB.
  const int64_t chunk =
      std::clamp<int64_t>(options_.communicator.pipeline_chunk_bytes, 4096, int64_t{64} << 20);
  const internal::ShmLayout layout{options_.num_hosts, options_.shared_memory_slots,
                                   (chunk + 4095) / 4096 * 4096};
  absl::StatusOr<std::shared_ptr<internal::ShmSegment>> segment =
      internal::ShmSegment::Create(layout);
  if (!segment.ok()) {
    std::fprintf(stderr,
                 "tessel transport: host %lld: %s; payloads go through ZeroMQ sockets instead\n",
                 static_cast<long long>(rank_), std::string(segment.status().message()).c_str());
    return;
  }
  shm_ = *std::move(segment);
  // Senders ring the bells in the segment after they queue a header there; a waiting device
  // thread wakes on them and drains the queues itself (no hop through the progress thread).
  state_->mailbox().UseDoorbells(shm_->doorbells(), shm_);
  state_->mailbox().set_poller([this] { DrainShmQueues(); });
}

void ZmqTransport::Impl::MapPeerSharedMemory(int64_t p, const std::string& descriptor) {
  Peer& peer = *peers_[p];
  if (peer.shm_owner != nullptr) return;  // a repeated hello
  absl::StatusOr<std::shared_ptr<internal::ShmSegment>> segment =
      internal::ShmSegment::Open(descriptor);
  if (!segment.ok() || (*segment)->layout().num_hosts != options_.num_hosts) {
    const std::string why = segment.ok() ? "its segment is laid out for another host count"
                                         : std::string(segment.status().message());
    std::fprintf(stderr,
                 "tessel transport: host %lld: cannot use host %lld's shared memory (%s); "
                 "payloads to it go through ZeroMQ sockets instead\n",
                 static_cast<long long>(rank_), static_cast<long long>(p), why.c_str());
    return;
  }
  peer.shm_owner = *std::move(segment);
  peer.shm.store(peer.shm_owner.get(), std::memory_order_release);
  ++shm_peers_;
}

void ZmqTransport::Impl::DeliverShm(int64_t peer, const WireHeader& header, uint32_t slot) {
  if (header.src_host != peer || header.channel == Channel::kControl) {
    ++refused_;
    return;
  }
  if (shm_ == nullptr || slot >= static_cast<uint32_t>(shm_->layout().slots) ||
      header.payload_bytes == 0 ||
      header.payload_bytes > static_cast<uint64_t>(shm_->layout().slot_bytes)) {
    state_->mailbox().Fail(
        absl::InternalError(absl::StrCat(
            "protocol error: host ", peer, " named shared-memory slot ", slot, " with ",
            header.payload_bytes, " bytes, which this host ",
            shm_ == nullptr ? "does not have (shared memory is off here)"
                            : absl::StrCat("does not have (", shm_->layout().slots, " slots of ",
                                           shm_->layout().slot_bytes, " bytes)"))),
        /*broadcast=*/true);
    return;
  }
  // The header is the peer's (authenticated or checksummed); a slot it names that is not
  // claimed means the state words were written from outside: the same report as a scribbled
  // header queue, not a protocol error of the peer.
  if (absl::Status claimed = shm_->CheckClaimed(peer, static_cast<int32_t>(slot)); !claimed.ok()) {
    state_->mailbox().Fail(
        absl::Status(claimed.code(), absl::StrCat("host ", rank_, ": ", claimed.message())),
        /*broadcast=*/true);
    return;
  }
  Message message;
  message.header = header;
  message.header.type = MessageType::kData;
  message.payload = std::make_unique<internal::ShmPayload>(
      shm_, peer, static_cast<int32_t>(slot), static_cast<size_t>(header.payload_bytes));
  state_->mailbox().Deliver(std::move(message));
}

void ZmqTransport::Impl::DrainShmQueues() {
  if (shm_ == nullptr) return;
  absl::MutexLock lock(&drain_mu_);
  std::byte entry[internal::kShmQueueEntryBytes];
  for (int64_t p = 0; p < options_.num_hosts; ++p) {
    if (p == rank_) continue;
    bool any = false;
    while (true) {
      absl::StatusOr<bool> popped = shm_->PopHeader(p, entry);
      if (!popped.ok()) {
        // Not host p's fault as far as anyone can tell: the queue was written by something
        // that does not know the segment's checksums (ShmSegment::PopHeader).
        state_->mailbox().Fail(
            absl::DataLossError(absl::StrCat("host ", rank_, ": ", popped.status().message())),
            /*broadcast=*/true);
        return;
      }
      if (!*popped) break;
      any = true;
      absl::StatusOr<WireHeader> header = DecodeHeader(entry, internal::kWireHeaderBytes);
      if (!header.ok() || header->type != MessageType::kDataShm) {
        state_->mailbox().Fail(
            absl::InternalError(absl::StrCat(
                "protocol error: host ", p, " queued a malformed shared-memory header: ",
                header.ok() ? "not type 8" : header.status().message())),
            /*broadcast=*/true);
        return;
      }
      uint32_t slot = 0;
      std::memcpy(&slot, entry + internal::kWireHeaderBytes, sizeof(slot));
      DeliverShm(p, *header, slot);
    }
    if (any) peers_[p]->heard_through_shm.store(true, std::memory_order_relaxed);
  }
}

bool ZmqTransport::Impl::TrySendThroughSharedMemory(int64_t dst_host, const WireHeader& header,
                                                    const void* payload, size_t bytes,
                                                    absl::Time deadline, absl::Status* status) {
  internal::ShmSegment* segment = peers_[dst_host]->shm.load(std::memory_order_acquire);
  if (segment == nullptr || bytes == 0 ||
      bytes < static_cast<size_t>(options_.shared_memory_min_bytes) ||
      bytes > static_cast<size_t>(segment->layout().slot_bytes)) {
    return false;
  }
  // Every slot busy: this payload goes through ZeroMQ, whose I/O threads then copy it while
  // this thread goes on (waiting for a slot measured slower: docs/PERFORMANCE.md).
  const int32_t slot = segment->Claim(rank_);
  if (slot < 0) return false;
  // The header goes first and the bytes are copied while it travels; the receiver waits for
  // Publish before it reads them (Mailbox::Take, Payload::ready). The header goes into the
  // peer's queue in the segment, and once the bytes are published the destination's doorbell
  // rings (a system call only if a thread sleeps on it); when the queue is full, the header
  // goes through ZeroMQ (whose delivery rings the bell on the receiving side).
  WireHeader h = header;
  h.type = MessageType::kDataShm;
  const uint32_t index = static_cast<uint32_t>(slot);
  Peer& peer = *peers_[dst_host];
  bool queued = false;
  {
    std::byte entry[internal::kShmQueueEntryBytes] = {};
    internal::EncodeHeader(h, entry);
    std::memcpy(entry + internal::kWireHeaderBytes, &index, sizeof(index));
    absl::MutexLock lock(&peer.queue_mu);
    queued = segment->PushHeader(rank_, entry);
  }
  if (queued) {
    ++shm_queued_;
  } else {
    zmq::message_t head = HeaderFrame(h);
    std::vector<zmq::message_t> body;
    body.emplace_back(&index, sizeof(index));
    *status = SendFrames(dst_host, head, body, deadline);
    if (!status->ok()) {
      segment->Free(rank_, slot);  // the header never left: the receiver cannot hold the slot
      return true;
    }
  }
  std::memcpy(segment->slot_data(rank_, slot), payload, bytes);
  segment->Publish(rank_, slot);
  // After Publish: a receiver woken now finds the bytes there, instead of waking while they
  // are copied and polling for them.
  if (queued) internal::RingDoorbell(segment->doorbells()[internal::DoorbellIndex(h.dst)]);
  ++shm_messages_;
  return true;
}

absl::Status ZmqTransport::Impl::Send(int64_t dst_host, const WireHeader& header,
                                      const void* payload, size_t bytes,
                                      internal::SendTracker* tracker, absl::Time deadline) {
  absl::Status status;
  if (TrySendThroughSharedMemory(dst_host, header, payload, bytes, deadline, &status)) {
    return status;
  }
  zmq::message_t head = HeaderFrame(header);
  // Payloads larger than a frame may be (ZMQ_MAXMSGSIZE of the receiver, MaxDataFrameBytes)
  // travel as several frames of one message: only Send/Recv and rendezvous payloads are.
  std::vector<zmq::message_t> bodies;
  const auto* bytes_in = static_cast<const char*>(payload);
  for (size_t offset = 0; offset < bytes; offset += max_frame_bytes_) {
    const size_t len = std::min(max_frame_bytes_, bytes - offset);
    zmq::message_t body;
    if (tracker != nullptr) {
      tracker->Acquire();
      body.rebuild(const_cast<char*>(bytes_in + offset), len, &ReleaseZeroCopy, tracker);
    } else {
      body.rebuild(bytes_in + offset, len);
    }
    bodies.push_back(std::move(body));
  }
  return SendFrames(dst_host, head, bodies, deadline);
}

absl::Status ZmqTransport::Impl::SendFrames(int64_t dst_host, zmq::message_t& head,
                                            std::vector<zmq::message_t>& bodies,
                                            absl::Time deadline) {
  Peer& peer = *peers_[dst_host];
  while (true) {
    TESSEL_RETURN_IF_ERROR(state_->mailbox().failure());
    {
      absl::MutexLock lock(&peer.mu);
      if (peer.out == nullptr) {
        TESSEL_RETURN_IF_ERROR(state_->mailbox().failure());
        return absl::UnavailableError(absl::StrCat("connection to host ", dst_host, " is closed"));
      }
      try {
        if (!HelloQueued(peer)) {
          // Not connected yet: retry below.
        } else if (bodies.empty()) {
          if (peer.out->send(head, zmq::send_flags::dontwait)) return absl::OkStatus();
        } else if (peer.out->send(head, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          // The later frames of an accepted multipart message are never refused.
          for (size_t f = 0; f < bodies.size(); ++f) {
            (void)peer.out->send(bodies[f], f + 1 < bodies.size() ? zmq::send_flags::sndmore
                                                                  : zmq::send_flags::none);
          }
          return absl::OkStatus();
        }
      } catch (const zmq::error_t& e) {
        return internal::ZmqStatus(e, absl::StrCat("host ", rank_, ": send to host ", dst_host));
      }
    }
    // No live connection to the peer (ZMQ_IMMEDIATE): it is restarting its connection or gone;
    // the progress thread decides which.
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("could not send to host ", dst_host, ": no connection"));
    }
    absl::SleepFor(absl::Microseconds(500));
  }
}

void ZmqTransport::Impl::BroadcastAbort(const absl::Status& status) {
  WireHeader h = ControlHeader(MessageType::kAbort, rank_);
  h.sequence = static_cast<uint64_t>(status.code());
  // Cut to what a peer accepts in a control frame (ZMQ_MAXMSGSIZE).
  const std::string text(
      status.message().substr(0, static_cast<size_t>(internal::kMaxControlBodyBytes)));
  for (int64_t p = 0; p < static_cast<int64_t>(peers_.size()); ++p) {
    if (p == rank_) continue;
    absl::MutexLock lock(&peers_[p]->mu);
    if (peers_[p]->out == nullptr) continue;
    try {
      // An abort during the bootstrap goes after the hello, or the peer would drop it.
      if (HelloQueued(*peers_[p]) &&
          peers_[p]->out->send(HeaderFrame(h),
                               zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        (void)peers_[p]->out->send(zmq::buffer(text), zmq::send_flags::none);
      }
    } catch (const zmq::error_t&) {
      // Best effort: the peer notices the closed connection instead.
    }
  }
}

void ZmqTransport::Impl::Refuse(const std::string& identity, const std::string& reason) {
  // Counted by the caller (Drop): a refusal is one dropped message.
  try {
    in_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    in_.send(HeaderFrame(ControlHeader(MessageType::kRefused, rank_)),
             zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    in_.send(zmq::buffer(reason), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
  }
}

void ZmqTransport::Impl::Drop(const zmq::message_t& frame, const std::string& why) {
  ++refused_;
  if (logged_ >= 5) return;  // enough to see an attack without letting it fill the log
  ++logged_;
  std::fprintf(stderr,
               "tessel transport: host %lld: dropped a message from an unauthenticated peer from "
               "%s (%s)\n",
               static_cast<long long>(rank_), internal::PeerAddress(frame).c_str(), why.c_str());
}

void ZmqTransport::Impl::HandleHello(std::vector<zmq::message_t>& frames) {
  // Authenticated first (the token), then parsed: a stranger's hello of any version is dropped
  // and counted; a token holder of another version is a job error, since nothing can work.
  const std::string identity(FrameText(frames[0]));
  std::vector<std::string> fields;
  if (frames.size() != 3 || !internal::UnpackStrings(FrameText(frames[2]), &fields) ||
      fields.size() != 2 || !internal::TokensEqual(fields[0], data_password_)) {
    Drop(frames[1], "job token mismatch");
    Refuse(identity, absl::StrCat("refused by host ", rank_, ": job token mismatch"));
    return;
  }
  absl::StatusOr<WireHeader> header =
      DecodeHeader(static_cast<const std::byte*>(frames[1].data()), frames[1].size());
  if (!header.ok()) {
    if (absl::IsFailedPrecondition(header.status())) {
      state_->mailbox().Fail(
          absl::FailedPreconditionError(absl::StrCat(
              "host ", rank_, ": a peer holding the job token (from ",
              internal::PeerAddress(frames[1]), ") was refused: ", header.status().message())),
          /*broadcast=*/true);
      return;
    }
    Drop(frames[1], std::string(header.status().message()));
    return;
  }
  const int64_t peer = header->src_host;
  if (peer < 0 || peer >= options_.num_hosts || peer == rank_) {
    Drop(frames[1], absl::StrCat("a hello with the job token for bad host rank ", peer));
    Refuse(identity, absl::StrCat("refused by host ", rank_, ": bad host rank ", peer));
    return;
  }
  identities_[identity] = peer;
  peers_[peer]->last_heard = absl::Now();
  if (!fields[1].empty() && UsesSharedMemory()) MapPeerSharedMemory(peer, fields[1]);
  absl::MutexLock lock(&mu_);
  hello_[peer] = true;
}

void ZmqTransport::Impl::HandleFrames(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) {
    if (!frames.empty()) Drop(frames[0], "an empty message");
    return;
  }
  const std::string identity(FrameText(frames[0]));
  auto it = identities_.find(identity);
  if (it == identities_.end()) {
    // Nothing but a hello with the job token is looked at on a connection that has not said
    // one: another version's hello, an abort, data or garbage from a stranger is dropped
    // before it is parsed any further.
    absl::StatusOr<internal::WirePrefix> prefix =
        internal::DecodePrefix(static_cast<const std::byte*>(frames[1].data()), frames[1].size());
    if (!prefix.ok()) {
      Drop(frames[1], std::string(prefix.status().message()));
    } else if (prefix->type != static_cast<uint8_t>(MessageType::kHello)) {
      Drop(frames[1], "no hello with the job token on this connection");
    } else {
      HandleHello(frames);
    }
    return;
  }
  const int64_t peer = it->second;
  absl::StatusOr<WireHeader> header =
      DecodeHeader(static_cast<const std::byte*>(frames[1].data()), frames[1].size());
  if (!header.ok()) {
    state_->mailbox().Fail(absl::InternalError(absl::StrCat("protocol error: host ", peer, ": ",
                                                            header.status().message())),
                           /*broadcast=*/true);
    return;
  }
  peers_[peer]->last_heard = absl::Now();
  switch (header->type) {
    case MessageType::kData:
      DeliverData(peer, *header, frames);
      return;
    case MessageType::kDataShm: {
      uint32_t slot = UINT32_MAX;
      if (frames.size() == 3 && frames[2].size() == sizeof(slot)) {
        std::memcpy(&slot, frames[2].data(), sizeof(slot));
      }
      DeliverShm(peer, *header, slot);
      return;
    }
    case MessageType::kBye: {
      {
        absl::MutexLock lock(&mu_);
        bye_[peer] = true;
      }
      // Its last headers may wait in the shared-memory queue: they were pushed before it said
      // goodbye, so they go to the mailbox before the departure.
      DrainShmQueues();
      state_->mailbox().MarkDeparted(peer);
      return;
    }
    case MessageType::kAbort: {
      const std::string text = frames.size() == 3 ? std::string(FrameText(frames[2])) : "";
      const auto code = static_cast<absl::StatusCode>(header->sequence);
      state_->mailbox().Fail(
          absl::Status(code, absl::StrCat("host ", peer, " aborted the job: ", text)),
          /*broadcast=*/false);
      return;
    }
    default:
      return;  // heartbeat (already counted as liveness) or a repeated hello
  }
}

void ZmqTransport::Impl::DeliverData(int64_t peer, const WireHeader& header,
                                     std::vector<zmq::message_t>& frames) {
  if (header.src_host != peer || header.channel == Channel::kControl) {
    ++refused_;
    return;
  }
  // One payload frame in the common case (used in place); a payload larger than
  // MaxDataFrameBytes came as several (SendFrames) and is joined here.
  size_t size = 0;
  for (size_t f = 2; f < frames.size(); ++f) size += frames[f].size();
  if (size != header.payload_bytes) {
    state_->mailbox().Fail(
        absl::InternalError(absl::StrCat("protocol error: host ", peer, " sent ", size,
                                         " payload bytes, its header says ", header.payload_bytes)),
        /*broadcast=*/true);
    return;
  }
  Message message;
  message.header = header;
  if (frames.size() == 3 && size > 0) {
    message.payload = std::make_unique<internal::ZmqPayload>(std::move(frames[2]));
  } else if (size > 0) {
    std::unique_ptr<internal::PooledBuffer> joined = state_->pool().Acquire(size);
    size_t offset = 0;
    for (size_t f = 2; f < frames.size(); ++f) {
      std::memcpy(joined->mutable_data() + offset, frames[f].data(), frames[f].size());
      offset += frames[f].size();
    }
    message.payload = std::move(joined);
  }
  state_->mailbox().Deliver(std::move(message));
}

void ZmqTransport::Impl::ReadIncoming() {
  // Drain what is there, bounded so timers still run under a flood.
  for (int i = 0; i < 4096; ++i) {
    std::vector<zmq::message_t> frames;
    zmq::message_t first;
    if (!in_.recv(first, zmq::recv_flags::dontwait)) return;
    bool more = first.more();
    frames.push_back(std::move(first));
    while (more) {
      zmq::message_t next;
      (void)in_.recv(next, zmq::recv_flags::none);
      more = next.more();
      frames.push_back(std::move(next));
    }
    HandleFrames(frames);
  }
}

void ZmqTransport::Impl::ReadMonitor(int64_t p) {
  zmq::socket_t* monitor = peers_[p]->monitor.get();
  while (true) {
    zmq::message_t event;
    if (!monitor->recv(event, zmq::recv_flags::dontwait)) return;
    zmq::message_t address;
    if (event.more()) (void)monitor->recv(address, zmq::recv_flags::none);
    if (event.size() < 2) continue;
    uint16_t id;
    std::memcpy(&id, event.data(), 2);
    if (id == ZMQ_EVENT_DISCONNECTED && peers_[p]->disconnected_at == absl::InfiniteFuture()) {
      peers_[p]->disconnected_at = absl::Now();
    }
  }
}

void ZmqTransport::Impl::AnswerZap() {
  refused_ +=
      internal::AnswerZapRequests(*zap_, zap_policy_, absl::StrCat("host ", rank_), &logged_);
}

void ZmqTransport::Impl::CheckPeers(absl::Time now) {
  std::vector<bool> bye;
  {
    absl::MutexLock lock(&mu_);
    bye = bye_;
  }
  for (int64_t p = 0; p < options_.num_hosts; ++p) {
    if (p == rank_ || bye[p]) continue;
    Peer& peer = *peers_[p];
    if (peer.heard_through_shm.exchange(false, std::memory_order_relaxed)) peer.last_heard = now;
    std::string why;
    if (now - peer.disconnected_at >= options_.disconnect_grace) {
      why = "its connection closed (the process exited or was killed)";
    } else if (now - peer.last_heard >= options_.heartbeat_timeout) {
      why = absl::StrCat("no message or heartbeat for ",
                         absl::FormatDuration(options_.heartbeat_timeout),
                         " (the process hangs or the network is down)");
    }
    if (!why.empty()) {
      state_->mailbox().Fail(absl::UnavailableError(absl::StrCat("lost host ", p, ": ", why)),
                             /*broadcast=*/true);
      return;
    }
  }
}

void ZmqTransport::Impl::SendHeartbeats() {
  const WireHeader h = ControlHeader(MessageType::kHeartbeat, rank_);
  for (int64_t p = 0; p < options_.num_hosts; ++p) {
    if (p == rank_) continue;
    absl::MutexLock lock(&peers_[p]->mu);
    // Checked under the peer's lock, which the goodbye is sent under: a heartbeat goes before
    // it or not at all.
    if (peers_[p]->out == nullptr || leaving_.load()) continue;
    try {
      if (HelloQueued(*peers_[p])) {
        (void)peers_[p]->out->send(HeaderFrame(h), zmq::send_flags::dontwait);
      }
    } catch (const zmq::error_t&) {
    }
  }
}

void ZmqTransport::Impl::CloseOutgoing(int linger_ms) {
  for (int64_t p = 0; p < static_cast<int64_t>(peers_.size()); ++p) {
    if (p == rank_ || peers_[p] == nullptr) continue;
    absl::MutexLock lock(&peers_[p]->mu);
    if (peers_[p]->out == nullptr) continue;
    try {
      peers_[p]->out->set(zmq::sockopt::linger, linger_ms);
      zmq_socket_monitor(peers_[p]->out->handle(), nullptr, 0);
    } catch (const zmq::error_t&) {
    }
    peers_[p]->out->close();
    peers_[p]->out.reset();
  }
}

void ZmqTransport::Impl::ProgressLoop() {
  const int64_t n = options_.num_hosts;
  std::vector<zmq::pollitem_t> items;
  items.push_back({in_.handle(), 0, ZMQ_POLLIN, 0});
  std::vector<int64_t> item_peer = {-1};
  for (int64_t p = 0; p < n; ++p) {
    if (p == rank_) continue;
    items.push_back({peers_[p]->monitor->handle(), 0, ZMQ_POLLIN, 0});
    item_peer.push_back(p);
  }
  if (zap_ != nullptr) {
    items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
    item_peer.push_back(-1);
  }
  const auto poll_timeout = std::chrono::milliseconds(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval) / 2, 1, 50));
  absl::Time next_heartbeat = absl::Now();
  while (!stop_.load()) {
    try {
      zmq::poll(items.data(), items.size(), poll_timeout);
      if (items[0].revents & ZMQ_POLLIN) ReadIncoming();
      for (size_t i = 1; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        if (item_peer[i] >= 0) {
          ReadMonitor(item_peer[i]);
        } else {
          AnswerZap();
        }
      }
      // Device threads drain the shared-memory queues while they wait; this catches headers
      // for a device that is not waiting (at most one poll timeout late), so that a protocol
      // error or a mismatched call among them is found even then.
      DrainShmQueues();
    } catch (const zmq::error_t& e) {
      state_->mailbox().Fail(internal::ZmqStatus(e, absl::StrCat("host ", rank_, " receiving")),
                             /*broadcast=*/true);
    }
    const absl::Time now = absl::Now();
    if (!outgoing_closed_) {
      if (now >= next_heartbeat) {
        SendHeartbeats();
        next_heartbeat = now + options_.heartbeat_interval;
      }
      CheckPeers(now);
      // Once the job failed: give the abort message a moment, then drop everything queued for
      // peers (releasing zero-copy payloads) so no caller waits on a dead connection.
      if (!state_->mailbox().failure().ok()) {
        if (failure_seen_ == absl::InfiniteFuture()) failure_seen_ = now;
        if (now - failure_seen_ >= absl::Milliseconds(100)) {
          CloseOutgoing(/*linger_ms=*/200);
          outgoing_closed_ = true;
        }
      }
    }
  }
}

void ZmqTransport::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (started_) {
    const int64_t n = options_.num_hosts;
    const bool healthy = ready_ && state_->mailbox().failure().ok();
    if (healthy) {
      // Goodbye to every peer, then wait for theirs, so no host mistakes a clean exit for a
      // crash. A peer that said goodbye first gets ours too: it waits for it (up to its
      // shutdown_timeout). Skipping it made that peer wait out the whole timeout, and the last
      // host to leave closed without a goodbye, so the others declared it lost.
      const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
      leaving_.store(true);
      for (int64_t p = 0; p < n; ++p) {
        if (p != rank_) {
          (void)SendControl(p, ControlHeader(MessageType::kBye, rank_), "",
                            std::min(deadline, absl::Now() + absl::Milliseconds(200)));
        }
      }
      absl::MutexLock lock(&mu_);
      auto all_bye = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        for (int64_t p = 0; p < options_.num_hosts; ++p) {
          if (p != rank_ && !bye_[p]) return false;
        }
        return true;
      };
      mu_.AwaitWithDeadline(absl::Condition(&all_bye), deadline);
    }
    stop_.store(true);
    progress_.join();
    CloseOutgoing(healthy ? 1000 : 0);
  }
  for (auto& peer : peers_) {
    if (peer != nullptr && peer->monitor != nullptr) peer->monitor->close();
  }
  in_.close();
  if (zap_ != nullptr) zap_->close();
  coordinator_.reset();
  context_.close();
  // The ipc endpoint is a file: remove it so finished jobs leave nothing in the directory.
  if (!ipc_path_.empty()) ::unlink(ipc_path_.c_str());
}

namespace {

// Devices of the job on this machine: ipc and loopback tcp put every host of the job on this
// machine; another interface, only this one for certain.
int64_t DevicesOnThisMachine(const ZmqOptions& options) {
  const bool one_machine = options.protocol == ZmqProtocol::kIpc ||
                           absl::StartsWith(options.tcp_interface, "127.") ||
                           options.tcp_interface == "localhost" || options.tcp_interface == "::1";
  int64_t devices = 0;
  for (int64_t h : options.device_map.host_of_device) devices += one_machine || h == options.rank;
  return devices;
}

// options.communicator with spin_wait resolved (EffectiveSpinWait).
CommunicatorOptions ResolvedCommunicatorOptions(const ZmqOptions& options) {
  CommunicatorOptions resolved = options.communicator;
  resolved.spin_wait = EffectiveSpinWait(options.communicator, DevicesOnThisMachine(options));
  return resolved;
}

}  // namespace

ZmqTransport::ZmqTransport(ZmqOptions options)
    : Communicator(options.rank, options.num_hosts, options.device_map,
                   ResolvedCommunicatorOptions(options)) {
  set_devices_on_this_machine(DevicesOnThisMachine(options));
  impl_ = std::make_unique<Impl>(std::move(options), &host_state());
  set_link(impl_.get());
  host_state().mailbox().set_abort_callback(
      [this](const absl::Status& status) { impl_->BroadcastAbort(status); });
}

ZmqTransport::~ZmqTransport() { impl_->Shutdown(); }

const std::string& ZmqTransport::endpoint() const { return impl_->endpoint(); }

int64_t ZmqTransport::refused_connections() const { return impl_->refused(); }

const std::string& ZmqTransport::curve_public_key() const { return impl_->curve_public_key(); }

int64_t ZmqTransport::shared_memory_messages() const { return impl_->shared_memory_messages(); }

int64_t ZmqTransport::shared_memory_peers() const { return impl_->shared_memory_peers(); }

int64_t ZmqTransport::shared_memory_queued_headers() const {
  return impl_->shared_memory_queued_headers();
}

absl::StatusOr<std::unique_ptr<ZmqTransport>> ZmqTransport::Create(ZmqOptions options) {
  TESSEL_RETURN_IF_ERROR(ApplyEnvironment(&options));
  if (options.num_hosts < 1 || options.rank < 0 || options.rank >= options.num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat("zmq transport: rank ", options.rank,
                                                   " is outside [0, ", options.num_hosts, ")"));
  }
  TESSEL_RETURN_IF_ERROR(options.device_map.Validate(options.num_hosts));
  TESSEL_RETURN_IF_ERROR(ValidateOptions(options.communicator));
  if (options.num_hosts > 1 && options.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "zmq transport: no coordinator address (set ZmqOptions::coordinator_address or "
        "TESSEL_COORDINATOR)");
  }
  if (options.job_token.size() > internal::kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("zmq transport: the job token is ", options.job_token.size(),
                     " bytes; the limit is ", internal::kMaxJobTokenBytes));
  }
  // tcp reaches beyond this user (other users of the machine, other machines): a job there
  // must be authenticated. ipc needs no token: its sockets admit only this user's processes.
  if (options.num_hosts > 1 && options.protocol == ZmqProtocol::kTcp && options.job_token.empty()) {
    return absl::FailedPreconditionError(
        "zmq transport: a tcp job needs a job token (ZmqOptions::job_token or "
        "TESSEL_JOB_TOKEN, the same random secret on every host, e.g. `openssl rand -hex 16`; "
        "under mpirun pass it with -x TESSEL_JOB_TOKEN, under srun with "
        "--export=ALL,TESSEL_JOB_TOKEN=...), so that no other process can join the job; add "
        "TESSEL_CURVE=1 to encrypt the traffic too");
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zmq transport: heartbeat_timeout (", absl::FormatDuration(options.heartbeat_timeout),
        ") must exceed heartbeat_interval (", absl::FormatDuration(options.heartbeat_interval),
        ") > 0"));
  }
  if (options.socket_buffer_bytes < 0 || options.socket_buffer_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("zmq transport: socket_buffer_bytes (",
                                                   options.socket_buffer_bytes,
                                                   ") must be in [0, 2^31)"));
  }
  if (options.shared_memory_slots < 1 || options.shared_memory_slots > 1024 ||
      options.shared_memory_min_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zmq transport: shared_memory_slots (", options.shared_memory_slots,
                     ") must be in [1, 1024] and shared_memory_min_bytes (",
                     options.shared_memory_min_bytes, ") >= 0"));
  }
  if (options.num_hosts > 1 && !options.job_token.empty() && !CurveAvailable()) {
    return absl::FailedPreconditionError(
        "zmq transport: a job token authenticates the bootstrap coordinator with CURVE, but the "
        "linked libzmq was built without it (zmq_has(\"curve\") is false); use a libzmq built "
        "with libsodium");
  }
  if (options.curve && !CurveAvailable()) {
    return absl::FailedPreconditionError(
        "zmq transport: ZmqOptions::curve (or TESSEL_CURVE=1) asks for CURVE encryption, but the "
        "linked libzmq was built without it (zmq_has(\"curve\") is false); use a libzmq built "
        "with libsodium or turn curve off");
  }
  std::unique_ptr<ZmqTransport> transport(new ZmqTransport(std::move(options)));
  TESSEL_RETURN_IF_ERROR(transport->impl_->Start());
  return transport;
}

}  // namespace tessel::transport
