#include "tessel/transport/internal/buffer_pool.h"

#include <bit>
#include <new>

namespace tessel::transport::internal {
namespace {

constexpr int kMinClassLog2 = 12;  // 4 KiB
constexpr size_t kAlignment = 64;

int SizeClass(size_t bytes) {
  const size_t rounded = std::bit_ceil(std::max<size_t>(bytes, size_t{1} << kMinClassLog2));
  return std::countr_zero(rounded) - kMinClassLog2;
}

size_t ClassBytes(int size_class) { return size_t{1} << (size_class + kMinClassLog2); }

}  // namespace

PooledBuffer::~PooledBuffer() { pool_->Return(data_, size_class_); }

BufferPool::BufferPool(int64_t max_pooled_bytes) : max_pooled_bytes_(max_pooled_bytes) {}

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  for (auto& list : free_) {
    for (std::byte* p : list) ::operator delete[](p, std::align_val_t(kAlignment));
  }
}

std::unique_ptr<PooledBuffer> BufferPool::Acquire(size_t bytes) {
  const int size_class = SizeClass(bytes);
  std::byte* data = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<size_t>(size_class) < free_.size() && !free_[size_class].empty()) {
      data = free_[size_class].back();
      free_[size_class].pop_back();
      pooled_bytes_ -= static_cast<int64_t>(ClassBytes(size_class));
    }
  }
  if (data == nullptr) {
    data = static_cast<std::byte*>(
        ::operator new[](ClassBytes(size_class), std::align_val_t(kAlignment)));
  }
  return std::unique_ptr<PooledBuffer>(new PooledBuffer(this, data, bytes, size_class));
}

void BufferPool::Return(std::byte* data, int size_class) {
  {
    absl::MutexLock lock(&mu_);
    const int64_t bytes = static_cast<int64_t>(ClassBytes(size_class));
    if (pooled_bytes_ + bytes <= max_pooled_bytes_) {
      if (static_cast<size_t>(size_class) >= free_.size()) free_.resize(size_class + 1);
      free_[size_class].push_back(data);
      pooled_bytes_ += bytes;
      return;
    }
  }
  ::operator delete[](data, std::align_val_t(kAlignment));
}

}  // namespace tessel::transport::internal
