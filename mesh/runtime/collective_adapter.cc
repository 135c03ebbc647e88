#include "tessel/mesh/runtime/collective_adapter.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::mesh {
namespace {

// [A, D, B] with A = product of the dims before `dim`, D = dims[dim], B = bytes of one
// element times the product of the dims after it.
struct Split3 {
  int64_t outer = 1;
  int64_t dim = 1;
  int64_t inner_bytes = 1;
};

Split3 SplitAround(const Shape& shape, int64_t dim) {
  Split3 s;
  for (int64_t i = 0; i < dim; ++i) s.outer *= shape.dim(i);
  s.dim = shape.dim(dim);
  s.inner_bytes = shape.num_elements() == 0 ? 0 : shape.byte_size() / (s.outer * s.dim);
  for (int64_t i = 0; i < shape.rank(); ++i) {
    if (shape.dim(i) == 0) s.inner_bytes = 0;
  }
  return s;
}

// True when only size-1 dims precede `dim` (or the array is empty): the array laid out with
// `dim` first has the same bytes, so a collective along `dim` runs on the buffers as they are.
bool IsLeading(const Shape& shape, int64_t dim) {
  const Split3 s = SplitAround(shape, dim);
  return s.outer == 1 || s.inner_bytes == 0;
}

// Shape with dim `dim` moved to the front.
Shape FrontShape(const Shape& shape, int64_t dim) {
  std::vector<int64_t> dims = {shape.dim(dim)};
  for (int64_t i = 0; i < shape.rank(); ++i) {
    if (i != dim) dims.push_back(shape.dim(i));
  }
  return Shape(shape.dtype(), std::move(dims));
}

absl::Status CheckArray(const Literal& input, int64_t dim, const char* op) {
  if (input.shape().is_tuple()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": tuple operands are not supported"));
  }
  if (dim < 0 || dim >= input.shape().rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dimension ", dim, " is out of range for ", input.shape().ToString()));
  }
  return absl::OkStatus();
}

// Members of the group holding `device_id` (empty groups: every device of the job).
absl::StatusOr<int64_t> GroupSize(const transport::Communicator& comm, int64_t device_id,
                                  const ReplicaGroups& groups) {
  if (groups.empty()) return comm.device_map().num_devices();
  for (const auto& group : groups) {
    for (int64_t d : group) {
      if (d == device_id) return static_cast<int64_t>(group.size());
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("device ", device_id, " is in no replica group"));
}

// Copies `in` ([outer, dim, inner] when !to_front, [dim, outer, inner] when to_front) into `out`
// laid out the other way. Both moves are this one block permutation.
void PermuteBlocks(const std::byte* in, std::byte* out, const Split3& s, bool to_front) {
  for (int64_t a = 0; a < s.outer; ++a) {
    for (int64_t k = 0; k < s.dim; ++k) {
      const int64_t front = (k * s.outer + a) * s.inner_bytes;
      const int64_t back = (a * s.dim + k) * s.inner_bytes;
      std::memcpy(out + (to_front ? front : back), in + (to_front ? back : front),
                  static_cast<size_t>(s.inner_bytes));
    }
  }
}

// The [A, n*d, B] layout of a collective's full-size buffer against the member-major
// [n, A, d, B] one the transport works on (member k's chunk contiguous): one block of d*B
// bytes per (a, k), not one per element of the dim as a dim move would copy.
Split3 MemberChunks(const Shape& full_shape, int64_t dim, int64_t members) {
  Split3 s = SplitAround(full_shape, dim);
  s.inner_bytes *= s.dim / members;
  s.dim = members;
  return s;
}

}  // namespace

// Gives the calling device's compute slot back while it waits in the transport, and takes one
// again before it returns to its kernels (ComputeSlots: a waiting device holds no core). The
// wait for the slot is reported to the observer as "compute-slot": with more device threads
// than slots it is queueing for a core, which a timeline must not count as the transport's.
class CommunicatorCollectives::SlotYield {
 public:
  SlotYield(const CommunicatorCollectives& owner, int64_t device_id)
      : owner_(owner), device_id_(device_id) {
    if (owner_.slots_ != nullptr) owner_.slots_->Release();
  }
  ~SlotYield() {
    if (owner_.slots_ == nullptr) return;
    const auto start = std::chrono::steady_clock::now();
    owner_.slots_->Acquire();
    if (owner_.slots_->slots() > 0) owner_.Observe(device_id_, "compute-slot", start, 0);
  }
  SlotYield(const SlotYield&) = delete;
  SlotYield& operator=(const SlotYield&) = delete;

 private:
  const CommunicatorCollectives& owner_;
  int64_t device_id_;
};

