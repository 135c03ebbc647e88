#include "tessel/spmd/device_array.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"

namespace tessel::spmd {

int64_t Product(absl::Span<const int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) product *= d;
  return product;
}

struct DeviceArray::Storage {
  // Row-major ids: set at construction for explicit arrays, materialised under `once` for
  // compact ones.
  std::once_flag once;
  std::vector<int64_t> ids;
  // Explicit arrays only: positions[id] is the row-major position of the first element equal to
  // id, -1 if absent; empty when the ids are too sparse for a table (IndexOf then scans).
  std::vector<int32_t> positions;
};

namespace {

// Drops factors of size 1 and merges an outer factor into the inner one it continues
// (outer stride == inner stride * inner size). Input and output are major to minor.
// Canonical factors are what makes operator== and the hash exact: one array, one factor list.
std::vector<IdFactor> Canonical(const std::vector<IdFactor>& factors) {
  std::vector<IdFactor> out;
  out.reserve(factors.size());
  for (const IdFactor& f : factors) {
    if (f.size == 1) continue;
    if (!out.empty() && out.back().stride == f.stride * f.size) {
      out.back() = IdFactor{out.back().size * f.size, f.stride};
    } else {
      out.push_back(f);
    }
  }
  return out;
}

// The compact form of `ids` (n >= 2) when they are a transposed iota of 0..n-1, else nullopt.
// Greedy from the minor end: the next factor's stride is the id one block further, its size the
// longest run of multiples of that stride (a canonical form's adjacent factors never continue
// each other, so the run stops exactly at the factor's size). Then one O(n) pass checks every id
// against the formula, and the strides are checked to be a mixed radix of n (so the ids are a
// permutation of 0..n-1).
std::optional<std::vector<IdFactor>> Compress(const std::vector<int64_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2 || ids[0] != 0) return std::nullopt;
  std::vector<IdFactor> factors;  // minor to major while collecting
  // `block` is the number of positions the factors found so far span (their sizes' product);
  // the element right after the first block is the next factor's stride.
  int64_t block = 1;
  while (block < n) {
    const int64_t stride = ids[block];
    if (stride <= 0 || stride >= n) return std::nullopt;
    int64_t size = 2;
    while (size * block < n && ids[size * block] == size * stride) ++size;
    if (n % (size * block) != 0) return std::nullopt;
    factors.push_back(IdFactor{size, stride});
    block *= size;
  }
  // The cheap checks above only looked at a few ids; the strides must form a mixed radix (so
  // the formula yields each of 0..n-1 once) before the full pass below is worth running.
  std::vector<IdFactor> by_stride = factors;
  std::sort(by_stride.begin(), by_stride.end(),
            [](const IdFactor& a, const IdFactor& b) { return a.stride < b.stride; });
  int64_t expected_stride = 1;
  for (const IdFactor& f : by_stride) {
    if (f.stride != expected_stride) return std::nullopt;
    expected_stride *= f.size;
  }
  std::reverse(factors.begin(), factors.end());
  // Walks the ids with an odometer over the digits, updating the expected id incrementally
  // (O(1) amortized per position), and compares every one.
  const int64_t k = static_cast<int64_t>(factors.size());
  std::vector<int64_t> digits(k, 0);
  int64_t id = 0;
  for (int64_t p = 0; p < n; ++p) {
    if (ids[p] != id) return std::nullopt;
    for (int64_t i = k - 1; i >= 0; --i) {
      id += factors[i].stride;
      if (++digits[i] < factors[i].size) break;
      id -= factors[i].stride * factors[i].size;
      digits[i] = 0;
    }
  }
  return factors;
}

}  // namespace

DeviceArray::DeviceArray() : storage_(std::make_shared<Storage>()) {}

DeviceArray DeviceArray::FromFactors(std::vector<int64_t> dims, std::vector<IdFactor> factors) {
  DeviceArray a;
  a.num_elements_ = Product(dims);
  a.dims_ = std::move(dims);
  a.factors_ = std::move(factors);
  return a;
}

