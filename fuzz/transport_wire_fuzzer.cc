// libFuzzer target: everything the transport decodes from bytes a peer (or another process
// writing shared memory) controls:
//   - a ZeroMQ header frame: DecodePrefix, DecodeHeader (re-encoding a decoded header and
//     decoding it again must give the same bytes);
//   - a control body (hello, table, refusal): UnpackStrings (PackStrings must rebuild it);
//   - a shared-memory header queue scribbled with the input: PopHeader must either pop entries
//     or report the segment as corrupt, never read outside the segment, loop forever or crash;
//   - a slot state word scribbled with the input's first 4 bytes: CheckClaimed and IsFull accept
//     exactly the values senders write (1 being written, 2 full) and report the rest as corrupt.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/transport/internal/shared_memory.h"
#include "tessel/transport/internal/wire.h"
#include "tessel/transport/internal/zmq_util.h"

namespace {

using tessel::transport::internal::kShmQueueEntries;
using tessel::transport::internal::kShmQueueEntryBytes;
using tessel::transport::internal::kWireHeaderBytes;

void FuzzHeader(const std::byte* data, size_t size) {
  (void)tessel::transport::internal::DecodePrefix(data, size);
  absl::StatusOr<tessel::transport::internal::WireHeader> header =
      tessel::transport::internal::DecodeHeader(data, size);
  if (!header.ok()) return;
  std::array<std::byte, kWireHeaderBytes> once{}, twice{};
  tessel::transport::internal::EncodeHeader(*header, once.data());
  absl::StatusOr<tessel::transport::internal::WireHeader> again =
      tessel::transport::internal::DecodeHeader(once.data(), once.size());
  if (!again.ok()) {
    std::fprintf(stderr, "an encoded header does not decode: %s\n",
                 std::string(again.status().message()).c_str());
    std::abort();
  }
  tessel::transport::internal::EncodeHeader(*again, twice.data());
  if (once != twice) {
    std::fprintf(stderr, "a header changes when encoded, decoded and encoded again\n");
    std::abort();
  }
}

void FuzzStrings(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> strings;
  if (!tessel::transport::internal::UnpackStrings(body, &strings)) return;
  if (tessel::transport::internal::PackStrings(strings) != body) {
    std::fprintf(stderr, "PackStrings does not rebuild an unpacked body\n");
    std::abort();
  }
}

void FuzzShmQueue(const uint8_t* data, size_t size) {
  using tessel::transport::internal::ShmSegment;
  // A fresh segment each run: the receiver's own position in the queue starts over too.
  absl::StatusOr<std::shared_ptr<ShmSegment>> segment = ShmSegment::Create({2, 1, 4096});
  if (!segment.ok()) std::abort();
  absl::Span<std::byte> queue = (*segment)->queue_bytes_for_testing(1);
  std::memcpy(queue.data(), data, std::min(size, queue.size()));
  std::array<std::byte, kShmQueueEntryBytes> entry{};
  for (uint64_t popped = 0;; ++popped) {
    absl::StatusOr<bool> got = (*segment)->PopHeader(1, entry.data());
    if (!got.ok() || !*got) break;
    if (popped > kShmQueueEntries) {
      std::fprintf(stderr, "popped more entries than the queue holds\n");
      std::abort();
    }
    FuzzHeader(entry.data(), kWireHeaderBytes);
  }

  uint32_t word = 0;
  std::memcpy(&word, data, std::min(size, sizeof(word)));
  std::memcpy((*segment)->slot_states_for_testing(1).data(), &word, sizeof(word));
  const absl::Status claimed = (*segment)->CheckClaimed(1, 0);
  const absl::StatusOr<bool> full = (*segment)->IsFull(1, 0);
  const bool valid = word == 1 || word == 2;
  if (claimed.ok() != valid || full.ok() != valid || (valid && *full != (word == 2)) ||
      (!valid && (claimed.code() != absl::StatusCode::kDataLoss ||
                  full.status().code() != absl::StatusCode::kDataLoss))) {
    std::fprintf(stderr, "slot state word %u is judged wrongly\n", word);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzHeader(reinterpret_cast<const std::byte*>(data), size);
  FuzzStrings(data, size);
  FuzzShmQueue(data, size);
  return 0;
}
