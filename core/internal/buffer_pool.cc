#include "tessel/core/internal/buffer_pool.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tessel/core/status_macros.h"

namespace tessel::internal {
namespace {

constexpr size_t kAlignment = 64;
// Every buffer starts kAlignment bytes into its allocation; the first 8 bytes of that prefix
// hold the rounded size, so FreeBuffer needs no size (Literal's deleter has none).
constexpr size_t kPrefix = kAlignment;

struct Pool {
  std::mutex mu;
  absl::flat_hash_map<size_t, std::vector<std::byte*>> free;  // by rounded size, allocations
  BufferPoolStats stats;
};

Pool& GlobalPool() {
  static Pool* const pool = new Pool();  // never destroyed: literals may outlive static objects
  return *pool;
}

std::byte* Start(std::byte* allocation, size_t size) {
  *reinterpret_cast<size_t*>(allocation) = size;
  return allocation + kPrefix;
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
      std::byte* allocation = it->second.back();
      it->second.pop_back();
      pool.stats.cached_bytes -= static_cast<int64_t>(size);
      ++pool.stats.reuses;
      return Start(allocation, size);
    }
    ++pool.stats.fresh_allocations;
  }
  void* p = std::aligned_alloc(kAlignment, size + kPrefix);
  TESSEL_CHECK(p != nullptr);
  return Start(static_cast<std::byte*>(p), size);
}

void FreeBuffer(std::byte* buffer) {
  if (buffer == nullptr) return;
  std::byte* allocation = buffer - kPrefix;
  const size_t size = *reinterpret_cast<const size_t*>(allocation);
  if (static_cast<int64_t>(size) >= kPooledMinBytes) {
    Pool& pool = GlobalPool();
    std::lock_guard<std::mutex> lock(pool.mu);
    if (pool.stats.cached_bytes + static_cast<int64_t>(size) <= kPoolLimitBytes) {
      pool.free[size].push_back(allocation);
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