DeviceArray::DeviceArray(std::vector<int64_t> dims, std::vector<int64_t> device_ids)
    : dims_(std::move(dims)), storage_(std::make_shared<Storage>()) {
  for (int64_t d : dims_) TESSEL_CHECK(d >= 0);
  num_elements_ = Product(dims_);
  TESSEL_CHECK(num_elements_ == static_cast<int64_t>(device_ids.size()));
  const int64_t n = num_elements_;
  // The empty array and the single device 0 are compact with no factors; a single other
  // device (e.g. the [1] array of {maximal device=3}) is not an iota and stays explicit.
  if (n == 0 || (n == 1 && device_ids[0] == 0)) {
    compact_ = true;
  } else if (std::optional<std::vector<IdFactor>> factors = Compress(device_ids)) {
    compact_ = true;
    factors_ = *std::move(factors);
  } else {
    compact_ = false;
  }
  if (compact_) return;  // O(rank) from here on; ids are materialised again only on demand
  storage_->ids = std::move(device_ids);
  int64_t max_id = -1;
  for (int64_t id : storage_->ids) {
    if (id < 0) return;  // invalid ids: IndexOf scans
    max_id = std::max(max_id, id);
  }
  // The table costs 4 bytes per possible id, so it is built only when ids are dense enough
  // (a mesh over a subset of devices, a permuted order); sparse ids fall back to a scan.
  // Positions are int32 to halve that memory, hence the count limit.
  if (max_id > 4 * n + 1024 || n > std::numeric_limits<int32_t>::max()) return;
  storage_->positions.assign(max_id + 1, -1);
  // Filled from the back so each id keeps its first position (IndexOf's contract) when an
  // explicit array repeats ids.
  for (int64_t i = n - 1; i >= 0; --i) {
    storage_->positions[storage_->ids[i]] = static_cast<int32_t>(i);
  }
}

DeviceArray DeviceArray::Iota(std::vector<int64_t> dims) {
  for (int64_t d : dims) TESSEL_CHECK(d >= 0);
  const int64_t n = Product(dims);
  std::vector<IdFactor> factors;
  // One factor whatever the dims: a row-major iota is a single run of stride 1 (Reshape never
  // changes the factors, only the dims).
  if (n > 1) factors.push_back(IdFactor{n, 1});
  return FromFactors(std::move(dims), std::move(factors));
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
  // Transposing iota(reshape_dims) lists its dims in `transpose_perm` order; each keeps its
  // row-major stride in the iota, which is exactly one factor of the compact form.
  std::vector<int64_t> reshape_strides(reshape_dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(reshape_dims.size()) - 2; i >= 0; --i) {
    reshape_strides[i] = reshape_strides[i + 1] * reshape_dims[i + 1];
  }
  std::vector<IdFactor> factors;
  for (int64_t p : transpose_perm) factors.push_back(IdFactor{reshape_dims[p], reshape_strides[p]});
  return FromFactors(std::move(dims), Canonical(factors));
}

// Unlike FromFactors, this takes factors built by callers (MergeShardings' compact path), so it
// checks that they form a mixed radix of exactly product(dims) ids before trusting them.
absl::StatusOr<DeviceArray> DeviceArray::FromIdFactors(std::vector<int64_t> dims,
                                                       std::vector<IdFactor> factors) {
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("dim ", d, " is < 0"));
  }
  std::vector<IdFactor> by_stride = factors;
  std::sort(by_stride.begin(), by_stride.end(),
            [](const IdFactor& a, const IdFactor& b) { return a.stride < b.stride; });
  int64_t expected_stride = 1;
  for (const IdFactor& f : by_stride) {
    if (f.size < 1 || f.stride != expected_stride) {
      return absl::InvalidArgumentError(
          absl::StrCat("id digit (size ", f.size, ", stride ", f.stride,
                       ") does not continue a mixed radix at stride ", expected_stride));
    }
    expected_stride *= f.size;
  }
  if (expected_stride != Product(dims)) {
    return absl::InvalidArgumentError(absl::StrCat("id digits span ", expected_stride,
                                                   " devices but dims [", absl::StrJoin(dims, ","),
                                                   "] hold ", Product(dims)));
  }
  return FromFactors(std::move(dims), Canonical(factors));
}

const std::vector<int64_t>& DeviceArray::device_ids() const {
  if (!compact_) return storage_->ids;
  // call_once: copies share `storage_`, possibly across threads (the header promises thread
  // safety); the list is built once and never changes afterwards.
  std::call_once(storage_->once, [this] {
    std::vector<int64_t>& ids = storage_->ids;
    ids.resize(num_elements_);
    for (int64_t p = 0; p < num_elements_; ++p) ids[p] = AtLinear(p);
  });
  return storage_->ids;
}

std::vector<int64_t> DeviceArray::iota_reshape_dims() const {
  TESSEL_CHECK(compact_);
  if (factors_.empty()) return {num_elements_};
  std::vector<IdFactor> by_stride = factors_;
  std::sort(by_stride.begin(), by_stride.end(),
            [](const IdFactor& a, const IdFactor& b) { return a.stride > b.stride; });
  std::vector<int64_t> dims;
  for (const IdFactor& f : by_stride) dims.push_back(f.size);
  return dims;
}

