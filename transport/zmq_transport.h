// ZmqTransport: a Communicator whose hosts are OS processes connected by ZeroMQ (cppzmq), over
// `ipc://` sockets in a temporary directory (one machine, the default) or `tcp://` (loopback by
// default; another interface for several machines).
//
//   // In every host process (rank r of n), e.g. started by `tessel run`, mpirun or srun:
//   ZmqOptions options;
//   options.rank = r;
//   options.num_hosts = n;
//   options.device_map = DeviceMap::Uniform(n, /*devices_per_host=*/4);
//   options.coordinator_address = "ipc:///tmp/job42/coordinator";  // or TESSEL_COORDINATOR
//   options.job_token = "s3cret";                                   // or TESSEL_JOB_TOKEN
//   absl::StatusOr<std::unique_ptr<ZmqTransport>> comm = ZmqTransport::Create(options);
//   // ... (*comm)->AllReduce(device_id, groups, ...) from each device thread ...
//
// Bootstrap. Every host binds its data socket first (tcp: port 0, the chosen port read back),
// then registers {protocol version, job token, rank, host count, device-map fingerprint, data
// endpoint} with the coordinator, over a connection on which the coordinator first proves it
// holds the job token too (below). The coordinator is served by host 0 at coordinator_address
// unless `external_coordinator` is set (then some other process runs a BootstrapCoordinator
// there, e.g. a launcher or a test that bound tcp://127.0.0.1:0). Once every rank registered,
// the coordinator hands the endpoint table to all and exits; hosts then connect to each other
// directly, exchange a hello carrying a digest of the job token on every connection, and Create
// returns when every connection is up in both directions.
//
// Sockets: each host binds one ROUTER (incoming) and connects one DEALER per peer (outgoing,
// ZMQ_IMMEDIATE so nothing queues for a peer that is gone). A background progress thread reads
// the ROUTER and hands messages to the devices' mailbox, sends heartbeats, and watches the
// DEALERs' connection events. Payloads of at least zero_copy_min_bytes travel zero-copy (the
// collective waits until ZeroMQ releases them); received payloads are used in place. Over ipc
// (one machine), payloads go through shared-memory slots of the receiver by default, their
// headers through a queue in the same segment that the waiting device thread drains itself,
// woken by a doorbell (a futex) in the segment, and ZeroMQ carries the control messages and
// whatever does not fit (ZmqOptions::shared_memory; the descriptor of each
// host's segment travels in its hello).
//
// Failure detection. A peer whose connection closes without a goodbye (process exited or was
// killed) is declared lost after disconnect_grace; a peer silent for heartbeat_timeout (hung,
// stopped, unreachable) is declared lost too. Either way every waiting and later call on this
// host fails with kUnavailable: "... all-reduce #12 on device 0 (host 0) ...: lost host 2: its
// connection closed (the process exited or was killed)", and the other hosts are told (abort).
//
// Security (docs/transport.md has the threat model). Trusted: this user's processes, and over
// tcp only the holders of the job token, which tcp jobs must have. Peers are authenticated
// before anything they send is read: ipc listeners admit only this user's processes
// (ZMQ_IPC_FILTER_UID, SO_PEERCRED). With a token the bootstrap is a CurveZMQ connection whose
// key pairs derive from the token (internal/zmq_auth.h BootstrapKeys), so the coordinator and
// the hosts each prove they hold it before the registration leaves a host, and it travels
// encrypted: a process that bound the coordinator's address first learns nothing. Every data
// listener is a ZeroMQ PLAIN server that accepts only DataPassword(token) (a digest; the token
// itself never travels); on a connection without a hello carrying it nothing else is parsed
// (dropped, counted in refused_connections(), the first few named on stderr with the peer's
// address). ZMQ_MAXMSGSIZE bounds every frame (internal/zmq_auth.h). PLAIN is not encryption. With
// ZmqOptions::curve (environment TESSEL_CURVE=1) every host-to-host connection uses ZeroMQ's CURVE
// mechanism (CurveZMQ, RFC 26: Curve25519 key exchange, every message encrypted and authenticated
// with XSalsa20-Poly1305): each host generates a fresh keypair in Create (the secret key never
// leaves the process), sends its public key with its registration, and the endpoint table from the
// coordinator carries every host's public key. A host's data socket is a CURVE server with its own
// key and accepts only clients whose public key is in the table (a ZAP handler refuses the rest,
// counted in refused_connections()); its connections to peers are CURVE clients that require the
// peer's public key from the table. The table (endpoints and public keys) comes over the bootstrap
// connection, authenticated both ways and encrypted by the token's keys, so it is as
// trustworthy as the secrecy of the token. docs/transport.md has the details and the cost.
#ifndef TESSEL_TRANSPORT_ZMQ_TRANSPORT_H_
#define TESSEL_TRANSPORT_ZMQ_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tessel/transport/communicator.h"

