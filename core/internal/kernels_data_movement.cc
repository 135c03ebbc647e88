// Data movement kernels: iota, broadcast, reshape, transpose, slice, pad, concatenate,
// dynamic-slice, dynamic-update-slice. All but iota reduce to StridedCopy, which moves
// elements by their byte width and so serves every dtype.
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"

namespace tessel::internal {
namespace {

using DimVector = absl::InlinedVector<int64_t, 8>;

// Calls fn.template operator()<E>() with an unsigned integer type E of `bytes` bytes.
template <typename Fn>
void VisitWidth(int64_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    case 4:
      return fn.template operator()<uint32_t>();
    case 8:
      return fn.template operator()<uint64_t>();
  }
  TESSEL_CHECK(false);
}

// A copy box with dims of size 1 dropped and dims merged where both sides are contiguous
// across them, so that e.g. a slice of whole rows becomes one long row.
struct CopyBox {
  DimVector dims;
  DimVector src_strides;
  DimVector dst_strides;
};

CopyBox Simplify(absl::Span<const int64_t> dims, absl::Span<const int64_t> src_strides,
                 absl::Span<const int64_t> dst_strides) {
  CopyBox box;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (!box.dims.empty() && box.src_strides.back() == src_strides[d] * dims[d] &&
        box.dst_strides.back() == dst_strides[d] * dims[d]) {
      box.dims.back() *= dims[d];
      box.src_strides.back() = src_strides[d];
      box.dst_strides.back() = dst_strides[d];
      continue;
    }
    box.dims.push_back(dims[d]);
    box.src_strides.push_back(src_strides[d]);
    box.dst_strides.push_back(dst_strides[d]);
  }
  return box;
}

template <typename E>
void StridedCopyTyped(const KernelContext& ctx, const CopyBox& box, const E* src, E* dst) {
  const int64_t rank = static_cast<int64_t>(box.dims.size());
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t n = 1;
  for (int64_t d : box.dims) n *= d;
  if (n == 0) return;
  const int64_t inner = box.dims[rank - 1];
  const int64_t src_inner = box.src_strides[rank - 1];
  const int64_t dst_inner = box.dst_strides[rank - 1];
  const int64_t rows = n / inner;
  const int64_t grain_rows = std::max<int64_t>(1, kElementwiseGrain / inner);
  ParallelFor(ctx, rows, grain_rows, [&](int64_t begin, int64_t end) {
    // Multi-index of row `begin` over dims [0, rank - 1).
    DimVector index(rank - 1, 0);
    int64_t src_offset = 0, dst_offset = 0;
    int64_t rest = begin;
    for (int64_t d = rank - 2; d >= 0; --d) {
      index[d] = rest % box.dims[d];
      rest /= box.dims[d];
      src_offset += index[d] * box.src_strides[d];
      dst_offset += index[d] * box.dst_strides[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      const E* s = src + src_offset;
      E* t = dst + dst_offset;
      if (src_inner == 1 && dst_inner == 1) {
        std::memcpy(t, s, static_cast<size_t>(inner) * sizeof(E));
      } else if (src_inner == 0) {
        const E v = s[0];
        for (int64_t i = 0; i < inner; ++i) t[i * dst_inner] = v;
      } else {
        for (int64_t i = 0; i < inner; ++i) t[i * dst_inner] = s[i * src_inner];
      }
      for (int64_t d = rank - 2; d >= 0; --d) {
        src_offset += box.src_strides[d];
        dst_offset += box.dst_strides[d];
        if (++index[d] < box.dims[d]) break;
        src_offset -= box.dims[d] * box.src_strides[d];
        dst_offset -= box.dims[d] * box.dst_strides[d];
        index[d] = 0;
      }
    }
  });
}

// Fills `out` with the scalar `value` (same dtype).
void Fill(const KernelContext& ctx, const Literal& value, Literal& out) {
  const int64_t n = out.num_elements();
  VisitWidth(ByteWidth(out.shape().dtype()), [&]<typename E>() {
    E v;
    std::memcpy(&v, value.raw_data(), sizeof(E));
    E* dst = reinterpret_cast<E*>(out.raw_data());
    ParallelFor(ctx, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = v;
    });
  });
}