// Each factor is one dim of XLA's iota reshape, whose dims are ordered by decreasing stride
// (iota_reshape_dims); T(...) lists, for each factor in position order, the index of its dim
// in that order. O(rank^2), and rank is tiny.
std::vector<int64_t> DeviceArray::iota_transpose_perm() const {
  TESSEL_CHECK(compact_);
  if (factors_.empty()) return {0};
  std::vector<int64_t> perm;
  for (const IdFactor& f : factors_) {
    int64_t larger = 0;  // position in decreasing-stride order
    for (const IdFactor& g : factors_) larger += g.stride > f.stride ? 1 : 0;
    perm.push_back(larger);
  }
  return perm;
}

std::vector<int64_t> DeviceArray::strides() const {
  std::vector<int64_t> strides(dims_.size(), 1);
  for (int64_t i = rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims_[i + 1];
  return strides;
}

int64_t DeviceArray::AtLinear(int64_t linear) const {
  TESSEL_CHECK(linear >= 0 && linear < num_elements_);
  if (!compact_) return storage_->ids[linear];
  // Peel the position's mixed-radix digits from the minor end and weight each by its stride.
  int64_t id = 0;
  for (int64_t k = static_cast<int64_t>(factors_.size()) - 1; k >= 0; --k) {
    id += (linear % factors_[k].size) * factors_[k].stride;
    linear /= factors_[k].size;
  }
  return id;
}

int64_t DeviceArray::at(absl::Span<const int64_t> index) const {
  TESSEL_CHECK(static_cast<int64_t>(index.size()) == rank());
  // Each coordinate is checked, not just the linear position: an out-of-range coordinate can
  // still give an in-range position (it wraps into the next row) and a wrong device.
  int64_t linear = 0;
  for (int64_t i = 0; i < rank(); ++i) {
    TESSEL_CHECK(index[i] >= 0 && index[i] < dims_[i]);
    linear = linear * dims_[i] + index[i];
  }
  return AtLinear(linear);
}

std::optional<std::vector<int64_t>> DeviceArray::IndexOf(int64_t device_id) const {
  int64_t linear = 0;
  if (compact_) {
    // The inverse of AtLinear: the id's digit for each factor, read in major-to-minor factor
    // order, is the position's digit. Compact ids are exactly 0..n-1, so the range check
    // suffices.
    if (device_id < 0 || device_id >= num_elements_) return std::nullopt;
    for (const IdFactor& f : factors_) linear = linear * f.size + (device_id / f.stride) % f.size;
  } else if (!storage_->positions.empty()) {
    const std::vector<int32_t>& positions = storage_->positions;
    if (device_id < 0 || device_id >= static_cast<int64_t>(positions.size())) {
      return std::nullopt;
    }
    linear = positions[device_id];
    if (linear < 0) return std::nullopt;
  } else {
    const std::vector<int64_t>& ids = storage_->ids;
    auto it = std::find(ids.begin(), ids.end(), device_id);
    if (it == ids.end()) return std::nullopt;
    linear = it - ids.begin();
  }
  std::vector<int64_t> index(dims_.size());
  for (int64_t i = rank() - 1; i >= 0; --i) {
    index[i] = linear % dims_[i];
    linear /= dims_[i];
  }
  return index;
}

std::optional<std::vector<std::vector<IdFactor>>> DeviceArray::SplitFactorsByDim() const {
  if (!compact_ || num_elements_ == 0) return std::nullopt;
  // Walk dims and factors together from the minor end. A factor larger than the dim's
  // remaining extent is split: its minor part (stride unchanged) goes to this dim, the rest
  // (stride times that part) carries over to the next dim. That only works when the sizes
  // divide, which is why Transpose can fall back to O(n).
  std::vector<std::vector<IdFactor>> groups(dims_.size());
  int64_t k = static_cast<int64_t>(factors_.size()) - 1;
  IdFactor current = k >= 0 ? factors_[k] : IdFactor{};
  for (int64_t d = rank() - 1; d >= 0; --d) {
    int64_t need = dims_[d];
    while (need > 1) {
      if (k < 0) return std::nullopt;
      if (current.size <= need) {
        if (need % current.size != 0) return std::nullopt;
        groups[d].push_back(current);
        need /= current.size;
        --k;
        current = k >= 0 ? factors_[k] : IdFactor{};
      } else {
        if (current.size % need != 0) return std::nullopt;
        groups[d].push_back(IdFactor{need, current.stride});
        current = IdFactor{current.size / need, current.stride * need};
        need = 1;
      }
    }
  }
  for (std::vector<IdFactor>& g : groups) std::reverse(g.begin(), g.end());
  return groups;
}

// Canonicalized so two arrays can be compared dim by dim with ==, even when their factors were
// split differently around the dim's boundaries.
std::optional<std::vector<IdFactor>> DeviceArray::DimFactors(int64_t dim) const {
  TESSEL_CHECK(dim >= 0 && dim < rank());
  std::optional<std::vector<std::vector<IdFactor>>> groups = SplitFactorsByDim();
  if (!groups.has_value()) return std::nullopt;
  return Canonical((*groups)[dim]);
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
  if (compact_ && num_elements_ == 0) return FromFactors(std::move(out_dims), {});
  // Transposing permutes whole dims, so with the factors grouped by dim it permutes the
  // groups: O(rank), and the result stays compact.
  if (std::optional<std::vector<std::vector<IdFactor>>> groups = SplitFactorsByDim()) {
    std::vector<IdFactor> factors;
    for (int64_t p : perm) factors.insert(factors.end(), (*groups)[p].begin(), (*groups)[p].end());
    return FromFactors(std::move(out_dims), Canonical(factors));
  }
  // O(n) fallback for explicit arrays and dims that cut a factor unevenly; the constructor
  // re-detects a compact form if the result has one.
  std::vector<int64_t> in_strides = strides();
  std::vector<int64_t> out_ids;
  out_ids.reserve(num_elements_);
  ForEachIndex(out_dims, [&](absl::Span<const int64_t> out_index) {
    int64_t linear = 0;
    for (size_t i = 0; i < perm.size(); ++i) linear += out_index[i] * in_strides[perm[i]];
    out_ids.push_back(AtLinear(linear));
  });
  return DeviceArray(std::move(out_dims), std::move(out_ids));
}

// O(rank) for both forms: the factors (or the explicit ids) describe row-major contents, which a
// reshape does not change. Whether a later Transpose stays O(rank) depends on how the new dims
// cut the factors (SplitFactorsByDim).
DeviceArray DeviceArray::Reshape(std::vector<int64_t> dims) const {
  for (int64_t d : dims) TESSEL_CHECK(d >= 0);
  TESSEL_CHECK(Product(dims) == num_elements_);
  DeviceArray reshaped = *this;  // same row-major contents: factors and storage are shared
  reshaped.dims_ = std::move(dims);
  return reshaped;
}

DeviceArray DeviceArray::SortLastDimGroups() const {
  if (rank() == 0 || num_elements_ <= 1) return *this;
  if (std::optional<std::vector<std::vector<IdFactor>>> groups = SplitFactorsByDim()) {
    // Ids along the last dim ascend exactly when its digits go from the largest stride (major)
    // to the smallest.
    std::vector<IdFactor>& last = groups->back();
    std::sort(last.begin(), last.end(),
              [](const IdFactor& a, const IdFactor& b) { return a.stride > b.stride; });
    std::vector<IdFactor> factors;
    for (const std::vector<IdFactor>& g : *groups)
      factors.insert(factors.end(), g.begin(), g.end());
    return FromFactors(dims_, Canonical(factors));
  }
  // Explicit fallback (or a last dim cutting a factor unevenly): sort each group in place; the
  // constructor may still find a compact form for the result.
  std::vector<int64_t> ids = device_ids();
  const int64_t group_size = dims_.back();
  for (int64_t start = 0; start < num_elements_; start += group_size) {
    std::sort(ids.begin() + start, ids.begin() + start + group_size);
  }
  return DeviceArray(dims_, std::move(ids));
}

// Canonical factors merge a full iota into one factor of stride 1, so this needs no scan.
bool DeviceArray::IsIota() const {
  return compact_ && (factors_.empty() || (factors_.size() == 1 && factors_[0].stride == 1));
}

// O(rank) for two compact arrays, which is what makes Sharding equality (and so the
// partitioner's memo tables) cheap at thousands of devices.
bool DeviceArray::operator==(const DeviceArray& other) const {
  // Both forms are canonical: an array that can be compact always is.
  if (dims_ != other.dims_ || compact_ != other.compact_) return false;
  if (compact_) return factors_ == other.factors_;
  return storage_ == other.storage_ || storage_->ids == other.storage_->ids;
}

namespace {
// Recursion depth is the rank (a handful), so no explicit stack is needed.
void AppendNested(const DeviceArray& a, const std::vector<int64_t>& strides, int64_t dim,
                  int64_t offset, std::string* out) {
  if (dim == a.rank()) {
    absl::StrAppend(out, a.AtLinear(offset));
    return;
  }
  out->push_back('[');
  for (int64_t i = 0; i < a.dim(dim); ++i) {
    if (i > 0) out->append(", ");
    AppendNested(a, strides, dim + 1, offset + i * strides[dim], out);
  }
  out->push_back(']');
}
}  // namespace

// numpy's nested-list spelling, the one torch_xla's get_logical_mesh() shows, so a mesh prints
// the way a Python user expects. Goes through AtLinear: no id list is materialized.
std::string DeviceArray::ToString() const {
  std::string out;
  if (num_elements_ == 0 && rank() == 0) return out;
  AppendNested(*this, strides(), 0, 0, &out);
  return out;
}

}  // namespace tessel::spmd
