// The Communicator: collectives and point-to-point messages between the devices of a job whose
// hosts are separate OS processes (ZmqTransport) or threads of one process (InProcTransport).
//
// Every host process owns one Communicator. Its devices are threads: a collective is called once
// by every participating device, from that device's thread, with the device's own global id and
// buffers. Devices of the same host exchange in memory; devices of different hosts exchange
// through the host link (ZeroMQ sockets or, in process, a shared mailbox).
//
//   // Host 1 of 2, owning devices 2 and 3 of a [4] mesh, one thread per device:
//   Communicator& comm = ...;  // ZmqTransport::Create(...) or InProcTransport::host(1)
//   std::vector<float> grad(1000), sum(1000);
//   absl::Status s = comm.AllReduce(/*device_id=*/2, ReplicaGroups{{0, 1, 2, 3}},
//                                   ReduceKind::kAdd, DType::kF32, grad.data(), sum.data(),
//                                   /*element_count=*/1000);
//
// Semantics follow XLA's collective HLO ops (all-reduce, all-gather, reduce-scatter, all-to-all,
// collective-permute; https://openxla.org/xla/operation_semantics) with replica groups given in
// global device ids, and torch_xla's `xm.rendezvous` for Rendezvous. Buffers are flat, dense,
// row-major arrays of one dtype; a collective over dim d of a multi-dimensional array is the
// caller's job to lay out (XLA's partitioner moves the dim to the front).
//
// Matching. Each device numbers its collective calls 0, 1, 2, ... (the sequence number; Send,
// Recv and Rendezvous are not numbered). Two devices exchange data in a collective only when
// it is the same call number on both, which every SPMD program satisfies: every device executes
// the same list of collectives. Every message carries the caller's collective kind, dtype,
// element count, reduction and a hash of its replica groups; a peer that called something else
// at the same number makes the collective fail on both sides with kFailedPrecondition, naming
// both calls, and the whole job is aborted (every later call on every host returns the error).
//
// Failures. Every blocking wait has a deadline (CommunicatorOptions::collective_timeout). A lost
// host (process killed, connection closed, heartbeats missing) fails every waiting and later
// call with kUnavailable naming the lost host and the collective. After the first failure the
// communicator stays failed (like NCCL's ncclCommAbort): `health()` returns the error.
//
// Reduction order (results are bit-identical on every participant; see docs/transport.md):
//   - ring (large buffers): the buffer is cut into n consecutive chunks (n = group size; chunk
//     j holds N/n elements, integer division, plus one if j < N%n); chunk j is folded left to
//     right starting at group member j+1:
//     ((x[j+1] op x[j+2]) op ...) op x[j], indices mod n, then copied to everyone.
//   - recursive doubling (small buffers): pairs combine (lower op higher) at each round, so
//     both partners compute the same bits.
//   - hierarchical (group spans slices): ring inside each slice, then ring or recursive doubling
//     across slices on each chunk, then all-gather inside the slice.
//   The algorithm depends only on the group, the device map, the byte size and the options, all
//   equal on every participant, so every participant gets the same bits. Different group sizes
//   or sizes across the small/large threshold may round differently (floating point).
//
// Thread safety: all methods may be called concurrently from different device threads; one
// device must not run two calls at once. Rendezvous is called by one thread per host.
#ifndef TESSEL_TRANSPORT_COMMUNICATOR_H_
#define TESSEL_TRANSPORT_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tessel/core/dtype.h"
#include "tessel/core/graph.h"
#include "tessel/transport/collective_stats.h"

namespace tessel::transport {

namespace internal {
class HostState;
class HostLink;
}  // namespace internal

// Where every global device lives, as plain data so transport/ depends on core/ only (the mesh
// module builds it from a Topology). Index = global device id (0 .. num_devices-1).
//
//   DeviceMap m = DeviceMap::Uniform(/*num_hosts=*/4, /*devices_per_host=*/2,
//                                    /*hosts_per_slice=*/2);
//   m.host_of_device  == {0,0,1,1,2,2,3,3};  m.slice_of_device == {0,0,0,0,1,1,1,1};
struct DeviceMap {
  std::vector<int64_t> host_of_device;   // owning host (process) rank of each device
  std::vector<int64_t> slice_of_device;  // slice of each device: same slice = ICI, else DCN

  int64_t num_devices() const { return static_cast<int64_t>(host_of_device.size()); }

  // Devices numbered host-major: host h owns [h*devices_per_host, (h+1)*devices_per_host) and
  // slice s holds hosts [s*hosts_per_slice, (s+1)*hosts_per_slice). Precondition: all > 0 and
  // hosts_per_slice divides num_hosts (TESSEL_CHECK).
  static DeviceMap Uniform(int64_t num_hosts, int64_t devices_per_host,
                           int64_t hosts_per_slice = 1);

