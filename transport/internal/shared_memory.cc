#include "tessel/transport/internal/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tessel/core/fingerprint.h"

namespace tessel::transport::internal {
namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "queue counters are shared between processes and must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "slot states are shared between processes and must be lock-free (address-free)");

constexpr uint64_t kSegmentMagic = 0x324D48534C455354;  // "TSELSHM2" read as little-endian
constexpr size_t kPage = 4096;
constexpr size_t kStateStride = 64;  // one state word per cache line
constexpr uint32_t kEmpty = 0;
constexpr uint32_t kWriting = 1;
constexpr uint32_t kFull = 2;

// Layout: the header page, the doorbell page (kDoorbells bells, DoorbellIndex(destination)),
// the slot states, the header queues, the slots.
static_assert(kDoorbells * sizeof(Doorbell) <= 4096, "the doorbells fill one page");

// The first page of a segment.
struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;
  int64_t num_hosts;
  int64_t slots;
  int64_t slot_bytes;
};

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

size_t StateBytes(const ShmLayout& l) {
  return RoundUp(static_cast<size_t>(l.num_hosts) * static_cast<size_t>(l.slots) * kStateStride,
                 kPage);
}

// Per source host: a cache line for head, one for tail, then the entries.
constexpr size_t kQueueBytes = 2 * kStateStride + kShmQueueEntries * kShmQueueEntryBytes;

size_t QueueBytes(const ShmLayout& l) {
  return RoundUp(static_cast<size_t>(l.num_hosts) * kQueueBytes, kPage);
}

size_t TotalBytes(const ShmLayout& l) {
  return 2 * kPage + StateBytes(l) + QueueBytes(l) +
         static_cast<size_t>(l.num_hosts) * static_cast<size_t>(l.slots) *
             static_cast<size_t>(l.slot_bytes);
}

absl::Status CheckLayout(const ShmLayout& l) {
  if (l.num_hosts < 1 || l.num_hosts > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: num_hosts must be in [1, 65536], got ", l.num_hosts));
  }
  if (l.slots < 1 || l.slots > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: slots per host must be in [1, 1024], got ", l.slots));
  }
  if (l.slot_bytes < static_cast<int64_t>(kPage) || l.slot_bytes % kPage != 0 ||
      l.slot_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: slot_bytes must be a multiple of 4096 in [4096, 2^30], got ",
                     l.slot_bytes));
  }
  const double total =
      static_cast<double>(l.num_hosts) * l.slots * static_cast<double>(l.slot_bytes);
  if (total > static_cast<double>(int64_t{1} << 36)) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory: ", l.num_hosts, " hosts x ",
                                                   l.slots, " slots x ", l.slot_bytes,
                                                   " bytes is more than 64 GiB"));
  }
  return absl::OkStatus();
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

ShmSegment::ShmSegment(int fd, std::byte* base, size_t mapped_bytes, ShmLayout layout)
    : fd_(fd),
      base_(base),
      mapped_bytes_(mapped_bytes),
      layout_(layout),
      queue_offset_(2 * kPage + StateBytes(layout)),
      data_offset_(2 * kPage + StateBytes(layout) + QueueBytes(layout)) {}

ShmSegment::~ShmSegment() {
  munmap(base_, mapped_bytes_);
  if (fd_ >= 0) close(fd_);
}

absl::Status ShmSegment::Corrupt(const std::string& what) const {
  return absl::DataLossError(absl::StrCat("shared memory segment ", name_, " is corrupt: ", what,
                                          " (written by a process outside the job?)"));
}

absl::StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Create(const ShmLayout& layout) {
  if (absl::Status s = CheckLayout(layout); !s.ok()) return s;
  const size_t bytes = TotalBytes(layout);
  const int fd = memfd_create("tessel-slots", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: memfd_create failed: ", ErrnoText()));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string why = ErrnoText();
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: ftruncate to ", bytes, " bytes failed: ", why));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const std::string why = ErrnoText();
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: mmap of ", bytes, " bytes failed: ", why));
  }
  std::random_device random;
  const uint64_t nonce = (static_cast<uint64_t>(random()) << 32) ^ random();
  // A fresh memfd reads as zeros: every state is kEmpty.
  SegmentHeader header{kSegmentMagic, nonce, layout.num_hosts, layout.slots, layout.slot_bytes};
  std::memcpy(base, &header, sizeof(header));
  std::shared_ptr<ShmSegment> segment(
      new ShmSegment(fd, static_cast<std::byte*>(base), bytes, layout));
  segment->descriptor_ = absl::StrFormat("shm2 %d %d %016x %d %d %d", getpid(), fd, nonce,
                                         layout.num_hosts, layout.slots, layout.slot_bytes);
  segment->name_ = absl::StrFormat("/proc/%d/fd/%d", getpid(), fd);
  segment->nonce_ = nonce;
  segment->popped_.assign(static_cast<size_t>(layout.num_hosts), 0);
  return segment;
}

