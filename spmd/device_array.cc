#include "spmd/device_array.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessel::spmd {

int64_t Product(absl::Span<const int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) product *= d;
  return product;
}

DeviceArray::DeviceArray(std::vector<int64_t> dims, std::vector<int64_t> device_ids)
    : dims_(std::move(dims)), device_ids_(std::move(device_ids)) {
  for (int64_t d : dims_) TESSEL_CHECK(d >= 0);
  TESSEL_CHECK(Product(dims_) == static_cast<int64_t>(device_ids_.size()));
  BuildPositions();
}

DeviceArray DeviceArray::Iota(std::vector<int64_t> dims) {
  std::vector<int64_t> ids(Product(dims));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return DeviceArray(std::move(dims), std::move(ids));
}

absl::StatusOr<DeviceArray> DeviceArray::IotaTransposed(std::vector<int64_t> dims,
                                                        std::vector<int64_t> reshape_dims,
                                                        std::vector<int64_t> transpose_perm) {
  for (int64_t d : dims) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat("tile dim ", d, " is < 1"));
  }
  for (int64_t d : reshape_dims) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat("iota reshape dim ", d, " is < 1"));
  }
  // Compare the element counts without overflowing: stop once the reshape dims exceed `dims`.
  const int64_t count = Product(dims);
  int64_t reshape_count = 1;
  bool too_many = false;
  for (int64_t d : reshape_dims) {
    if (d > count / reshape_count + 1) {
      too_many = true;
      break;
    }
    reshape_count *= d;
  }
  if (too_many || count != reshape_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("iota reshape dims [", absl::StrJoin(reshape_dims, ","), "] hold ",
                     too_many ? absl::StrCat("more than ", count) : absl::StrCat(reshape_count),
                     " devices but tile dims [", absl::StrJoin(dims, ","), "] hold ", count));
  }
  if (transpose_perm.empty()) {
    transpose_perm.resize(reshape_dims.size());
    std::iota(transpose_perm.begin(), transpose_perm.end(), int64_t{0});
  }
  std::vector<int64_t> sorted = transpose_perm;
  std::sort(sorted.begin(), sorted.end());
  bool is_perm = sorted.size() == reshape_dims.size();
  for (size_t i = 0; is_perm && i < sorted.size(); ++i) is_perm = sorted[i] == int64_t(i);
  if (!is_perm) {
    return absl::InvalidArgumentError(absl::StrCat("T(", absl::StrJoin(transpose_perm, ","),
                                                   ") is not a permutation of ",
                                                   reshape_dims.size(), " iota dims"));
  }
  return Iota(std::move(reshape_dims)).Transpose(transpose_perm).Reshape(std::move(dims));
}

std::vector<int64_t> DeviceArray::strides() const {
  std::vector<int64_t> strides(dims_.size(), 1);
  for (int64_t i = rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims_[i + 1];
  return strides;
}

int64_t DeviceArray::at(absl::Span<const int64_t> index) const {
  TESSEL_CHECK(static_cast<int64_t>(index.size()) == rank());
  int64_t linear = 0;
  for (int64_t i = 0; i < rank(); ++i) {
    TESSEL_CHECK(index[i] >= 0 && index[i] < dims_[i]);
    linear = linear * dims_[i] + index[i];
  }
  return device_ids_[linear];
}

void DeviceArray::BuildPositions() {
  const int64_t n = static_cast<int64_t>(device_ids_.size());
  int64_t max_id = -1;
  for (int64_t id : device_ids_) {
    if (id < 0) return;  // invalid ids: IndexOf scans
    max_id = std::max(max_id, id);
  }
  if (max_id > 4 * n + 1024 || n > std::numeric_limits<int32_t>::max()) return;
  auto positions = std::make_shared<std::vector<int32_t>>(max_id + 1, -1);
  for (int64_t i = n - 1; i >= 0; --i) (*positions)[device_ids_[i]] = static_cast<int32_t>(i);
  positions_ = std::move(positions);
}

std::optional<std::vector<int64_t>> DeviceArray::IndexOf(int64_t device_id) const {
  int64_t linear;
  if (positions_ != nullptr) {
    if (device_id < 0 || device_id >= static_cast<int64_t>(positions_->size())) {
      return std::nullopt;
    }
    linear = (*positions_)[device_id];
    if (linear < 0) return std::nullopt;
  } else {
    auto it = std::find(device_ids_.begin(), device_ids_.end(), device_id);
    if (it == device_ids_.end()) return std::nullopt;
    linear = it - device_ids_.begin();
  }
  std::vector<int64_t> index(dims_.size());
  for (int64_t i = rank() - 1; i >= 0; --i) {
    index[i] = linear % dims_[i];
    linear /= dims_[i];
  }
  return index;
}

DeviceArray DeviceArray::Transpose(absl::Span<const int64_t> perm) const {
  TESSEL_CHECK(static_cast<int64_t>(perm.size()) == rank());
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    TESSEL_CHECK(p >= 0 && p < rank() && !seen[p]);
    seen[p] = true;
  }
  std::vector<int64_t> out_dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out_dims[i] = dims_[perm[i]];
  std::vector<int64_t> in_strides = strides();
  std::vector<int64_t> out_ids;
  out_ids.reserve(device_ids_.size());
  ForEachIndex(out_dims, [&](absl::Span<const int64_t> out_index) {
    int64_t linear = 0;
    for (size_t i = 0; i < perm.size(); ++i) linear += out_index[i] * in_strides[perm[i]];
    out_ids.push_back(device_ids_[linear]);
  });
  return DeviceArray(std::move(out_dims), std::move(out_ids));
}

DeviceArray DeviceArray::Reshape(std::vector<int64_t> dims) const {
  TESSEL_CHECK(Product(dims) == num_elements());
  DeviceArray reshaped;
  reshaped.dims_ = std::move(dims);
  reshaped.device_ids_ = device_ids_;
  reshaped.positions_ = positions_;  // same contents, same positions
  return reshaped;
}

bool DeviceArray::IsIota() const {
  for (size_t i = 0; i < device_ids_.size(); ++i) {
    if (device_ids_[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

namespace {
void AppendNested(const DeviceArray& a, int64_t dim, int64_t offset, std::string* out) {
  if (dim == a.rank()) {
    absl::StrAppend(out, a.device_ids()[offset]);
    return;
  }
  int64_t stride = a.strides()[dim];
  out->push_back('[');
  for (int64_t i = 0; i < a.dim(dim); ++i) {
    if (i > 0) out->append(", ");
    AppendNested(a, dim + 1, offset + i * stride, out);
  }
  out->push_back(']');
}
}  // namespace

std::string DeviceArray::ToString() const {
  std::string out;
  AppendNested(*this, 0, 0, &out);
  return out;
}

}  // namespace tessel::spmd