  // Checks the map for a job of `num_hosts` hosts. Errors: kInvalidArgument if the two vectors
  // differ in length, are empty, name a host outside [0, num_hosts), a negative slice, a host
  // that owns no device, or a host whose devices sit in different slices.
  [[nodiscard]] absl::Status Validate(int64_t num_hosts) const;

  // A 64-bit FNV-1a hash of the map; hosts compare it at bootstrap.
  [[nodiscard]] uint64_t Fingerprint() const;

  bool operator==(const DeviceMap&) const = default;
};

// XLA replica groups in global device ids: `replica_groups={{0,1},{2,3}}`. Each device appears
// in at most one group; the order inside a group is the rank order of the collective (all-gather
// output block i comes from group member i). An empty list means one group of every device in
// increasing id order.
using ReplicaGroups = std::vector<std::vector<int64_t>>;

// XLA collective-permute `source_target_pairs={{0,1},{1,2}}`: (source device, target device).
using SourceTargetPairs = std::vector<std::pair<int64_t, int64_t>>;

// Deadlines and algorithm thresholds, equal on every host of a job (they choose the algorithm,
// so hosts with different values would exchange mismatched messages).
struct CommunicatorOptions {
  // Longest wait for any one message of a collective (or Recv, Rendezvous) from a live peer.
  // Past it the call fails with kDeadlineExceeded naming the device waited for.
  absl::Duration collective_timeout = absl::Seconds(60);
  // All-reduce buffers (bytes per device) below this use recursive doubling, at or above it the
  // ring; all-gather, reduce-scatter and broadcast switch from direct sends / tree to ring /
  // chain at the same size.
  int64_t small_message_bytes = 64 << 10;
  // Large transfers are cut into messages of at most this many bytes and pipelined: a chunk
  // received is reduced and forwarded while the next is in flight.
  int64_t pipeline_chunk_bytes = 1 << 20;
  // How many segments of one region a ring, recursive-doubling or chain step sends ahead of the
  // segments it receives: a sender stays at most this many segments ahead of its receiver, so a
  // link holds a few segments in flight, not a whole chunk (which over ipc would overflow the
  // receiver's shared-memory slots into the socket, ZmqOptions::shared_memory_slots). The loops
  // run segment by segment across steps, as NCCL's ring does (every step of segment g before
  // segment g+1). 0: every segment of a region at once. Keep it below
  // ZmqOptions::shared_memory_slots (8): at 8 a 2-rank 64 MiB call overflowed a quarter of its
  // messages into the socket again (docs/PERFORMANCE.md, "Paced segments").
  int64_t pipeline_depth = 4;
  // All-reduce buffers (bytes per device) and all-gather outputs of at least
  // small_message_bytes but below this, in groups of 3 or more members, are exchanged directly:
  // every member sends to every other at once (all-reduce: chunk j to member j, which folds it
  // and sends the result to all; 2 hops instead of the ring's 2(n-1), all-gather 1 instead of
  // n-1), with the ring's bytes per member, pipelined in segments. At or above it: the ring. 0:
  // always the ring.
  int64_t direct_max_bytes = 4 << 20;
  // Use the hierarchical all-reduce (intra-slice reduce-scatter, cross-slice all-reduce,
  // intra-slice all-gather) when a group spans several slices with the same number (>= 2) of
  // its members in each. Off: the flat algorithms over the group order.
  bool hierarchical_all_reduce = true;
  // Use the hierarchical all-gather (each member's block to its counterparts in the other
  // slices, then the gathered blocks inside the slice) for such groups: DCN carries (S - 1)
  // blocks per member instead of k (S - 1). Off: the flat algorithms over the group order.
  bool hierarchical_all_gather = true;
  // Use the hierarchical reduce-scatter (the slice's sums inside the slice, then each owner's
  // chunk across the slices) for such groups: DCN carries (S - 1) chunks per member instead of
  // k (S - 1). Off: the flat algorithms over the group order.
  bool hierarchical_reduce_scatter = true;
  // A device thread waiting for a message of a collective (or Recv, Rendezvous) or for the link
  // to release its zero-copy sends first polls for up to this long, yielding its core between
  // checks (sched_yield), and only then sleeps. A message that arrives within it costs no
  // sleep/wake-up round trip (23-46 us on the development VM, far more when the VM's idle
  // virtual CPUs are descheduled), and the core stays busy with the ZeroMQ I/O and progress
  // threads that deliver it: the bounded busy-wait with yield of OpenMPI's ranks. Costs CPU
  // while waiting; zero: sleep at once. nullopt (the default): kDefaultSpinWait if the job's
  // devices on this machine are no more than its hardware threads, else zero, because with
  // more device threads than cores a spinning thread takes the core from the threads that
  // deliver its message (see EffectiveSpinWait). Measured in docs/PERFORMANCE.md ("Spin, then
  // sleep").
  std::optional<absl::Duration> spin_wait;
};

// The default spin of a device thread that waits (CommunicatorOptions::spin_wait).
inline constexpr absl::Duration kDefaultSpinWait = absl::Milliseconds(1);

// The spin a Communicator uses: options.spin_wait if set, else kDefaultSpinWait when
// `devices_on_this_machine` (devices of the job whose threads run on this machine) is at most
// `hardware_threads` (std::thread::hardware_concurrency() when 0 is passed), else zero.
// InProcTransport counts every device of the job; ZmqTransport every device of the hosts on
// this machine: all of them for ipc and for tcp on a loopback interface, its own otherwise.
[[nodiscard]] absl::Duration EffectiveSpinWait(const CommunicatorOptions& options,
                                               int64_t devices_on_this_machine,
                                               int64_t hardware_threads = 0);

// One host's endpoint of a job. Created by InProcTransport or ZmqTransport.
class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This host's index in [0, size()).
  int64_t rank() const { return rank_; }
  // Number of hosts in the job.
  int64_t size() const { return size_; }
  // Global ids of the devices this host owns, increasing.
  const std::vector<int64_t>& local_device_ids() const { return local_device_ids_; }
  const DeviceMap& device_map() const { return device_map_; }
  const CommunicatorOptions& options() const { return options_; }
  // Devices of the job whose threads run on this machine, this host's included: every device
  // for InProcTransport and for ZmqTransport over ipc or loopback tcp, only this host's over
  // another interface (the count EffectiveSpinWait is given). The host runtime shares the
  // machine's cores among them (mesh/runtime/compute_slots.h).
  int64_t devices_on_this_machine() const { return devices_on_this_machine_; }