absl::StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Open(const std::string& descriptor) {
  const std::vector<std::string> f = absl::StrSplit(descriptor, ' ');
  int64_t pid = 0, fd_number = 0;
  uint64_t nonce = 0;
  ShmLayout layout;
  int64_t slots = 0;
  if (f.size() != 7 || f[0] != "shm2" || !absl::SimpleAtoi(f[1], &pid) ||
      !absl::SimpleAtoi(f[2], &fd_number) || !absl::SimpleHexAtoi(f[3], &nonce) ||
      !absl::SimpleAtoi(f[4], &layout.num_hosts) || !absl::SimpleAtoi(f[5], &slots) ||
      !absl::SimpleAtoi(f[6], &layout.slot_bytes) || pid <= 0 || fd_number < 0 || slots < 1 ||
      slots > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: bad segment descriptor \"", descriptor,
                     "\" (expected \"shm2 <pid> <fd> <nonce> <hosts> <slots> <slot_bytes>\")"));
  }
  layout.slots = static_cast<int32_t>(slots);
  if (absl::Status s = CheckLayout(layout); !s.ok()) return s;
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd_number);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("shared memory: cannot open ", path, ": ", ErrnoText()));
  }
  const size_t bytes = TotalBytes(layout);
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(bytes)) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("shared memory: ", path, " is ",
                                               static_cast<int64_t>(st.st_size),
                                               " bytes, the descriptor says ", bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the memory
  if (base == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("shared memory: cannot map ", path, ": ", ErrnoText()));
  }
  SegmentHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (header.magic != kSegmentMagic || header.nonce != nonce ||
      header.num_hosts != layout.num_hosts || header.slots != layout.slots ||
      header.slot_bytes != layout.slot_bytes) {
    munmap(base, bytes);
    return absl::UnavailableError(absl::StrCat(
        "shared memory: ", path, " is not the segment of descriptor \"", descriptor, "\""));
  }
  std::shared_ptr<ShmSegment> segment(
      new ShmSegment(-1, static_cast<std::byte*>(base), bytes, layout));
  segment->descriptor_ = descriptor;
  segment->name_ = path;
  segment->nonce_ = nonce;
  segment->popped_.assign(static_cast<size_t>(layout.num_hosts), 0);
  return segment;
}

std::atomic<uint32_t>& ShmSegment::state(int64_t src, int32_t slot) const {
  const size_t index =
      static_cast<size_t>(src) * static_cast<size_t>(layout_.slots) + static_cast<size_t>(slot);
  return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + 2 * kPage + index * kStateStride);
}

Doorbell* ShmSegment::doorbells() const { return reinterpret_cast<Doorbell*>(base_ + kPage); }

std::byte* ShmSegment::slot_data(int64_t src, int32_t slot) const {
  const size_t index =
      static_cast<size_t>(src) * static_cast<size_t>(layout_.slots) + static_cast<size_t>(slot);
  return base_ + data_offset_ + index * static_cast<size_t>(layout_.slot_bytes);
}

int32_t ShmSegment::Claim(int64_t src) {
  const uint32_t start = cursor_.load(std::memory_order_relaxed);
  for (int32_t i = 0; i < layout_.slots; ++i) {
    const int32_t slot = static_cast<int32_t>((start + static_cast<uint32_t>(i)) %
                                              static_cast<uint32_t>(layout_.slots));
    uint32_t expected = kEmpty;
    // Acquire: the receiver's reads of the slot's previous payload happen before our writes.
    if (state(src, slot).compare_exchange_strong(expected, kWriting, std::memory_order_acquire,
                                                 std::memory_order_relaxed)) {
      cursor_.store(static_cast<uint32_t>(slot) + 1, std::memory_order_relaxed);
      return slot;
    }
  }
  return -1;
}

void ShmSegment::Publish(int64_t src, int32_t slot) {
  state(src, slot).store(kFull, std::memory_order_release);
}

absl::StatusOr<uint32_t> ShmSegment::ClaimedState(int64_t src, int32_t slot,
                                                  std::memory_order order) const {
  const uint32_t value = state(src, slot).load(order);
  if (value == kWriting || value == kFull) return value;
  // While the receiver holds a slot (from its header to the payload's release) no process of
  // the job writes anything but 1 or 2 there: anything else was written from outside.
  if (value == kEmpty) {
    return Corrupt(absl::StrCat("slot ", slot, " of host ", src,
                                " is free although its header arrived (a sender claims the slot "
                                "before it sends the header)"));
  }
  return Corrupt(absl::StrCat("slot ", slot, " of host ", src, " has state word ", value,
                              ", which no host writes (0 free, 1 being written, 2 full)"));
}