namespace tessel::transport {

enum class ZmqProtocol : uint8_t {
  kIpc,  // ipc://<ipc_dir>/tessel-<pid>-h<rank>-<random>: Unix domain sockets, one machine
  kTcp,  // tcp://<tcp_interface>:<port chosen by the kernel>
};

struct ZmqOptions {
  int64_t rank = 0;       // this host, in [0, num_hosts)
  int64_t num_hosts = 1;  // hosts (processes) in the job
  DeviceMap device_map;   // must be equal on every host (checked at bootstrap)
  CommunicatorOptions communicator;

  ZmqProtocol protocol = ZmqProtocol::kIpc;
  // Where the bootstrap coordinator listens: "tcp://127.0.0.1:5555", "ipc:///tmp/j/coord".
  // Empty: the environment variable TESSEL_COORDINATOR. Required when num_hosts > 1.
  std::string coordinator_address;
  // False: host 0 binds coordinator_address and serves the bootstrap itself. True: a
  // BootstrapCoordinator runs elsewhere (environment: TESSEL_EXTERNAL_COORDINATOR=1).
  bool external_coordinator = false;
  // Shared random secret (at most 1024 bytes) authenticating every connection: the bootstrap's
  // CURVE keys derive from it, and a digest of it is the data connections' PLAIN password and
  // the first field of every hello. Empty: TESSEL_JOB_TOKEN (or no token; then every host must
  // have none, and the job must use ipc).
  std::string job_token;
  // Directory for ipc sockets. Empty: $TMPDIR, else /tmp. Paths are limited to 107 bytes.
  std::string ipc_dir;
  // Interface the tcp data socket binds. Loopback unless the job spans machines.
  std::string tcp_interface = "127.0.0.1";

  absl::Duration bootstrap_timeout = absl::Seconds(60);
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  // A peer silent for this long is lost. Keep it well above heartbeat_interval.
  absl::Duration heartbeat_timeout = absl::Seconds(3);
  // A peer whose connection closed without a goodbye is lost after this long.
  absl::Duration disconnect_grace = absl::Milliseconds(300);
  // On destruction: how long to wait for every peer's goodbye (and to flush sends).
  absl::Duration shutdown_timeout = absl::Seconds(2);
  // Payloads at least this large are sent without a copy when the algorithm allows.
  int64_t zero_copy_min_bytes = 32 << 10;
  // Kernel send and receive buffer of every ipc data connection, in bytes (ZMQ_SNDBUF on the
  // outgoing DEALERs, ZMQ_RCVBUF on the incoming ROUTER), in [0, 2^31). The kernel caps it at
  // net.core.wmem_max / rmem_max without an error (4 MiB on the development machine; many
  // kernels default to 208 KiB). A segment larger than the buffer crosses in several rounds,
  // each a wake-up of both ZeroMQ I/O threads; the kernel default for Unix sockets, 208 KiB, is
  // below the 1 MiB pipeline segments. 0: the kernel default. tcp connections always keep the
  // kernel default, whose autotuning measured faster than a fixed 4 MiB (docs/PERFORMANCE.md).
  int64_t socket_buffer_bytes = 4 << 20;
  // CURVE encryption and key authentication of every connection between hosts (see the file
  // comment). Must be equal on every host (the coordinator refuses a mix and names the hosts).
  // Needs a libzmq built with CURVE (zmq_has("curve"); Debian's libzmq5 is, via libsodium);
  // otherwise Create fails with kFailedPrecondition. Environment: TESSEL_CURVE=1.
  bool curve = false;
  // ipc only (one machine): a payload of at least shared_memory_min_bytes that fits a slot
  // travels through a shared-memory slot of the receiving host instead of the socket, and its
  // header through a queue in the same segment, announced by ringing the destination's doorbell
  // there (two copies per byte instead of four; at most one wake-up, of the device thread that
  // waits, instead of four; docs/transport.md, "Shared memory on one machine"). Matching, ordering
  // checks, statistics, heartbeats and failure detection are the same either way. Each host maps
  // num_hosts * shared_memory_slots slots of pipeline_chunk_bytes (rounded up to 4 KiB): 64 MiB
  // at 8 hosts with the defaults, touched only as used. When every slot for a peer is busy, or
  // the peer's segment cannot be mapped (it is another user's process), payloads go through
  // ZeroMQ as with this off; when its header queue is full, the header does. Never with tcp or
  // curve: those are for links that leave the machine. Environment: TESSEL_SHARED_MEMORY=0 turns it
  // off.
  bool shared_memory = true;
  // Slots per source host in each host's segment, in [1, 1024]. 8 measured 0.97-2.16x of 4 at
  // 16-64 MiB (a ring keeps more segments in flight than 4 slots hold; docs/PERFORMANCE.md).
  int32_t shared_memory_slots = 8;
  // Smaller payloads are copied into the ZeroMQ message (>= 0; 0: every non-empty payload).
  // 0 measured 1.0-3.7x the bus bandwidth of 32 KiB for 4-64 KiB collectives (docs/PERFORMANCE.md).
  int64_t shared_memory_min_bytes = 0;
};

// Fills empty coordinator_address / job_token from TESSEL_COORDINATOR / TESSEL_JOB_TOKEN, and
// sets external_coordinator, curve and shared_memory from TESSEL_EXTERNAL_COORDINATOR,
// TESSEL_CURVE and TESSEL_SHARED_MEMORY when they are set (booleans: 1/0, true/false, yes/no,
// on/off, any case; core/environment.h). ZmqTransport::Create calls it.
// Errors: kInvalidArgument naming the variable and its value when a boolean is none of those.
[[nodiscard]] absl::Status ApplyEnvironment(ZmqOptions* options);

// True when the linked libzmq supports CURVE (zmq_has("curve")).
[[nodiscard]] bool CurveAvailable();

class ZmqTransport : public Communicator {
 public:
  // Binds, bootstraps and connects this host (blocks until every host of the job is connected
  // or bootstrap_timeout). Errors: kInvalidArgument (options, device map, missing coordinator
  // address, ipc path too long, a job token over 1024 bytes); kFailedPrecondition (a tcp job of
  // several hosts without a job token; a job token or curve with a libzmq without CURVE; the
  // coordinator's address held by a process that cannot prove it holds the token; refused by
  // the coordinator: other protocol version, job token, host count, duplicate rank or device
  // map; the message says which and names both values); kDeadlineExceeded (bootstrap timed out:
  // names the missing hosts when known); kUnavailable (socket errors, e.g. the address is in use).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ZmqTransport>> Create(ZmqOptions options);

