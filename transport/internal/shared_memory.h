// Shared-memory payload slots between the host processes of one machine (ipc jobs).
//
// Every host creates one segment (memfd_create: no /dev/shm space, no file left behind by a
// crash) that holds its *incoming* slots: for every source host, `slots` slots of `slot_bytes`
// bytes, each with a state word. A sender maps the receiver's segment through
// /proc/<pid>/fd/<fd> (the descriptor travels in the hello; same user only), then for a payload:
//
//   int32_t slot = segment.Claim(my_rank);                        // kEmpty -> kWriting, or -1
//   // ... send the ZeroMQ header naming the slot, then, while it travels:
//   std::memcpy(segment.slot_data(my_rank, slot), payload, bytes);
//   segment.Publish(my_rank, slot);                                // -> kFull (release)
//   // The receiver waits until IsFull (acquire), reads the bytes in place and calls Free
//   // (-> kEmpty, release) when the message is consumed.
//
// The header itself goes into a small queue per source host in the same segment (PushHeader /
// PopHeader); once the payload is published the sender rings the destination device's doorbell,
// also in the segment, which wakes a receiving thread asleep on it (doorbell.h), and the waiting
// thread takes the header from the queue itself. When that queue is full, the header goes
// through ZeroMQ instead.
//
// A sender that finds every slot busy sends the payload through ZeroMQ instead, so a receiver
// that holds slots (early messages of a later call) can never block a sender: no deadlock, and
// the slots only bound how much travels this way at once.
//
// Two copies per byte (into the slot, out of it), as OpenMPI's vader and NCCL's SHM transport
// do without CMA, against four for a ZeroMQ ipc message (sender -> kernel -> ZeroMQ frame ->
// output). docs/transport.md, "Shared memory on one machine".
#ifndef TESSEL_TRANSPORT_INTERNAL_SHARED_MEMORY_H_
#define TESSEL_TRANSPORT_INTERNAL_SHARED_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/transport/internal/buffer_pool.h"
#include "tessel/transport/internal/doorbell.h"

namespace tessel::transport::internal {

// Bytes of one header-queue entry: an encoded WireHeader (88 bytes), the slot index (4 bytes),
// zeros up to byte 120, then an 8-byte checksum that PushHeader writes and PopHeader checks.
inline constexpr size_t kShmQueueEntryBytes = 128;
// The bytes of an entry that the caller fills (the rest is the checksum).
inline constexpr size_t kShmQueueEntryPayloadBytes = 120;
// Entries of the header queue of each source host.
inline constexpr uint64_t kShmQueueEntries = 64;

struct ShmLayout {
  int64_t num_hosts = 0;   // source hosts with a region (every host of the job)
  int32_t slots = 0;       // slots per source host, >= 1
  int64_t slot_bytes = 0;  // bytes per slot, a multiple of 4096, >= 4096

  bool operator==(const ShmLayout&) const = default;
};

// One host's incoming slots, mapped in this process: created by the receiving host (Create) or
// opened by a sender (Open). Thread-safe: any thread may claim, publish or free slots.
class ShmSegment {
 public:
  // Creates and maps a segment for `layout` (sizes checked; kInvalidArgument when a value is out
  // of range, kResourceExhausted / kInternal when memfd_create, ftruncate or mmap fail, naming
  // the call and errno's text).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<ShmSegment>> Create(const ShmLayout& layout);
  // Maps the segment another process created, from its Descriptor(). kInvalidArgument for a
  // descriptor that does not parse; kUnavailable when /proc/<pid>/fd/<fd> cannot be opened or
  // mapped (another machine, another user, the process is gone) or when the mapping's header
  // does not carry the descriptor's nonce and layout (another process reused the pid).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<ShmSegment>> Open(
      const std::string& descriptor);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // "shm2 <pid> <fd> <nonce hex> <num_hosts> <slots> <slot_bytes>": what a peer needs to Open
  // this segment.
  const std::string& descriptor() const { return descriptor_; }
  const ShmLayout& layout() const { return layout_; }

  // Sender: claims a free slot of source host `src` (kEmpty -> kWriting), trying each slot once
  // starting after the last claimed one; -1 when every slot is busy. src in [0, num_hosts).
  int32_t Claim(int64_t src);
  std::byte* slot_data(int64_t src, int32_t slot) const;
  // Sender: the claimed slot now holds the payload (kWriting -> kFull, release).
  void Publish(int64_t src, int32_t slot);
  // Receiver, for a slot whose header arrived: true once the slot holds the published payload
  // (acquire: its bytes are visible), false while the sender still writes it.
  // Errors: kDataLoss, "shared memory segment NAME is corrupt: slot S of host H ... (written by
  // a process outside the job?)", when the state word is free (only the receiver frees a slot
  // whose header arrived) or holds a value no process of the job writes (0 free, 1 being
  // written, 2 full): the same report as a scribbled header queue (PopHeader).
  [[nodiscard]] absl::StatusOr<bool> IsFull(int64_t src, int32_t slot) const;
  // Receiver, when a header naming the slot arrives: OK when a sender has claimed it (being
  // written or full); the kDataLoss "is corrupt" error of IsFull otherwise (a sender claims
  // the slot before it sends the header).
  [[nodiscard]] absl::Status CheckClaimed(int64_t src, int32_t slot) const;
  // Receiver (or a sender whose header never left): the slot is free again (release).
  void Free(int64_t src, int32_t slot);

