// DeviceArray: an n-d array of global device ids, stored row-major.
//
// It is the value behind both a mesh's logical device array (`Mesh::logical_mesh()`) and a
// sharding's tile assignment (`Sharding::tile_assignment()`), as numpy arrays are in torch_xla
// and `xla::Array<int64_t>` is in XLA.
//
//   DeviceArray a = DeviceArray::Iota({2, 4});        // [[0, 1, 2, 3], [4, 5, 6, 7]]
//   a.at({1, 2}) == 6;
//   a.Transpose({1, 0}).device_ids() == {0, 4, 1, 5, 2, 6, 3, 7};
//   a.Reshape({8}).ToString() == "[0, 1, 2, 3, 4, 5, 6, 7]";
//   *a.IndexOf(5) == {1, 1};
//
// XLA's iota tile assignment `[4,2]<=[2,4]T(1,0)` is `DeviceArray::IotaTransposed({4, 2},
// {2, 4}, {1, 0})`: iota(8) reshaped to [2,4], transposed by (1,0), reshaped to [4,2].
// Source: XLA `xla::Array`, `xla::IotaTileAssignment`.
#ifndef TESSEL_SPMD_DEVICE_ARRAY_H_
#define TESSEL_SPMD_DEVICE_ARRAY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessel::spmd {

class DeviceArray {
 public:
  // A rank-0 array holding device 0.
  DeviceArray() : device_ids_{0} {}
  // An array of `dims` holding `device_ids` in row-major order.
  // Precondition (TESSEL_CHECK): every dim >= 0 and product(dims) == device_ids.size().
  DeviceArray(std::vector<int64_t> dims, std::vector<int64_t> device_ids);

  // 0, 1, ..., product(dims) - 1 in row-major order.
  static DeviceArray Iota(std::vector<int64_t> dims);
  // XLA's iota form: iota(product(reshape_dims)) reshaped to `reshape_dims`, transposed by
  // `transpose_perm` (output dim i is input dim transpose_perm[i]) and reshaped to `dims`.
  // Errors: kInvalidArgument if the element counts differ, a dim is < 1, or `transpose_perm` is
  // not a permutation of [0, reshape_dims.size()).
  [[nodiscard]] static absl::StatusOr<DeviceArray> IotaTransposed(
      std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
      std::vector<int64_t> transpose_perm);

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int64_t i) const { return dims_[i]; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  // Row-major contents.
  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  int64_t num_elements() const { return static_cast<int64_t>(device_ids_.size()); }

  // The device at a multi-index. Precondition: index.size() == rank(), each in range.
  int64_t at(absl::Span<const int64_t> index) const;
  // The multi-index of the first element equal to `device_id`, or nullopt if absent. O(rank)
  // (a position table built with the array) when the ids are dense enough, otherwise a scan.
  std::optional<std::vector<int64_t>> IndexOf(int64_t device_id) const;
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;

  // Output dim i is input dim perm[i] (numpy.transpose). Precondition: `perm` is a permutation
  // of [0, rank()).
  DeviceArray Transpose(absl::Span<const int64_t> perm) const;
  // The same row-major contents viewed with `dims`. Precondition: same element count.
  DeviceArray Reshape(std::vector<int64_t> dims) const;

  // True when the contents are 0, 1, ..., n - 1.
  bool IsIota() const;
  // Nested lists as numpy prints them with commas: "[[0, 1], [2, 3]]"; rank 0: "0".
  std::string ToString() const;

  bool operator==(const DeviceArray& other) const {
    return dims_ == other.dims_ && device_ids_ == other.device_ids_;
  }
  bool operator!=(const DeviceArray& other) const { return !(*this == other); }

  template <typename H>
  friend H AbslHashValue(H h, const DeviceArray& a) {
    return H::combine(std::move(h), a.dims_, a.device_ids_);
  }

 private:
  void BuildPositions();

  std::vector<int64_t> dims_;
  std::vector<int64_t> device_ids_;
  // positions_[id]: row-major position of the first element equal to id, -1 if absent; null
  // when the ids are too sparse for a table (max id > 4 * size + 1024). Shared between copies.
  std::shared_ptr<const std::vector<int32_t>> positions_;
};

// Calls `fn(index)` for every multi-index of `dims` in row-major order (the last dim fastest).
// Nothing is called when a dim is 0; rank 0 calls once with an empty index.
template <typename Fn>
void ForEachIndex(absl::Span<const int64_t> dims, Fn&& fn) {
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  std::vector<int64_t> index(dims.size(), 0);
  while (true) {
    fn(absl::Span<const int64_t>(index));
    int64_t i = static_cast<int64_t>(dims.size()) - 1;
    for (; i >= 0; --i) {
      if (++index[i] < dims[i]) break;
      index[i] = 0;
    }
    if (i < 0) return;
  }
}

// Product of `dims` (1 for none).
int64_t Product(absl::Span<const int64_t> dims);

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_DEVICE_ARRAY_H_
