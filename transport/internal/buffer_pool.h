// Reusable byte buffers, so that receive and scratch buffers are not page-faulted in again on
// every collective (a fresh 64 MiB buffer fills at about 1.4 GB/s on the development machine, a
// warm one at about 8.8 GB/s).
//
//   BufferPool pool(/*max_pooled_bytes=*/256 << 20);
//   std::unique_ptr<PooledBuffer> b = pool.Acquire(1 << 20);   // >= 1 MiB, 64-byte aligned
//   std::memcpy(b->mutable_data(), src, 1 << 20);
//   b.reset();                                                 // back to the pool
#ifndef TESSEL_TRANSPORT_INTERNAL_BUFFER_POOL_H_
#define TESSEL_TRANSPORT_INTERNAL_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tessel::transport::internal {

// The bytes of a received message: owned by whatever delivered it (a pooled buffer, a ZeroMQ
// message). Read-only for the consumer.
class Payload {
 public:
  virtual ~Payload() = default;
  virtual const std::byte* data() const = 0;
  virtual size_t size() const = 0;
  // False while the bytes are still being written by their sender (a shared-memory slot whose
  // header overtook its bytes); Mailbox::Take returns a message only once this is true. An
  // error when the bytes can never come (a corrupt shared-memory segment: ShmSegment::IsFull).
  virtual absl::StatusOr<bool> ready() const { return true; }
};

class BufferPool;

// A buffer from a BufferPool; returns itself to the pool when destroyed.
class PooledBuffer : public Payload {
 public:
  ~PooledBuffer() override;
  const std::byte* data() const override { return data_; }
  std::byte* mutable_data() { return data_; }
  // The requested size (the capacity may be larger).
  size_t size() const override { return size_; }

 private:
  friend class BufferPool;
  PooledBuffer(BufferPool* pool, std::byte* data, size_t size, int size_class)
      : pool_(pool), data_(data), size_(size), size_class_(size_class) {}
  BufferPool* pool_;
  std::byte* data_;
  size_t size_;
  int size_class_;
};

// Buffers in power-of-two size classes (4 KiB and up), 64-byte aligned. Thread-safe. The pool
// must outlive every buffer it handed out.
class BufferPool {
 public:
  explicit BufferPool(int64_t max_pooled_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` bytes (contents unspecified).
  std::unique_ptr<PooledBuffer> Acquire(size_t bytes);

 private:
  friend class PooledBuffer;
  void Return(std::byte* data, int size_class);

  const int64_t max_pooled_bytes_;
  absl::Mutex mu_;
  int64_t pooled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<std::byte*>> free_ ABSL_GUARDED_BY(mu_);  // by size class
};

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_BUFFER_POOL_H_
