#include "tessel/core/collectives.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"

namespace tessel {

namespace {

template <typename T>
T Combine(T a, T b, ReduceKind kind) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (kind) {
      case ReduceKind::kAnd:
      case ReduceKind::kMultiply:
      case ReduceKind::kMinimum:
        return a && b;
      default:
        return a || b;
    }
  } else {
    switch (kind) {
      case ReduceKind::kAdd:
        return static_cast<T>(a + b);
      case ReduceKind::kMultiply:
        return static_cast<T>(a * b);
      case ReduceKind::kMaximum:
        return a > b || a != a ? a : b;  // NaN propagates
      case ReduceKind::kMinimum:
        return a < b || a != a ? a : b;
      case ReduceKind::kAnd:
        if constexpr (std::is_integral_v<T>) return a & b;
        return a;
      case ReduceKind::kOr:
        if constexpr (std::is_integral_v<T>) return a | b;
        return a;
    }
    return a;
  }
}

}  // namespace

absl::StatusOr<Literal> CombineLiterals(const std::vector<const Literal*>& inputs,
                                        ReduceKind kind) {
  if (inputs.empty()) return absl::InvalidArgumentError("combine: no inputs");
  Literal out = *inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i]->shape() != out.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("collective inputs differ: ", out.shape().ToString(), " vs ",
                       inputs[i]->shape().ToString()));
    }
    VisitDType(out.shape().dtype(), [&]<typename T>() {
      auto acc = out.data<T>();
      auto in = inputs[i]->data<T>();
      for (size_t j = 0; j < acc.size(); ++j) {
        if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
          acc[j] = static_cast<T>(
              Combine<float>(static_cast<float>(acc[j]), static_cast<float>(in[j]), kind));
        } else {
          acc[j] = Combine<T>(acc[j], in[j], kind);
        }
      }
    });
  }
  return out;
}

absl::StatusOr<Literal> ConcatenateLiterals(const std::vector<const Literal*>& parts, int64_t dim) {
  if (parts.empty()) return absl::InvalidArgumentError("concatenate: no parts");
  const Shape& first = parts[0]->shape();
  std::vector<int64_t> dims = first.dims();
  dims[dim] = 0;
  for (const Literal* p : parts) {
    if (p->shape().rank() != first.rank() || p->shape().dtype() != first.dtype()) {
      return absl::InvalidArgumentError("collective inputs differ in rank or type");
    }
    dims[dim] += p->shape().dim(dim);
  }
  Literal out = Literal::Uninitialized(Shape(first.dtype(), dims));
  // Treat each value as [outer, dim * inner] rows and copy row blocks.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= first.dim(d);
  for (int64_t d = dim + 1; d < first.rank(); ++d) inner *= first.dim(d);
  const int64_t width = ByteWidth(first.dtype());
  const int64_t out_row = dims[dim] * inner * width;
  int64_t offset = 0;
  for (const Literal* p : parts) {
    const int64_t row = p->shape().dim(dim) * inner * width;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(out.raw_data() + o * out_row + offset, p->raw_data() + o * row, row);
    }
    offset += row;
  }
  return out;
}

absl::StatusOr<Literal> ChunkOfLiteral(const Literal& value, int64_t dim, int64_t count,
                                       int64_t index) {
  const Shape& shape = value.shape();
  if (shape.dim(dim) % count != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " of ", shape.ToString(), " is not divisible by ", count));
  }
  std::vector<int64_t> dims = shape.dims();
  dims[dim] /= count;
  Literal out = Literal::Uninitialized(Shape(shape.dtype(), dims));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape.dim(d);
  for (int64_t d = dim + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  const int64_t width = ByteWidth(shape.dtype());
  const int64_t chunk = dims[dim] * inner * width;
  const int64_t row = shape.dim(dim) * inner * width;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(out.raw_data() + o * chunk, value.raw_data() + o * row + index * chunk, chunk);
  }
  return out;
}

InProcessCollectives::InProcessCollectives(int64_t num_devices, std::chrono::milliseconds timeout)
    : num_devices_(num_devices), timeout_(timeout), sequence_(num_devices, 0) {}

absl::StatusOr<std::vector<int64_t>> InProcessCollectives::GroupOf(
    int64_t device_id, const ReplicaGroups& groups) const {
  if (groups.empty()) {  // XLA: no replica groups means one group of every device
    std::vector<int64_t> all(num_devices_);
    for (int64_t d = 0; d < num_devices_; ++d) all[d] = d;
    return all;
  }
  for (const auto& group : groups) {
    if (std::find(group.begin(), group.end(), device_id) != group.end()) return group;
  }
  return absl::InvalidArgumentError(absl::StrCat("device ", device_id, " is in no replica group"));
}

