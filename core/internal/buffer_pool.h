// The buffers of Literal (core/literal.h): 64-byte aligned host memory, with large buffers kept
// for reuse after they are freed. Internal to tessel::core.
//
//   std::byte* p = AllocateBuffer(4 << 20);  // 64-byte aligned, uninitialised
//   FreeBuffer(p);                           // kept in the pool: the next 4 MiB request reuses it
//
// Why: a training step allocates the same large buffers every step (activations, gradients, the
// optimizer's new parameters). From the C library each would be fresh pages: a page fault and a
// page clear per 4 KiB on first touch, about a tenth of the CPU time of the MLP step of
// benchmarks/mlp_step_bench. The pool is the idea of the caching allocators of PyTorch
// (c10/cuda/CUDACachingAllocator) and of XLA's BFC allocator, kept simple: free lists per exact
// size (rounded up to 64 bytes), for buffers of at least kPooledMinBytes, at most
// kPoolLimitBytes held in all (a buffer freed beyond that goes back to the C library). After a
// step has run once, the same step takes every large buffer from the pool.
//
// Thread-safe (one mutex; the buffers it serves are large, so the lock is cheap next to their
// use). Memory held by the pool is never returned before the process exits.
#ifndef TESSEL_CORE_INTERNAL_BUFFER_POOL_H_
#define TESSEL_CORE_INTERNAL_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>

namespace tessel::internal {

// Smaller buffers come from the C library each time (its own free lists already serve them
// without page faults).
inline constexpr int64_t kPooledMinBytes = 64 * 1024;
// The most bytes the pool holds in free buffers.
inline constexpr int64_t kPoolLimitBytes = int64_t{512} << 20;

// `bytes` (>= 0) of uninitialised memory, 64-byte aligned; at least one byte is allocated.
// Throws std::bad_alloc when the C library has no memory left (Executor::Run returns it as
// kResourceExhausted).
[[nodiscard]] std::byte* AllocateBuffer(int64_t bytes);
// Frees a buffer of AllocateBuffer (null: no-op).
void FreeBuffer(std::byte* buffer);

struct BufferPoolStats {
  // Large buffers (>= kPooledMinBytes) obtained from the C library, and served from the pool.
  int64_t fresh_allocations = 0;
  int64_t reuses = 0;
  // Bytes now held in free buffers.
  int64_t cached_bytes = 0;
};
// Counters since the process started.
[[nodiscard]] BufferPoolStats GetBufferPoolStats();

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_BUFFER_POOL_H_
