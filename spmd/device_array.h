// DeviceArray: an n-d array of global device ids, row-major.
//
// It is the value behind both a mesh's logical device array (`Mesh::logical_mesh()`) and a
// sharding's tile assignment (`Sharding::tile_assignment()`), as numpy arrays are in torch_xla
// and `xla::TileAssignment` is in XLA.
//
//   DeviceArray a = DeviceArray::Iota({2, 4});        // [[0, 1, 2, 3], [4, 5, 6, 7]]
//   a.at({1, 2}) == 6;
//   a.Transpose({1, 0}).device_ids() == {0, 4, 1, 5, 2, 6, 3, 7};
//   a.Reshape({8}).ToString() == "[0, 1, 2, 3, 4, 5, 6, 7]";
//   *a.IndexOf(5) == {1, 1};
//
// Compact (iota) form. Most device arrays in practice are a reshape and transpose of
// iota(n): every logical mesh JAX builds from a torus, and every tile assignment derived from
// one by transposing, reshaping or projecting. XLA stores those as `IotaTileAssignment`
// (`[4,2]<=[2,4]T(1,0)`: iota(8) reshaped to [2,4], transposed by (1,0), reshaped to [4,2]).
// DeviceArray does the same, in an equivalent form: the ids are 0..n-1 and the element at
// row-major position p is
//     id(p) = sum_k digit_k(p) * stride_k
// where digit_k are the digits of p in the mixed radix `factors()[k].size` (factors listed
// major to minor) and the strides are a permutation of the row-major strides of some reshape
// of iota(n). In this form `at`, `IndexOf`, `Reshape`, `Transpose` (when the dims fall on factor
// boundaries, see below), equality and hashing take O(rank) time and memory, independent of the
// device count; this is what lets the partitioner and simulator handle 8192 devices in seconds.
// Every constructor brings an array to this form when it can (an O(n) check); the form is
// canonical (no factor of size 1, no two adjacent factors that continue one another's stride),
// so two arrays are equal exactly when their dims and forms are. Arrays that are not a
// transposed iota (a mesh over a subset of devices, an arbitrary device order) keep an explicit
// id list; every operation works on both.
//
// `device_ids()` materialises the row-major list on first use (O(n), cached and shared between
// copies, thread-safe); prefer `at` / `IndexOf` / `ForEachDevice` on hot paths.
// Source: XLA `xla::TileAssignment`, `xla::IotaTileAssignment` (tile_assignment.h).
#ifndef TESSEL_SPMD_DEVICE_ARRAY_H_
#define TESSEL_SPMD_DEVICE_ARRAY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessel::spmd {

// One digit of a device id in the compact form: the digit is (id / stride) % size.
struct IdFactor {
  int64_t size = 1;
  int64_t stride = 1;
  bool operator==(const IdFactor& o) const { return size == o.size && stride == o.stride; }
  bool operator!=(const IdFactor& o) const { return !(*this == o); }
  template <typename H>
  friend H AbslHashValue(H h, const IdFactor& f) {
    return H::combine(std::move(h), f.size, f.stride);
  }
};

class DeviceArray {
 public:
  // A rank-0 array holding device 0.
  DeviceArray();
  // An array of `dims` holding `device_ids` in row-major order; stored in the compact form when
  // the ids are a transposed iota (O(n) check).
  // Precondition (TESSEL_CHECK): every dim >= 0 and product(dims) == device_ids.size().
  DeviceArray(std::vector<int64_t> dims, std::vector<int64_t> device_ids);

  // 0, 1, ..., product(dims) - 1 in row-major order. O(rank).
  static DeviceArray Iota(std::vector<int64_t> dims);
  // XLA's iota form: iota(product(reshape_dims)) reshaped to `reshape_dims`, transposed by
  // `transpose_perm` (output dim i is input dim transpose_perm[i]; empty means identity) and
  // reshaped to `dims`. O(rank).
  // Errors: kInvalidArgument if the element counts differ, a dim is < 1, or `transpose_perm` is
  // not a permutation of [0, reshape_dims.size()).
  [[nodiscard]] static absl::StatusOr<DeviceArray> IotaTransposed(
      std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
      std::vector<int64_t> transpose_perm);