// Reads a dynamic start index. Errors: kInvalidArgument if it is not an integer scalar.
absl::StatusOr<int64_t> ReadIndex(const Literal& index, Opcode opcode, int64_t dim) {
  const Shape& s = index.shape();
  if (s.is_tuple() || s.rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(OpcodeName(opcode), ": start index ", dim,
                                                   " must be a scalar, got ", s.ToString()));
  }
  switch (s.dtype()) {
    case DType::kS32:
      return index.data<int32_t>()[0];
    case DType::kS64:
      return index.data<int64_t>()[0];
    case DType::kU8:
      return index.data<uint8_t>()[0];
    case DType::kU32:
      return index.data<uint32_t>()[0];
    case DType::kU64:
      // Clamped by the caller like any start index; the cast keeps huge values large.
      return static_cast<int64_t>(std::min<uint64_t>(index.data<uint64_t>()[0], INT64_MAX));
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(OpcodeName(opcode), ": start index ", dim,
                                                 " must be an integer scalar, got ", s.ToString()));
}

// XLA: each start is clamped to [0, dim - size] so the window fits.
absl::StatusOr<DimVector> ClampedStarts(Opcode opcode, absl::Span<const Literal* const> starts,
                                        const Shape& operand, absl::Span<const int64_t> sizes) {
  DimVector result;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    TESSEL_ASSIGN_OR_RETURN(int64_t start, ReadIndex(*starts[d], opcode, d));
    result.push_back(std::clamp<int64_t>(start, 0, operand.dim(d) - sizes[d]));
  }
  return result;
}

}  // namespace

void StridedCopy(const KernelContext& ctx, absl::Span<const int64_t> dims, const Literal& src,
                 int64_t src_offset, absl::Span<const int64_t> src_strides, Literal& dst,
                 int64_t dst_offset, absl::Span<const int64_t> dst_strides) {
  TESSEL_CHECK(src.shape().dtype() == dst.shape().dtype());
  TESSEL_CHECK(dims.size() == src_strides.size() && dims.size() == dst_strides.size());
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  CopyBox box = Simplify(dims, src_strides, dst_strides);
  VisitWidth(ByteWidth(dst.shape().dtype()), [&]<typename E>() {
    const E* s = reinterpret_cast<const E*>(src.raw_data()) + src_offset;
    E* t = reinterpret_cast<E*>(dst.raw_data()) + dst_offset;
    StridedCopyTyped<E>(ctx, box, s, t);
  });
}

