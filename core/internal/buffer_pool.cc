#include "tessel/core/internal/buffer_pool.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tessel/core/status_macros.h"

namespace tessel::internal {
namespace {

constexpr size_t kAlignment = 64;
// A buffer starts at least kPrefix bytes into its allocation; the 16 bytes before it hold the
// rounded size and the offset from the allocation, so FreeBuffer needs no size (Literal's
// deleter has none). Large buffers start at one of kStaggers offsets modulo 4 KiB (the C
// library maps each at the same offset in its pages): elementwise loops read and write several
// of them at one index, and on x86 a load whose address matches a pending store's in the low
// 12 bits waits for it (4K aliasing). An Adam update over f32[1M] arrays at one page offset
// took 1.3x the time of the same arrays staggered (benchmarks/executor_bench BM_ExecutorAdam).
constexpr size_t kPrefix = kAlignment;
constexpr size_t kStaggers = 31;  // offsets kPrefix + i * kAlignment, i < kStaggers

struct Pool {
  std::mutex mu;
  absl::flat_hash_map<size_t, std::vector<std::byte*>> free;  // by rounded size, buffers
  BufferPoolStats stats;
};

Pool& GlobalPool() {
  static Pool* const pool = new Pool();  // never destroyed: literals may outlive static objects
  return *pool;
}

std::byte* Start(std::byte* allocation, size_t size, size_t offset) {
  std::byte* buffer = allocation + offset;
  reinterpret_cast<size_t*>(buffer)[-2] = size;
  reinterpret_cast<size_t*>(buffer)[-1] = offset;
  return buffer;
}

// The next large buffer's offset into its allocation (round robin over kStaggers).
size_t NextStagger() {
  static std::atomic<size_t> next{0};
  return kPrefix + (next.fetch_add(1, std::memory_order_relaxed) % kStaggers) * kAlignment;
}

}  // namespace

std::byte* AllocateBuffer(int64_t bytes) {
  size_t size = static_cast<size_t>(bytes);
  size = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (size == 0) size = kAlignment;
  const bool pooled = static_cast<int64_t>(size) >= kPooledMinBytes;
  if (pooled) {
    Pool& pool = GlobalPool();
    std::lock_guard<std::mutex> lock(pool.mu);
    auto it = pool.free.find(size);
    if (it != pool.free.end() && !it->second.empty()) {
      std::byte* buffer = it->second.back();  // keeps its offset
      it->second.pop_back();
      pool.stats.cached_bytes -= static_cast<int64_t>(size);
      ++pool.stats.reuses;
      return buffer;
    }
    ++pool.stats.fresh_allocations;
  }
  const size_t offset = pooled ? NextStagger() : kPrefix;
  void* p = std::aligned_alloc(kAlignment, size + kPrefix + (pooled ? kStaggers * kAlignment : 0));
  // The executor (and the tools' last resort) turn this into kResourceExhausted: an input's size
  // comes from user text (an HLO shape), so running out is not a bug to abort on.
  if (p == nullptr) throw std::bad_alloc();
  return Start(static_cast<std::byte*>(p), size, offset);
}

void FreeBuffer(std::byte* buffer) {
  if (buffer == nullptr) return;
  const size_t size = reinterpret_cast<const size_t*>(buffer)[-2];
  const size_t offset = reinterpret_cast<const size_t*>(buffer)[-1];
  std::byte* allocation = buffer - offset;
  if (static_cast<int64_t>(size) >= kPooledMinBytes) {
    Pool& pool = GlobalPool();
    std::lock_guard<std::mutex> lock(pool.mu);
    if (pool.stats.cached_bytes + static_cast<int64_t>(size) <= kPoolLimitBytes) {
      pool.free[size].push_back(buffer);
      pool.stats.cached_bytes += static_cast<int64_t>(size);
      return;
    }
  }
  std::free(allocation);
}

BufferPoolStats GetBufferPoolStats() {
  Pool& pool = GlobalPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  return pool.stats;
}

}  // namespace tessel::internal