absl::StatusOr<bool> ShmSegment::IsFull(int64_t src, int32_t slot) const {
  absl::StatusOr<uint32_t> value = ClaimedState(src, slot, std::memory_order_acquire);
  if (!value.ok()) return value.status();
  return *value == kFull;
}

absl::Status ShmSegment::CheckClaimed(int64_t src, int32_t slot) const {
  return ClaimedState(src, slot, std::memory_order_relaxed).status();
}

std::atomic<uint64_t>& ShmSegment::queue_head(int64_t src) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(base_ + queue_offset_ +
                                                   static_cast<size_t>(src) * kQueueBytes);
}

std::atomic<uint64_t>& ShmSegment::queue_tail(int64_t src) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(
      base_ + queue_offset_ + static_cast<size_t>(src) * kQueueBytes + kStateStride);
}

std::byte* ShmSegment::queue_entry(int64_t src, uint64_t index) const {
  return base_ + queue_offset_ + static_cast<size_t>(src) * kQueueBytes + 2 * kStateStride +
         static_cast<size_t>(index % kShmQueueEntries) * kShmQueueEntryBytes;
}

namespace {

// The checksum binds an entry to this segment (nonce), its source and its position, so a stale
// entry or one copied from another queue fails too, not only scribbled bytes.
uint64_t EntryChecksum(uint64_t nonce, int64_t src, uint64_t position, const std::byte* entry) {
  return Fingerprint()
      .U64(nonce)
      .Int(src)
      .U64(position)
      .Bytes(entry, kShmQueueEntryPayloadBytes)
      .value();
}

}  // namespace

bool ShmSegment::PushHeader(int64_t src, const std::byte* entry) {
  const uint64_t tail = queue_tail(src).load(std::memory_order_relaxed);
  // Acquire: the receiver's read of the entry we would overwrite is done.
  if (tail - queue_head(src).load(std::memory_order_acquire) >= kShmQueueEntries) return false;
  std::byte* slot = queue_entry(src, tail);
  std::memcpy(slot, entry, kShmQueueEntryPayloadBytes);
  const uint64_t checksum = EntryChecksum(nonce_, src, tail, entry);
  std::memcpy(slot + kShmQueueEntryPayloadBytes, &checksum, sizeof(checksum));
  queue_tail(src).store(tail + 1, std::memory_order_release);
  return true;
}

absl::StatusOr<bool> ShmSegment::PopHeader(int64_t src, std::byte* entry) {
  // The receiver's own count, not the counter in the segment, says where the next entry is:
  // whatever another process writes there cannot send this read outside the queue.
  const uint64_t head = popped_[static_cast<size_t>(src)];
  const uint64_t shared_head = queue_head(src).load(std::memory_order_relaxed);
  if (shared_head != head) {
    return Corrupt(absl::StrCat("the header queue of host ", src, " says ", shared_head,
                                " entries were taken, this host took ", head));
  }
  const uint64_t tail = queue_tail(src).load(std::memory_order_acquire);
  if (tail == head) return false;
  if (tail - head > kShmQueueEntries) {
    return Corrupt(absl::StrCat("the header queue of host ", src, " claims ", tail - head,
                                " waiting entries, it holds at most ", kShmQueueEntries));
  }
  std::memcpy(entry, queue_entry(src, head), kShmQueueEntryBytes);
  uint64_t checksum = 0;
  std::memcpy(&checksum, entry + kShmQueueEntryPayloadBytes, sizeof(checksum));
  if (checksum != EntryChecksum(nonce_, src, head, entry)) {
    return Corrupt(
        absl::StrCat("entry ", head, " of the header queue of host ", src, " fails its checksum"));
  }
  popped_[static_cast<size_t>(src)] = head + 1;
  queue_head(src).store(head + 1, std::memory_order_release);
  return true;
}

absl::Span<std::byte> ShmSegment::queue_bytes_for_testing(int64_t src) const {
  return absl::Span<std::byte>(reinterpret_cast<std::byte*>(&queue_head(src)), kQueueBytes);
}

absl::Span<std::byte> ShmSegment::slot_states_for_testing(int64_t src) const {
  return absl::Span<std::byte>(reinterpret_cast<std::byte*>(&state(src, 0)),
                               static_cast<size_t>(layout_.slots) * kStateStride);
}

void ShmSegment::Free(int64_t src, int32_t slot) {
  state(src, slot).store(kEmpty, std::memory_order_release);
}

}  // namespace tessel::transport::internal