  // Says goodbye to every peer (when healthy), waits up to shutdown_timeout for theirs, stops
  // the progress thread and closes the sockets. Precondition: no call is running.
  ~ZmqTransport() override;

  // This host's data endpoint, e.g. "tcp://127.0.0.1:40213".
  const std::string& endpoint() const;
  // Connections and messages refused so far: handshakes without the job token's password
  // (PLAIN) or with a public key not in the job's table (CURVE), hellos with another token,
  // messages on a connection without a hello; on host 0 also those its bootstrap coordinator
  // refused.
  int64_t refused_connections() const;
  // With curve: this host's CURVE public key, 40 characters of Z85 (ZeroMQ's text encoding of
  // the 32-byte Curve25519 key), as published in the endpoint table. Empty without curve and
  // in a single-host job (it has no connections).
  const std::string& curve_public_key() const;
  // Payloads this host sent through shared-memory slots so far (0 without shared_memory).
  int64_t shared_memory_messages() const;
  // Of those, the ones whose header went through the peer's shared-memory queue (the rest
  // went through ZeroMQ: queue full).
  int64_t shared_memory_queued_headers() const;
  // Peers whose shared-memory segment this host mapped at bootstrap (0 .. num_hosts - 1).
  int64_t shared_memory_peers() const;

  class Impl;

 private:
  ZmqTransport(ZmqOptions options);
  std::unique_ptr<Impl> impl_;
};

// The bootstrap service: collects every host's registration and hands out the endpoint table.
// Hosts run it implicitly (host 0); launchers and tests can run it themselves.
//
//   auto coordinator = BootstrapCoordinator::Start("tcp://127.0.0.1:*", /*num_hosts=*/3,
//                                                  "token", absl::Seconds(30)).value();
//   setenv("TESSEL_COORDINATOR", coordinator->address().c_str(), 1);  // tcp://127.0.0.1:41234
class BootstrapCoordinator {
 public:
  // Binds `bind_address` (a tcp port of 0 or "*" is chosen by the kernel) and serves one job
  // on a background thread until every host got the table or `timeout` passed. Errors:
  // kUnavailable if the address cannot be bound.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BootstrapCoordinator>> Start(
      const std::string& bind_address, int64_t num_hosts, const std::string& job_token,
      absl::Duration timeout);
  ~BootstrapCoordinator();

  // The bound address with the real port, to hand to the hosts.
  const std::string& address() const;
  // Connections and messages refused so far: CURVE handshakes without the key the job token
  // gives the hosts, and messages that are not a registration carrying the token (a stranger's
  // hello, abort or garbage). They are dropped without affecting the job; the first few are named
  // on stderr with the peer's address.
  int64_t refused_connections() const;
  // Blocks until the service ended. OK if every host got the table; otherwise why not.
  [[nodiscard]] absl::Status Wait();

  class Impl;

 private:
  BootstrapCoordinator() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel::transport

#endif  // TESSEL_TRANSPORT_ZMQ_TRANSPORT_H_