Literal Iota(const KernelContext& ctx, const Shape& shape, int64_t iota_dimension) {
  Literal out = Literal::Uninitialized(shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < iota_dimension; ++d) outer *= shape.dim(d);
  for (int64_t d = iota_dimension + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  const int64_t size = shape.dim(iota_dimension);
  VisitDType(shape.dtype(), [&]<typename T>() {
    T* dst = out.data<T>().data();
    const int64_t rows = outer * size;
    ParallelFor(ctx, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
                [&](int64_t begin, int64_t end) {
                  // The index advances with the row (one division per chunk, not per row: an
                  // iota over the last dim has one element per row).
                  int64_t k = begin % size;
                  for (int64_t row = begin; row < end; ++row) {
                    T v = StoreAs<T>(static_cast<ComputeT<T>>(k));
                    if (inner == 1) {
                      dst[row] = v;
                    } else {
                      std::fill(dst + row * inner, dst + (row + 1) * inner, v);
                    }
                    if (++k == size) k = 0;
                  }
                });
  });
  return out;
}

Literal Broadcast(const KernelContext& ctx, const Literal& x, absl::Span<const int64_t> dimensions,
                  const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  std::vector<int64_t> x_strides = x.shape().strides();
  DimVector src_strides(shape.rank(), 0);
  for (size_t i = 0; i < dimensions.size(); ++i) src_strides[dimensions[i]] = x_strides[i];
  StridedCopy(ctx, shape.dims(), x, 0, src_strides, out, 0, shape.strides());
  return out;
}

Literal Reshape(const Literal& x, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  if (x.byte_size() > 0) {
    std::memcpy(out.raw_data(), x.raw_data(), static_cast<size_t>(x.byte_size()));
  }
  return out;
}

Literal Transpose(const KernelContext& ctx, const Literal& x,
                  absl::Span<const int64_t> permutation) {
  const Shape& in = x.shape();
  std::vector<int64_t> dims;
  DimVector src_strides;
  std::vector<int64_t> in_strides = in.strides();
  for (int64_t d : permutation) {
    dims.push_back(in.dim(d));
    src_strides.push_back(in_strides[d]);
  }
  Shape shape(in.dtype(), dims);
  Literal out = Literal::Uninitialized(shape);
  StridedCopy(ctx, dims, x, 0, src_strides, out, 0, shape.strides());
  return out;
}

Literal Slice(const KernelContext& ctx, const Literal& x, absl::Span<const SliceDim> slice,
              const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  std::vector<int64_t> in_strides = x.shape().strides();
  DimVector src_strides;
  int64_t src_offset = 0;
  for (size_t d = 0; d < slice.size(); ++d) {
    src_offset += slice[d].start * in_strides[d];
    src_strides.push_back(slice[d].stride * in_strides[d]);
  }
  StridedCopy(ctx, shape.dims(), x, src_offset, src_strides, out, 0, shape.strides());
  return out;
}

Literal Pad(const KernelContext& ctx, const Literal& x, const Literal& value,
            absl::Span<const PadDim> padding, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  Fill(ctx, value, out);
  std::vector<int64_t> in_strides = x.shape().strides();
  std::vector<int64_t> out_strides = shape.strides();
  DimVector dims, src_strides, dst_strides;
  int64_t src_offset = 0, dst_offset = 0;
  for (int64_t d = 0; d < x.shape().rank(); ++d) {
    const PadDim& p = padding[d];
    const int64_t step = p.interior + 1;
    // Operand index i lands at low + i * step; keep the i that land inside [0, out_dim).
    int64_t first = p.low >= 0 ? 0 : (-p.low + step - 1) / step;
    int64_t last_pos = shape.dim(d) - 1 - p.low;  // largest i * step allowed
    int64_t end = last_pos < 0 ? 0 : std::min(x.shape().dim(d), last_pos / step + 1);
    int64_t count = std::max<int64_t>(0, end - first);
    if (count == 0) return out;
    dims.push_back(count);
    src_offset += first * in_strides[d];
    src_strides.push_back(in_strides[d]);
    dst_offset += (p.low + first * step) * out_strides[d];
    dst_strides.push_back(step * out_strides[d]);
  }
  StridedCopy(ctx, dims, x, src_offset, src_strides, out, dst_offset, dst_strides);
  return out;
}

Literal Concatenate(const KernelContext& ctx, absl::Span<const Literal* const> operands,
                    int64_t dimension, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  std::vector<int64_t> out_strides = shape.strides();
  int64_t position = 0;
  for (const Literal* operand : operands) {
    StridedCopy(ctx, operand->shape().dims(), *operand, 0, operand->shape().strides(), out,
                position * out_strides[dimension], out_strides);
    position += operand->shape().dim(dimension);
  }
  return out;
}

absl::StatusOr<Literal> DynamicSlice(const KernelContext& ctx, const Literal& x,
                                     absl::Span<const Literal* const> start_indices,
                                     absl::Span<const int64_t> sizes, const Shape& shape) {
  TESSEL_ASSIGN_OR_RETURN(DimVector starts,
                          ClampedStarts(Opcode::kDynamicSlice, start_indices, x.shape(), sizes));
  std::vector<int64_t> in_strides = x.shape().strides();
  int64_t src_offset = 0;
  for (size_t d = 0; d < starts.size(); ++d) src_offset += starts[d] * in_strides[d];
  Literal out = Literal::Uninitialized(shape);
  StridedCopy(ctx, shape.dims(), x, src_offset, in_strides, out, 0, shape.strides());
  return out;
}

absl::StatusOr<Literal> DynamicUpdateSlice(const KernelContext& ctx, const Literal& x,
                                           const Literal& update,
                                           absl::Span<const Literal* const> start_indices) {
  TESSEL_ASSIGN_OR_RETURN(
      DimVector starts,
      ClampedStarts(Opcode::kDynamicUpdateSlice, start_indices, x.shape(), update.shape().dims()));
  Literal out = Literal::Uninitialized(x.shape());
  if (x.byte_size() > 0) {
    std::memcpy(out.raw_data(), x.raw_data(), static_cast<size_t>(x.byte_size()));
  }
  std::vector<int64_t> out_strides = x.shape().strides();
  int64_t dst_offset = 0;
  for (size_t d = 0; d < starts.size(); ++d) dst_offset += starts[d] * out_strides[d];
  StridedCopy(ctx, update.shape().dims(), update, 0, update.shape().strides(), out, dst_offset,
              out_strides);
  return out;
}

}  // namespace tessel::internal