absl::StatusOr<std::vector<Literal>> InProcessCollectives::Exchange(
    int64_t device_id, const Literal& input, const std::vector<int64_t>& group) {
  if (device_id < 0 || device_id >= num_devices_) {
    return absl::OutOfRangeError(
        absl::StrCat("device ", device_id, " is outside 0..", num_devices_ - 1));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  const int64_t sequence = sequence_[device_id]++;
  const auto key = std::make_pair(sequence, *std::min_element(group.begin(), group.end()));
  Slot& slot = slots_[key];
  slot.inputs.emplace(device_id, input);
  cv_.notify_all();
  const size_t size = group.size();
  const bool arrived =
      cv_.wait_for(lock, timeout_, [&] { return slot.inputs.size() == size || !aborted_.ok(); });
  if (!aborted_.ok()) return aborted_;
  if (!arrived) {
    return absl::DeadlineExceededError(
        absl::StrCat("device ", device_id, ": collective #", sequence, " over group {",
                     absl::StrJoin(group, ","), "}: peers did not arrive in time"));
  }
  std::vector<Literal> all;
  for (int64_t member : group) {
    auto it = slot.inputs.find(member);
    if (it == slot.inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("device ", device_id, ": collective #",
                                                     sequence, ": groups disagree across devices"));
    }
    all.push_back(it->second);
  }
  if (++slot.departed == static_cast<int64_t>(size)) slots_.erase(key);
  return all;
}

void InProcessCollectives::Abort(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) {
      aborted_ = why.ok() ? absl::CancelledError("the collectives were aborted") : why;
    }
  }
  cv_.notify_all();
}

absl::StatusOr<Literal> InProcessCollectives::AllReduce(int64_t device_id, const Literal& input,
                                                        const ReplicaGroups& groups,
                                                        ReduceKind kind) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> group, GroupOf(device_id, groups));
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> all, Exchange(device_id, input, group));
  std::vector<const Literal*> ptrs;
  for (const Literal& l : all) ptrs.push_back(&l);
  return CombineLiterals(ptrs, kind);
}

absl::StatusOr<Literal> InProcessCollectives::AllGather(int64_t device_id, const Literal& input,
                                                        const ReplicaGroups& groups, int64_t dim) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> group, GroupOf(device_id, groups));
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> all, Exchange(device_id, input, group));
  std::vector<const Literal*> ptrs;
  for (const Literal& l : all) ptrs.push_back(&l);
  return ConcatenateLiterals(ptrs, dim);
}

absl::StatusOr<Literal> InProcessCollectives::ReduceScatter(int64_t device_id, const Literal& input,
                                                            const ReplicaGroups& groups,
                                                            int64_t dim, ReduceKind kind) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> group, GroupOf(device_id, groups));
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> all, Exchange(device_id, input, group));
  std::vector<const Literal*> ptrs;
  for (const Literal& l : all) ptrs.push_back(&l);
  TESSEL_ASSIGN_OR_RETURN(Literal sum, CombineLiterals(ptrs, kind));
  int64_t position = std::find(group.begin(), group.end(), device_id) - group.begin();
  return ChunkOfLiteral(sum, dim, static_cast<int64_t>(group.size()), position);
}

absl::StatusOr<Literal> InProcessCollectives::AllToAll(int64_t device_id, const Literal& input,
                                                       const ReplicaGroups& groups, int64_t dim) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> group, GroupOf(device_id, groups));
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> all, Exchange(device_id, input, group));
  const int64_t n = static_cast<int64_t>(group.size());
  int64_t position = std::find(group.begin(), group.end(), device_id) - group.begin();
  std::vector<Literal> chunks;
  for (const Literal& l : all) {
    TESSEL_ASSIGN_OR_RETURN(Literal c, ChunkOfLiteral(l, dim, n, position));
    chunks.push_back(std::move(c));
  }
  std::vector<const Literal*> ptrs;
  for (const Literal& l : chunks) ptrs.push_back(&l);
  return ConcatenateLiterals(ptrs, dim);
}

absl::StatusOr<Literal> InProcessCollectives::CollectivePermute(
    int64_t device_id, const Literal& input,
    const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<int64_t> everyone(num_devices_);
  for (int64_t i = 0; i < num_devices_; ++i) everyone[i] = i;
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> all, Exchange(device_id, input, everyone));
  for (const auto& [source, target] : pairs) {
    if (target == device_id) {
      if (source < 0 || source >= num_devices_) {
        return absl::OutOfRangeError(absl::StrCat("collective-permute source ", source,
                                                  " is outside 0..", num_devices_ - 1));
      }
      return all[source];
    }
  }
  return Literal(input.shape());
}

}  // namespace tessel