  // The compact array of `dims` whose element at row-major position p is sum_k digit_k(p) *
  // factors[k].stride, the digits taken in the mixed radix of the factor sizes (major to
  // minor); see the top of this file. O(rank).
  // Errors: kInvalidArgument unless the strides, ordered, are the row-major strides of the
  // sizes (each stride the product of the sizes of the smaller-stride factors) and the sizes
  // multiply to product(dims).
  [[nodiscard]] static absl::StatusOr<DeviceArray> FromIdFactors(std::vector<int64_t> dims,
                                                                 std::vector<IdFactor> factors);

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int64_t i) const { return dims_[i]; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t num_elements() const { return num_elements_; }

  // Row-major contents. O(n) on the first call for a compact array (then cached).
  const std::vector<int64_t>& device_ids() const;

  // True when the array is held in the compact form (a transposed iota of 0..n-1).
  bool is_compact() const { return compact_; }
  // The compact form's digits, major to minor (empty for 0 or 1 element). Precondition:
  // is_compact().
  const std::vector<IdFactor>& factors() const { return factors_; }
  // XLA's spelling of the compact form: `dims <= reshape_dims T(transpose_perm)`. Precondition:
  // is_compact(). Reshape dims are the factor sizes ordered by decreasing stride.
  std::vector<int64_t> iota_reshape_dims() const;
  std::vector<int64_t> iota_transpose_perm() const;

  // The device at a multi-index. O(rank) when compact. Precondition: index.size() == rank(),
  // each in range.
  int64_t at(absl::Span<const int64_t> index) const;
  // The device at row-major position `linear` (0 <= linear < num_elements()).
  int64_t AtLinear(int64_t linear) const;
  // The multi-index of the first element equal to `device_id`, or nullopt if absent. O(rank)
  // when compact or when the ids are dense enough for a position table, otherwise a scan.
  std::optional<std::vector<int64_t>> IndexOf(int64_t device_id) const;
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;

  // Output dim i is input dim perm[i] (numpy.transpose). O(rank) when compact and every dim is
  // a product of whole or split factors (always for arrays built by Iota / reshape / transpose
  // of whole dims); otherwise O(n). Precondition: `perm` is a permutation of [0, rank()).
  DeviceArray Transpose(absl::Span<const int64_t> perm) const;
  // The same row-major contents viewed with `dims`. O(rank). Precondition: same element count.
  DeviceArray Reshape(std::vector<int64_t> dims) const;
  // The same array with the ids inside each group along the last dim (one group per position
  // of the other dims) sorted ascending, as XLA's PartialTile does to the replicated dim.
  DeviceArray SortLastDimGroups() const;

  // The digits of the device id that determine the index along dim `dim`, major to minor and
  // canonical (merged, no size 1): the index along `dim` of device id x is the row-major number
  // formed by the digits (x / stride) % size. Two compact arrays of the same devices give every
  // device the same index along their dims a and b exactly when these lists are equal. nullopt
  // when the array is not compact or the dim does not fall on factor boundaries.
  std::optional<std::vector<IdFactor>> DimFactors(int64_t dim) const;

  // True when the contents are 0, 1, ..., n - 1.
  bool IsIota() const;
  // Nested lists as numpy prints them with commas: "[[0, 1], [2, 3]]"; rank 0: "0".
  std::string ToString() const;

  bool operator==(const DeviceArray& other) const;
  bool operator!=(const DeviceArray& other) const { return !(*this == other); }

  template <typename H>
  friend H AbslHashValue(H h, const DeviceArray& a) {
    h = H::combine(std::move(h), a.dims_, a.compact_);
    if (a.compact_) return H::combine(std::move(h), a.factors_);
    return H::combine(std::move(h), a.device_ids());
  }

 private:
  struct Storage;

  // A compact array from canonical factors.
  static DeviceArray FromFactors(std::vector<int64_t> dims, std::vector<IdFactor> factors);
  // The factors split at the boundaries of `dims_`: one list per dim, major to minor; nullopt
  // when a dim boundary falls inside a factor at a non-divisor.
  std::optional<std::vector<std::vector<IdFactor>>> SplitFactorsByDim() const;

  std::vector<int64_t> dims_;
  int64_t num_elements_ = 1;
  bool compact_ = true;
  std::vector<IdFactor> factors_;
  // Explicit ids (always for non-compact arrays; materialised on demand for compact ones) and,
  // for explicit arrays, a position table. Shared between copies and reshapes.
  std::shared_ptr<Storage> storage_;
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