  // ---- Collectives. Common contract --------------------------------------------------------
  // `device_id` is the calling device (global id, owned by this host). `groups` as
  // ReplicaGroups above. `element_count` counts elements of `dtype` (not bytes). Buffers may
  // not overlap unless stated; `input` must stay unchanged and both buffers alive until the
  // call returns. Returns when this device's output is complete.
  // Errors (all calls):
  //   kInvalidArgument: device not owned by this host, not in any group, ids out of range,
  //     duplicate ids, negative count, null buffer with count > 0, reduction not defined for
  //     the dtype (and/or on floating types).
  //   kFailedPrecondition: a peer called a different collective (kind, dtype, count, reduction
  //     or groups) at the same sequence number; or the job was aborted by another host.
  //   kUnavailable: a host was lost (named in the message) before or during the call.
  //   kDeadlineExceeded: a live peer sent nothing for collective_timeout.

  // all-reduce: output[i] = op over the group of input[i]. Shapes: input and output hold
  // `element_count` elements; input == output (in place) is allowed. pred: add = or,
  // multiply = and, maximum = or, minimum = and. Integers wrap on overflow. Floating
  // maximum/minimum propagate NaN. and/or: pred and integers (bitwise) only.
  // Source: XLA AllReduce; ring / recursive doubling / hierarchical per the header comment.
  [[nodiscard]] absl::Status AllReduce(int64_t device_id, const ReplicaGroups& groups,
                                       ReduceKind kind, DType dtype, const void* input,
                                       void* output, int64_t element_count);

  // all-gather: output = concat over group members (group order) of their input.
  // Shapes: input holds `element_count` elements; output holds group_size * element_count.
  // Source: XLA AllGather (all_gather_dimension = 0 of the flat buffer).
  [[nodiscard]] absl::Status AllGather(int64_t device_id, const ReplicaGroups& groups, DType dtype,
                                       const void* input, void* output, int64_t element_count);

  // reduce-scatter: member i's output = block i of (op over the group of input).
  // Shapes: input holds group_size * element_count elements; output holds element_count.
  // Reduction order: ring (large) as above; small buffers fold in group order
  // ((x[0] op x[1]) op ...) op x[n-1]. Source: XLA ReduceScatter (scatter_dimension = 0).
  [[nodiscard]] absl::Status ReduceScatter(int64_t device_id, const ReplicaGroups& groups,
                                           ReduceKind kind, DType dtype, const void* input,
                                           void* output, int64_t element_count);