  // Sender: appends one entry to the header queue of source host `src`: the first
  // kShmQueueEntryPayloadBytes of `entry`, then their checksum (FNV-1a of the segment's nonce,
  // `src`, the entry's position in the queue and those bytes); false when the queue is full. The
  // caller serializes pushes of one `src` (they come from threads of one process).
  bool PushHeader(int64_t src, const std::byte* entry);
  // Receiver (one thread at a time, always through the same ShmSegment): takes the oldest entry
  // of `src`'s queue into `entry` (kShmQueueEntryBytes); false if empty.
  // Errors: kDataLoss, "shared memory segment NAME is corrupt: WHAT (written by a process
  // outside the job?)", when what the segment holds cannot have come from the sender: the head
  // counter is not where this receiver left it, the tail is more than kShmQueueEntries ahead
  // of it, or the entry fails its checksum. Another process of the same user can write the
  // segment (docs/transport.md, "Threat model"); this keeps such a scribble from being read as
  // a protocol error of host `src`. After an error the queue of `src` is not usable.
  [[nodiscard]] absl::StatusOr<bool> PopHeader(int64_t src, std::byte* entry);

  // "/proc/<pid>/fd/<fd>", the path senders open: names the segment in errors.
  const std::string& name() const { return name_; }

  // Tests and the fuzzer: the raw bytes of `src`'s header queue in the segment (head counter,
  // tail counter, entries), to write into as a misbehaving process would.
  absl::Span<std::byte> queue_bytes_for_testing(int64_t src) const;
  // Tests: the raw bytes of the slot state words of source host `src` (slot i's 4-byte word at
  // byte 64 * i), to write into as a misbehaving process would.
  absl::Span<std::byte> slot_states_for_testing(int64_t src) const;

  // The receiver's kDoorbells bells (in the segment, so senders in other processes ring them):
  // a sender rings doorbells()[DoorbellIndex(dst)] after it published a payload for device (or
  // host) `dst` and queued its header.
  Doorbell* doorbells() const;

 private:
  ShmSegment(int fd, std::byte* base, size_t mapped_bytes, ShmLayout layout);
  std::atomic<uint32_t>& state(int64_t src, int32_t slot) const;
  // The queue of `src`: head (next to pop) and tail (next to push) counters, then the entries.
  std::atomic<uint64_t>& queue_head(int64_t src) const;
  std::atomic<uint64_t>& queue_tail(int64_t src) const;
  std::byte* queue_entry(int64_t src, uint64_t index) const;

  absl::Status Corrupt(const std::string& what) const;
  // The state word of a slot whose header arrived, checked to be 1 (being written) or 2 (full).
  absl::StatusOr<uint32_t> ClaimedState(int64_t src, int32_t slot, std::memory_order order) const;

  int fd_;  // the memfd (creator only; -1 in a process that opened it)
  std::byte* base_;
  size_t mapped_bytes_;
  ShmLayout layout_;
  size_t queue_offset_;
  size_t data_offset_;
  std::string descriptor_;
  std::string name_;
  uint64_t nonce_ = 0;
  // Receiver: entries popped from each source's queue (what its head counter must read).
  std::vector<uint64_t> popped_;
  std::atomic<uint32_t> cursor_{0};
};

// A received payload that lives in a slot of this host's segment; frees the slot when
// destroyed (the mapping stays alive while any payload refers to it).
class ShmPayload : public Payload {
 public:
  ShmPayload(std::shared_ptr<ShmSegment> segment, int64_t src, int32_t slot, size_t size)
      : segment_(std::move(segment)), src_(src), slot_(slot), size_(size) {}
  ~ShmPayload() override { segment_->Free(src_, slot_); }
  const std::byte* data() const override { return segment_->slot_data(src_, slot_); }
  size_t size() const override { return size_; }
  // The sender sends the header first and copies while it travels; the bytes are there once
  // it published the slot. A corrupt state word is kDataLoss (ShmSegment::IsFull).
  absl::StatusOr<bool> ready() const override { return segment_->IsFull(src_, slot_); }

 private:
  std::shared_ptr<ShmSegment> segment_;
  int64_t src_;
  int32_t slot_;
  size_t size_;
};

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_SHARED_MEMORY_H_