Literal MoveDimToFront(const Literal& value, int64_t dim) {
  TESSEL_CHECK(!value.shape().is_tuple() && dim >= 0 && dim < value.shape().rank());
  const Split3 s = SplitAround(value.shape(), dim);
  Literal out = Literal::Uninitialized(FrontShape(value.shape(), dim));
  if (s.outer == 1 || s.inner_bytes == 0) {
    if (value.byte_size() > 0) std::memcpy(out.raw_data(), value.raw_data(), value.byte_size());
    return out;
  }
  PermuteBlocks(value.raw_data(), out.raw_data(), s, /*to_front=*/true);
  return out;
}

Literal MoveFrontDimTo(const Literal& front_first, const Shape& shape, int64_t dim) {
  TESSEL_CHECK(!shape.is_tuple() && dim >= 0 && dim < shape.rank());
  TESSEL_CHECK(front_first.num_elements() == shape.num_elements());
  const Split3 s = SplitAround(shape, dim);
  Literal out = Literal::Uninitialized(shape);
  if (s.outer == 1 || s.inner_bytes == 0) {
    if (out.byte_size() > 0) std::memcpy(out.raw_data(), front_first.raw_data(), out.byte_size());
    return out;
  }
  PermuteBlocks(front_first.raw_data(), out.raw_data(), s, /*to_front=*/false);
  return out;
}

void CommunicatorCollectives::Observe(int64_t device_id, const char* op,
                                      std::chrono::steady_clock::time_point start,
                                      int64_t input_bytes) const {
  if (observer_) observer_(device_id, op, start, std::chrono::steady_clock::now(), input_bytes);
}

absl::StatusOr<Literal> CommunicatorCollectives::AllReduce(int64_t device_id, const Literal& input,
                                                           const ReplicaGroups& groups,
                                                           ReduceKind kind) {
  const auto start = std::chrono::steady_clock::now();
  if (input.shape().is_tuple()) {
    return absl::InvalidArgumentError("all-reduce: tuple operands are not supported");
  }
  Literal out = Literal::Uninitialized(input.shape());
  {
    const SlotYield yield(*this, device_id);
    TESSEL_RETURN_IF_ERROR(comm_->AllReduce(device_id, groups, kind, input.shape().dtype(),
                                            input.raw_data(), out.raw_data(),
                                            input.num_elements()));
  }
  Observe(device_id, "all-reduce", start, input.byte_size());
  return out;
}

absl::StatusOr<Literal> CommunicatorCollectives::AllGather(int64_t device_id, const Literal& input,
                                                           const ReplicaGroups& groups,
                                                           int64_t dim) {
  const auto start = std::chrono::steady_clock::now();
  TESSEL_RETURN_IF_ERROR(CheckArray(input, dim, "all-gather"));
  TESSEL_ASSIGN_OR_RETURN(int64_t n, GroupSize(*comm_, device_id, groups));
  std::vector<int64_t> out_dims = input.shape().dims();
  out_dims[dim] *= n;
  const Shape out_shape(input.shape().dtype(), out_dims);
  if (IsLeading(input.shape(), dim)) {
    // The flat gather already is the result's layout: the transport reads the operand and
    // writes the result, no copy around it.
    Literal result = Literal::Uninitialized(out_shape);
    {
      const SlotYield yield(*this, device_id);
      TESSEL_RETURN_IF_ERROR(comm_->AllGather(device_id, groups, input.shape().dtype(),
                                              input.raw_data(), result.raw_data(),
                                              input.num_elements()));
    }
    Observe(device_id, "all-gather", start, input.byte_size());
    return result;
  }
  // The members' operands gathered whole ([n, A, d, B]) and laid out once as [A, n*d, B]:
  // the operand needs no move of its own.
  std::vector<std::byte> gathered(static_cast<size_t>(input.byte_size() * n));
  {
    const SlotYield yield(*this, device_id);
    TESSEL_RETURN_IF_ERROR(comm_->AllGather(device_id, groups, input.shape().dtype(),
                                            input.raw_data(), gathered.data(),
                                            input.num_elements()));
  }
  Literal result = Literal::Uninitialized(out_shape);
  PermuteBlocks(gathered.data(), result.raw_data(), MemberChunks(out_shape, dim, n),
                /*to_front=*/false);
  Observe(device_id, "all-gather", start, input.byte_size());
  return result;
}