  // all-to-all: member i sends input block j to member j, which stores it as output block i.
  // Shapes: input and output hold group_size * element_count elements (element_count per
  // block); they must not overlap (kInvalidArgument: it sends from the input while it writes
  // the output). Source: XLA AllToAll (split_dimension = concat_dimension = 0).
  [[nodiscard]] absl::Status AllToAll(int64_t device_id, const ReplicaGroups& groups, DType dtype,
                                      const void* input, void* output, int64_t element_count);

  // collective-permute: for each pair (s, t) device t's output = device s's input; a device
  // that is no pair's target gets zeros. Every device of the job that appears in `pairs`
  // calls it (devices in no pair may call it or not: it only advances their sequence number).
  // Shapes: input and output hold `element_count` elements and must not overlap. Errors:
  // kInvalidArgument if they overlap, or if a device is the source (or the target) of two pairs.
  // Source: XLA CollectivePermute.
  [[nodiscard]] absl::Status CollectivePermute(int64_t device_id, const SourceTargetPairs& pairs,
                                               DType dtype, const void* input, void* output,
                                               int64_t element_count);

  // broadcast: every member's `buffer` becomes the buffer of the member at position
  // `root_index` of its group (same position in every group). Shapes: `element_count`
  // elements. Errors: kInvalidArgument if root_index is outside some group.
  // Source: MPI_Bcast / NCCL broadcast; binomial tree (small) or pipelined chain (large).
  [[nodiscard]] absl::Status Broadcast(int64_t device_id, const ReplicaGroups& groups,
                                       int64_t root_index, DType dtype, void* buffer,
                                       int64_t element_count);

  // barrier: returns once every member of this device's group has entered the barrier.
  // Dissemination barrier, ceil(log2 n) rounds of empty messages.
  [[nodiscard]] absl::Status Barrier(int64_t device_id, const ReplicaGroups& groups);

  // ---- Point to point ----------------------------------------------------------------------
  // Sends `element_count` elements from `src_device` (owned by this host) to `dst_device`
  // under `tag`. Buffered: returns once `data` has been copied; it does not wait for the Recv.
  // Messages between one pair with one tag arrive in send order. Errors: kInvalidArgument
  // (ids), kUnavailable (destination host lost).
  [[nodiscard]] absl::Status Send(int64_t src_device, int64_t dst_device, int64_t tag, DType dtype,
                                  const void* data, int64_t element_count);
  // Receives the next message from `src_device` to `dst_device` (owned by this host) under
  // `tag` into `data`. Errors: kFailedPrecondition if the sender's dtype or element count
  // differ (both named); kDeadlineExceeded after collective_timeout; kUnavailable.
  [[nodiscard]] absl::Status Recv(int64_t dst_device, int64_t src_device, int64_t tag, DType dtype,
                                  void* data, int64_t element_count);

  // ---- Host level --------------------------------------------------------------------------
  // Every host calls Rendezvous with the same `tag` (once per host, from one thread); returns
  // every host's payload, indexed by host rank. Errors: kFailedPrecondition naming both tags if
  // hosts disagree; kUnavailable / kDeadlineExceeded as for collectives.
  // Source: torch_xla `xm.rendezvous(tag, payload)`.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Rendezvous(const std::string& tag,
                                                                    const std::string& payload);

  // Traffic sent by this host's devices since creation or the last ResetStats().
  [[nodiscard]] CollectiveStats stats() const;
  void ResetStats();

  // OK while the job is healthy; otherwise the first failure (lost host, mismatch, abort).
  [[nodiscard]] absl::Status health() const;

 protected:
  // For the transports. `device_map` must be valid for `size` hosts.
  Communicator(int64_t rank, int64_t size, DeviceMap device_map, CommunicatorOptions options);

  // The mailbox, pools and statistics of this host; the transport delivers incoming messages
  // here. Set up by the constructor.
  internal::HostState& host_state() { return *state_; }
  // Sets devices_on_this_machine() (default: every device of the job), before any call.
  void set_devices_on_this_machine(int64_t devices) { devices_on_this_machine_ = devices; }
  // Installs the link to the other hosts. Must be called once before the first call; the link
  // must outlive every call.
  void set_link(internal::HostLink* link);

 private:
  int64_t rank_;
  int64_t size_;
  DeviceMap device_map_;
  CommunicatorOptions options_;
  std::vector<int64_t> local_device_ids_;
  int64_t devices_on_this_machine_ = 0;
  std::unique_ptr<internal::HostState> state_;
};

}  // namespace tessel::transport

#endif  // TESSEL_TRANSPORT_COMMUNICATOR_H_