absl::StatusOr<Literal> CommunicatorCollectives::ReduceScatter(int64_t device_id,
                                                               const Literal& input,
                                                               const ReplicaGroups& groups,
                                                               int64_t dim, ReduceKind kind) {
  const auto start = std::chrono::steady_clock::now();
  TESSEL_RETURN_IF_ERROR(CheckArray(input, dim, "reduce-scatter"));
  TESSEL_ASSIGN_OR_RETURN(int64_t n, GroupSize(*comm_, device_id, groups));
  if (input.shape().dim(dim) % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat("reduce-scatter: dimension ", dim, " of ",
                                                   input.shape().ToString(),
                                                   " is not divisible by the group size ", n));
  }
  std::vector<int64_t> out_dims = input.shape().dims();
  out_dims[dim] /= n;
  const Shape out_shape(input.shape().dtype(), out_dims);
  if (IsLeading(input.shape(), dim)) {
    Literal result = Literal::Uninitialized(out_shape);
    {
      const SlotYield yield(*this, device_id);
      TESSEL_RETURN_IF_ERROR(comm_->ReduceScatter(device_id, groups, kind, input.shape().dtype(),
                                                  input.raw_data(), result.raw_data(),
                                                  result.num_elements()));
    }
    Observe(device_id, "reduce-scatter", start, input.byte_size());
    return result;
  }
  // The operand laid out member-major ([n, A, d, B]); member k's result is its chunk, already
  // in the result's layout [A, d, B].
  std::vector<std::byte> chunks(static_cast<size_t>(input.byte_size()));
  PermuteBlocks(input.raw_data(), chunks.data(), MemberChunks(input.shape(), dim, n),
                /*to_front=*/true);
  Literal result = Literal::Uninitialized(out_shape);
  {
    const SlotYield yield(*this, device_id);
    TESSEL_RETURN_IF_ERROR(comm_->ReduceScatter(device_id, groups, kind, input.shape().dtype(),
                                                chunks.data(), result.raw_data(),
                                                result.num_elements()));
  }
  Observe(device_id, "reduce-scatter", start, input.byte_size());
  return result;
}

absl::StatusOr<Literal> CommunicatorCollectives::AllToAll(int64_t device_id, const Literal& input,
                                                          const ReplicaGroups& groups,
                                                          int64_t dim) {
  const auto start = std::chrono::steady_clock::now();
  TESSEL_RETURN_IF_ERROR(CheckArray(input, dim, "all-to-all"));
  TESSEL_ASSIGN_OR_RETURN(int64_t n, GroupSize(*comm_, device_id, groups));
  if (input.shape().dim(dim) % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat("all-to-all: dimension ", dim, " of ",
                                                   input.shape().ToString(),
                                                   " is not divisible by the group size ", n));
  }
  if (IsLeading(input.shape(), dim)) {
    Literal result = Literal::Uninitialized(input.shape());
    {
      const SlotYield yield(*this, device_id);
      TESSEL_RETURN_IF_ERROR(comm_->AllToAll(device_id, groups, input.shape().dtype(),
                                             input.raw_data(), result.raw_data(),
                                             input.num_elements() / n));
    }
    Observe(device_id, "all-to-all", start, input.byte_size());
    return result;
  }
  // Chunk k of the dim goes to member k and member k's chunk comes back in its place: both
  // ways one block of d*B bytes per (a, k).
  const Split3 chunk_layout = MemberChunks(input.shape(), dim, n);
  std::vector<std::byte> send(static_cast<size_t>(input.byte_size()));
  std::vector<std::byte> received(send.size());
  PermuteBlocks(input.raw_data(), send.data(), chunk_layout, /*to_front=*/true);
  {
    const SlotYield yield(*this, device_id);
    TESSEL_RETURN_IF_ERROR(comm_->AllToAll(device_id, groups, input.shape().dtype(), send.data(),
                                           received.data(), input.num_elements() / n));
  }
  Literal result = Literal::Uninitialized(input.shape());
  PermuteBlocks(received.data(), result.raw_data(), chunk_layout, /*to_front=*/false);
  Observe(device_id, "all-to-all", start, input.byte_size());
  return result;
}

absl::StatusOr<Literal> CommunicatorCollectives::CollectivePermute(
    int64_t device_id, const Literal& input,
    const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  const auto start = std::chrono::steady_clock::now();
  if (input.shape().is_tuple()) {
    return absl::InvalidArgumentError("collective-permute: tuple operands are not supported");
  }
  Literal out = Literal::Uninitialized(input.shape());
  {
    const SlotYield yield(*this, device_id);
    TESSEL_RETURN_IF_ERROR(comm_->CollectivePermute(device_id, pairs, input.shape().dtype(),
                                                    input.raw_data(), out.raw_data(),
                                                    input.num_elements()));
  }
  Observe(device_id, "collective-permute", start, input.byte_size());
  return out;
}

}  // namespace tessel::mesh
