#include "tessel/core/shape_inference.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/window.h"

namespace tessel {

namespace {

std::string Name(Opcode opcode) { return std::string(OpcodeName(opcode)); }

absl::Status Error(Opcode opcode, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(Name(opcode), ": ", why));
}

absl::Status CheckOperandCount(Opcode opcode, absl::Span<const Shape* const> shapes,
                               size_t expected) {
  if (shapes.size() != expected) {
    return Error(opcode, absl::StrCat("expected ", expected, " operand(s), got ", shapes.size()));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i]->is_tuple()) {
      return Error(opcode, absl::StrCat("operand ", i, " is a tuple ", shapes[i]->ToString(),
                                        "; expected an array"));
    }
  }
  return absl::OkStatus();
}

absl::Status NeedDeclared(Opcode opcode, const std::optional<Shape>& declared) {
  if (!declared.has_value()) return Error(opcode, "the result shape must be given");
  if (declared->is_tuple()) return Error(opcode, "the result shape must be an array");
  return absl::OkStatus();
}

// Checks that `dims` are distinct and in [0, rank).
absl::Status CheckDims(Opcode opcode, absl::string_view what, absl::Span<const int64_t> dims,
                       int64_t rank) {
  std::vector<bool> seen(rank, false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) {
      return Error(opcode, absl::StrCat(what, "={", absl::StrJoin(dims, ","), "}: dim ", d,
                                        " is out of range for rank ", rank));
    }
    if (seen[d]) {
      return Error(opcode, absl::StrCat(what, "={", absl::StrJoin(dims, ","), "}: dim ", d,
                                        " appears twice"));
    }
    seen[d] = true;
  }
  return absl::OkStatus();
}

bool IsScalarInteger(const Shape& s) {
  return !s.is_tuple() && s.rank() == 0 && (s.dtype() == DType::kS32 || s.dtype() == DType::kS64);
}

absl::StatusOr<Shape> InferDot(absl::Span<const Shape* const> shapes, const OpAttributes& attrs) {
  const Opcode op = Opcode::kDot;
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(op, shapes, 2));
  const Shape& lhs = *shapes[0];
  const Shape& rhs = *shapes[1];
  const DotDimensionNumbers& dn = attrs.dot;
  if (lhs.dtype() != rhs.dtype()) {
    return Error(op,
                 absl::StrCat("operand types differ: ", lhs.ToString(), " vs ", rhs.ToString()));
  }
  if (dn.lhs_batch_dims.size() != dn.rhs_batch_dims.size()) {
    return Error(op, "lhs_batch_dims and rhs_batch_dims have different lengths");
  }
  if (dn.lhs_contracting_dims.size() != dn.rhs_contracting_dims.size()) {
    return Error(op, "lhs_contracting_dims and rhs_contracting_dims have different lengths");
  }
  std::vector<int64_t> lhs_used = dn.lhs_batch_dims;
  lhs_used.insert(lhs_used.end(), dn.lhs_contracting_dims.begin(), dn.lhs_contracting_dims.end());
  std::vector<int64_t> rhs_used = dn.rhs_batch_dims;
  rhs_used.insert(rhs_used.end(), dn.rhs_contracting_dims.begin(), dn.rhs_contracting_dims.end());
  TESSEL_RETURN_IF_ERROR(CheckDims(op, "lhs batch and contracting dims", lhs_used, lhs.rank()));
  TESSEL_RETURN_IF_ERROR(CheckDims(op, "rhs batch and contracting dims", rhs_used, rhs.rank()));
  std::vector<int64_t> dims;
  for (size_t i = 0; i < dn.lhs_batch_dims.size(); ++i) {
    int64_t l = lhs.dim(dn.lhs_batch_dims[i]), r = rhs.dim(dn.rhs_batch_dims[i]);
    if (l != r) {
      return Error(op, absl::StrCat("lhs batch dim ", dn.lhs_batch_dims[i], " has size ", l,
                                    " but rhs batch dim ", dn.rhs_batch_dims[i], " has size ", r));
    }
    dims.push_back(l);
  }
  for (size_t i = 0; i < dn.lhs_contracting_dims.size(); ++i) {
    int64_t l = lhs.dim(dn.lhs_contracting_dims[i]), r = rhs.dim(dn.rhs_contracting_dims[i]);
    if (l != r) {
      return Error(op, absl::StrCat("lhs contracting dim ", dn.lhs_contracting_dims[i],
                                    " has size ", l, " but rhs contracting dim ",
                                    dn.rhs_contracting_dims[i], " has size ", r));
    }
  }
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (std::find(lhs_used.begin(), lhs_used.end(), d) == lhs_used.end()) {
      dims.push_back(lhs.dim(d));
    }
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (std::find(rhs_used.begin(), rhs_used.end(), d) == rhs_used.end()) {
      dims.push_back(rhs.dim(d));
    }
  }
  return Shape(lhs.dtype(), std::move(dims));
}

absl::StatusOr<Shape> InferElementwise(Opcode opcode, absl::Span<const Shape* const> shapes,
                                       const std::optional<Shape>& declared) {
  switch (opcode) {
    case Opcode::kConvert: {
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      TESSEL_RETURN_IF_ERROR(NeedDeclared(opcode, declared));
      if (declared->dims() != shapes[0]->dims()) {
        return Error(opcode,
                     absl::StrCat("result ", declared->ToString(),
                                  " has other dims than the operand ", shapes[0]->ToString()));
      }
      return *declared;
    }
    case Opcode::kBitcastConvert: {
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      TESSEL_RETURN_IF_ERROR(NeedDeclared(opcode, declared));
      const Shape& x = *shapes[0];
      if (x.dtype() == DType::kPred || declared->dtype() == DType::kPred) {
        return Error(opcode, absl::StrCat("pred has no bit pattern to reinterpret: ", x.ToString(),
                                          " -> ", declared->ToString()));
      }
      if (ByteWidth(x.dtype()) != ByteWidth(declared->dtype())) {
        // XLA's form for unequal widths adds or removes a minor dim of width ratio elements.
        return absl::UnimplementedError(
            absl::StrCat("bitcast-convert between element types of different bit widths (",
                         x.ToString(), " -> ", declared->ToString(), ") is not supported"));
      }
      if (declared->dims() != x.dims()) {
        return Error(opcode, absl::StrCat("result ", declared->ToString(),
                                          " has other dims than the operand ", x.ToString()));
      }
      return *declared;
    }
    case Opcode::kAbs:
    case Opcode::kNegate:
    case Opcode::kCopy:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      if (shapes[0]->dtype() == DType::kPred) {
        return Error(opcode, "operand must not be pred");
      }
      return *shapes[0];
    case Opcode::kExp:
    case Opcode::kLog:
    case Opcode::kTanh:
    case Opcode::kLogistic:
    case Opcode::kSqrt:
    case Opcode::kRsqrt:
    case Opcode::kSine:
    case Opcode::kCosine:
    case Opcode::kErf:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      if (!IsFloating(shapes[0]->dtype())) {
        return Error(opcode,
                     absl::StrCat("operand must be floating point, got ", shapes[0]->ToString()));
      }
      return *shapes[0];
    case Opcode::kIsFinite:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      if (!IsFloating(shapes[0]->dtype())) {
        return Error(opcode,
                     absl::StrCat("operand must be floating point, got ", shapes[0]->ToString()));
      }
      return shapes[0]->WithDType(DType::kPred);
    case Opcode::kPopcnt:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      if (!IsInteger(shapes[0]->dtype())) {
        return Error(opcode, absl::StrCat("operand must be integer, got ", shapes[0]->ToString()));
      }
      return *shapes[0];
    case Opcode::kNot:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      if (IsFloating(shapes[0]->dtype())) {
        return Error(opcode,
                     absl::StrCat("operand must be pred or integer, got ", shapes[0]->ToString()));
      }
      return *shapes[0];
    case Opcode::kSelect: {
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 3));
      const Shape& p = *shapes[0];
      if (p.dtype() != DType::kPred) {
        return Error(opcode, absl::StrCat("predicate must be pred, got ", p.ToString()));
      }
      if (*shapes[1] != *shapes[2]) {
        return Error(opcode, absl::StrCat("operand shapes differ: ", shapes[1]->ToString(), " vs ",
                                          shapes[2]->ToString()));
      }
      if (p.rank() != 0 && p.dims() != shapes[1]->dims()) {
        return Error(opcode, absl::StrCat("predicate ", p.ToString(), " must be a scalar or match ",
                                          shapes[1]->ToString()));
      }
      return *shapes[1];
    }
    case Opcode::kClamp: {
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 3));
      const Shape& x = *shapes[1];
      for (int i : {0, 2}) {
        const Shape& bound = *shapes[i];
        if (bound.dtype() != x.dtype() || (bound.rank() != 0 && bound.dims() != x.dims())) {
          return Error(opcode, absl::StrCat("bound ", bound.ToString(),
                                            " must be a scalar or match ", x.ToString()));
        }
      }
      return x;
    }
    default:
      break;
  }
  // Binary ops.
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
  if (*shapes[0] != *shapes[1]) {
    return Error(opcode, absl::StrCat("operand shapes differ: ", shapes[0]->ToString(), " vs ",
                                      shapes[1]->ToString()));
  }
  DType dtype = shapes[0]->dtype();
  const bool logical = opcode == Opcode::kAnd || opcode == Opcode::kOr || opcode == Opcode::kXor;
  if (logical && IsFloating(dtype)) {
    return Error(opcode,
                 absl::StrCat("operands must be pred or integer, got ", shapes[0]->ToString()));
  }
  if (!logical && opcode != Opcode::kCompare && dtype == DType::kPred) {
    return Error(opcode, "operands must not be pred");
  }
  const bool shift = opcode == Opcode::kShiftLeft || opcode == Opcode::kShiftRightLogical ||
                     opcode == Opcode::kShiftRightArithmetic;
  if (shift && !IsInteger(dtype)) {
    return Error(opcode, absl::StrCat("operands must be integer, got ", shapes[0]->ToString()));
  }
  if (opcode == Opcode::kAtan2 && !IsFloating(dtype)) {
    return Error(opcode,
                 absl::StrCat("operands must be floating point, got ", shapes[0]->ToString()));
  }
  if (opcode == Opcode::kCompare) return shapes[0]->WithDType(DType::kPred);
  return *shapes[0];
}

absl::StatusOr<Shape> InferCollective(Opcode opcode, absl::Span<const Shape* const> shapes,
                                      const OpAttributes& attrs) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  const Shape& x = *shapes[0];
  if (opcode == Opcode::kCollectivePermute) {
    for (const auto& [source, target] : attrs.source_target_pairs) {
      if (source < 0 || target < 0) return Error(opcode, "device ids must be >= 0");
    }
    return x;
  }
  if (attrs.replica_groups.empty()) return Error(opcode, "replica_groups must not be empty");
  size_t group_size = attrs.replica_groups[0].size();
  int64_t count = 0, max_id = -1;
  for (const auto& group : attrs.replica_groups) {
    if (group.size() != group_size || group.empty()) {
      return Error(opcode, "replica groups must be non-empty and of equal size");
    }
    for (int64_t id : group) {
      if (id < 0) return Error(opcode, absl::StrCat("device id ", id, " is negative"));
      max_id = std::max(max_id, id);
    }
    count += static_cast<int64_t>(group.size());
  }
  // Dense ids (the usual case, thousands of devices): a bitmap; sparse ones: a hash set.
  std::vector<bool> seen_dense;
  absl::flat_hash_set<int64_t> seen_sparse;
  const bool dense = max_id <= 4 * count + 1024;
  if (dense) seen_dense.assign(max_id + 1, false);
  for (const auto& group : attrs.replica_groups) {
    for (int64_t id : group) {
      const bool fresh = dense ? !seen_dense[id] : seen_sparse.insert(id).second;
      if (!fresh) return Error(opcode, absl::StrCat("device ", id, " appears in two groups"));
      if (dense) seen_dense[id] = true;
    }
  }
  if (opcode == Opcode::kAllReduce) {
    bool logical = attrs.reduce_kind == ReduceKind::kAnd || attrs.reduce_kind == ReduceKind::kOr;
    if (logical && IsFloating(x.dtype())) {
      return Error(opcode, "to_apply=and/or needs pred or integer operands");
    }
    if (!logical && x.dtype() == DType::kPred) {
      return Error(opcode, absl::StrCat("to_apply=", ReduceKindName(attrs.reduce_kind),
                                        " does not apply to pred"));
    }
    return x;
  }
  if (attrs.dimensions.size() != 1 || attrs.dimensions[0] < 0 || attrs.dimensions[0] >= x.rank()) {
    return Error(opcode, absl::StrCat("dimensions must name one dim of ", x.ToString()));
  }
  int64_t d = attrs.dimensions[0];
  int64_t n = static_cast<int64_t>(group_size);
  std::vector<int64_t> dims = x.dims();
  if (opcode == Opcode::kAllGather) {
    dims[d] *= n;
  } else if (dims[d] % n != 0) {
    return Error(opcode, absl::StrCat("dim ", d, " of ", x.ToString(),
                                      " is not divisible by the group size ", n));
  } else if (opcode == Opcode::kReduceScatter) {
    dims[d] /= n;
  }
  return Shape(x.dtype(), std::move(dims));
}

// The entry's parameter: its declared shape.
absl::StatusOr<Shape> InferParameter(Opcode opcode, absl::Span<const Shape* const> shapes,
                                     const OpAttributes& attrs,
                                     const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 0));
  if (!declared.has_value()) return Error(opcode, "the result shape must be given");
  if (attrs.parameter_number < 0) {
    return Error(opcode, absl::StrCat("parameter number ", attrs.parameter_number, " is negative"));
  }
  return *declared;
}

// A constant: its literal's shape.
absl::StatusOr<Shape> InferConstant(Opcode opcode, absl::Span<const Shape* const> shapes,
                                    const OpAttributes& attrs,
                                    const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 0));
  if (attrs.literal == nullptr) return Error(opcode, "missing literal");
  return attrs.literal->shape();
}

// iota: the declared shape, with iota_dimension in range.
absl::StatusOr<Shape> InferIota(Opcode opcode, absl::Span<const Shape* const> shapes,
                                const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 0));
  TESSEL_RETURN_IF_ERROR(NeedDeclared(opcode, declared));
  if (attrs.iota_dimension < 0 || attrs.iota_dimension >= declared->rank()) {
    return Error(opcode, absl::StrCat("iota_dimension=", attrs.iota_dimension,
                                      " is out of range for ", declared->ToString()));
  }
  if (declared->dtype() == DType::kPred) return Error(opcode, "result must not be pred");
  return *declared;
}

// rng: two scalar bounds of the declared floating-point type.
absl::StatusOr<Shape> InferRng(Opcode opcode, absl::Span<const Shape* const> shapes,
                               const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
  TESSEL_RETURN_IF_ERROR(NeedDeclared(opcode, declared));
  for (int i = 0; i < 2; ++i) {
    if (shapes[i]->rank() != 0 || shapes[i]->dtype() != declared->dtype()) {
      return Error(opcode, absl::StrCat("operand ", i, " must be a ", DTypeName(declared->dtype()),
                                        " scalar, got ", shapes[i]->ToString()));
    }
  }
  if (!IsFloating(declared->dtype())) {
    return Error(opcode, absl::StrCat("result must be floating point, got ", declared->ToString()));
  }
  return *declared;
}

// broadcast: each operand dim maps to an increasing result dim of the same size (XLA's broadcast
// with `dimensions`).
absl::StatusOr<Shape> InferBroadcast(Opcode opcode, absl::Span<const Shape* const> shapes,
                                     const OpAttributes& attrs,
                                     const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  TESSEL_RETURN_IF_ERROR(NeedDeclared(opcode, declared));
  const Shape& x = *shapes[0];
  if (static_cast<int64_t>(attrs.dimensions.size()) != x.rank()) {
    return Error(opcode,
                 absl::StrCat("dimensions={", absl::StrJoin(attrs.dimensions, ","),
                              "} must have one entry per operand dim (rank ", x.rank(), ")"));
  }
  TESSEL_RETURN_IF_ERROR(CheckDims(opcode, "dimensions", attrs.dimensions, declared->rank()));
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i > 0 && attrs.dimensions[i] <= attrs.dimensions[i - 1]) {
      return Error(opcode, "dimensions must be strictly increasing");
    }
    if (declared->dim(attrs.dimensions[i]) != x.dim(i)) {
      return Error(opcode, absl::StrCat("operand dim ", i, " (size ", x.dim(i),
                                        ") maps to result dim ", attrs.dimensions[i], " of size ",
                                        declared->dim(attrs.dimensions[i])));
    }
  }
  if (declared->dtype() != x.dtype()) return Error(opcode, "result type differs from operand");
  return *declared;
}

// reshape: the declared shape, with the operand's element count and type.
absl::StatusOr<Shape> InferReshape(Opcode opcode, absl::Span<const Shape* const> shapes,
                                   const OpAttributes& attrs,
                                   const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  TESSEL_RETURN_IF_ERROR(NeedDeclared(opcode, declared));
  if (declared->num_elements() != shapes[0]->num_elements() ||
      declared->dtype() != shapes[0]->dtype()) {
    return Error(opcode, absl::StrCat("cannot reshape ", shapes[0]->ToString(), " to ",
                                      declared->ToString()));
  }
  return *declared;
}

// transpose: the operand's dims permuted by `dimensions`.
absl::StatusOr<Shape> InferTranspose(Opcode opcode, absl::Span<const Shape* const> shapes,
                                     const OpAttributes& attrs,
                                     const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  const Shape& x = *shapes[0];
  if (static_cast<int64_t>(attrs.dimensions.size()) != x.rank()) {
    return Error(opcode, absl::StrCat("dimensions={", absl::StrJoin(attrs.dimensions, ","),
                                      "} is not a permutation of rank ", x.rank()));
  }
  TESSEL_RETURN_IF_ERROR(CheckDims(opcode, "dimensions", attrs.dimensions, x.rank()));
  std::vector<int64_t> dims;
  for (int64_t d : attrs.dimensions) dims.push_back(x.dim(d));
  return Shape(x.dtype(), std::move(dims));
}

// slice: ceil((limit - start) / stride) per dim.
absl::StatusOr<Shape> InferSlice(Opcode opcode, absl::Span<const Shape* const> shapes,
                                 const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  const Shape& x = *shapes[0];
  if (static_cast<int64_t>(attrs.slice.size()) != x.rank()) {
    return Error(opcode, absl::StrCat("slice has ", attrs.slice.size(),
                                      " entries for operand rank ", x.rank()));
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const SliceDim& s = attrs.slice[i];
    if (s.start < 0 || s.limit > x.dim(i) || s.start > s.limit || s.stride <= 0) {
      return Error(opcode, absl::StrCat("slice [", s.start, ":", s.limit, ":", s.stride,
                                        "] is invalid for dim ", i, " of size ", x.dim(i)));
    }
    // ceil((limit - start) / stride), written so that a huge stride cannot overflow.
    const int64_t span = s.limit - s.start;
    dims.push_back(span / s.stride + (span % s.stride != 0 ? 1 : 0));
  }
  return Shape(x.dtype(), std::move(dims));
}

// pad: low + high + size + (size - 1) * interior per dim; negative low/high trims.
absl::StatusOr<Shape> InferPad(Opcode opcode, absl::Span<const Shape* const> shapes,
                               const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
  const Shape& x = *shapes[0];
  if (shapes[1]->rank() != 0 || shapes[1]->dtype() != x.dtype()) {
    return Error(opcode, absl::StrCat("padding value must be a ", DTypeName(x.dtype()),
                                      " scalar, got ", shapes[1]->ToString()));
  }
  if (static_cast<int64_t>(attrs.padding.size()) != x.rank()) {
    return Error(opcode, absl::StrCat("padding has ", attrs.padding.size(),
                                      " entries for operand rank ", x.rank()));
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const PadDim& p = attrs.padding[i];
    if (p.interior < 0) return Error(opcode, "interior padding must be >= 0");
    const int64_t n = x.dim(i);
    // Padding amounts come from user text: a sum past int64 is an error, not a wrapped size.
    int64_t size = 0;
    if (__builtin_mul_overflow(std::max<int64_t>(n - 1, 0), p.interior, &size) ||
        __builtin_add_overflow(size, n, &size) || __builtin_add_overflow(size, p.low, &size) ||
        __builtin_add_overflow(size, p.high, &size)) {
      return Error(opcode, absl::StrCat("padding ", p.low, "_", p.high, "_", p.interior, " of dim ",
                                        i, " (size ", n, ") overflows int64"));
    }
    if (size < 0) {
      return Error(opcode, absl::StrCat("padding of dim ", i, " gives negative size ", size));
    }
    dims.push_back(size);
  }
  return Shape(x.dtype(), std::move(dims));
}

// concatenate: operands equal outside `dimensions[0]`, which adds up.
absl::StatusOr<Shape> InferConcatenate(Opcode opcode, absl::Span<const Shape* const> shapes,
                                       const OpAttributes& attrs,
                                       const std::optional<Shape>& declared) {
  if (shapes.empty()) return Error(opcode, "expected at least one operand");
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, shapes.size()));
  if (attrs.dimensions.size() != 1) return Error(opcode, "dimensions must hold one dim");
  const Shape& first = *shapes[0];
  int64_t d = attrs.dimensions[0];
  if (d < 0 || d >= first.rank()) {
    return Error(opcode, absl::StrCat("dimension ", d, " out of range for rank ", first.rank()));
  }
  std::vector<int64_t> dims = first.dims();
  for (size_t i = 1; i < shapes.size(); ++i) {
    const Shape& s = *shapes[i];
    bool ok = s.dtype() == first.dtype() && s.rank() == first.rank();
    for (int64_t j = 0; ok && j < s.rank(); ++j) ok = j == d || s.dim(j) == first.dim(j);
    if (!ok) {
      return Error(opcode,
                   absl::StrCat("operand ", i, " ", s.ToString(), " does not match operand 0 ",
                                first.ToString(), " outside dimension ", d));
    }
    dims[d] += s.dim(d);
  }
  return Shape(first.dtype(), std::move(dims));
}

// dynamic-slice: dynamic_slice_sizes, with one integer scalar start index per dim.
absl::StatusOr<Shape> InferDynamicSlice(Opcode opcode, absl::Span<const Shape* const> shapes,
                                        const OpAttributes& attrs,
                                        const std::optional<Shape>& declared) {
  if (shapes.empty()) return Error(opcode, "expected an operand");
  const Shape& x = *shapes[0];
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1 + x.rank()));
  if (static_cast<int64_t>(attrs.dynamic_slice_sizes.size()) != x.rank()) {
    return Error(opcode, "dynamic_slice_sizes must have one entry per operand dim");
  }
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (!IsScalarInteger(*shapes[1 + i])) {
      return Error(opcode, absl::StrCat("start index ", i, " must be an s32 or s64 scalar, got ",
                                        shapes[1 + i]->ToString()));
    }
    int64_t size = attrs.dynamic_slice_sizes[i];
    if (size < 0 || size > x.dim(i)) {
      return Error(opcode, absl::StrCat("slice size ", size, " is invalid for dim ", i, " of size ",
                                        x.dim(i)));
    }
  }
  return Shape(x.dtype(), attrs.dynamic_slice_sizes);
}

// dynamic-update-slice: the operand's shape; the update fits inside it.
absl::StatusOr<Shape> InferDynamicUpdateSlice(Opcode opcode, absl::Span<const Shape* const> shapes,
                                              const OpAttributes& attrs,
                                              const std::optional<Shape>& declared) {
  if (shapes.size() < 2) return Error(opcode, "expected an operand and an update");
  const Shape& x = *shapes[0];
  const Shape& update = *shapes[1];
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2 + x.rank()));
  if (update.dtype() != x.dtype() || update.rank() != x.rank()) {
    return Error(
        opcode, absl::StrCat("update ", update.ToString(), " does not fit operand ", x.ToString()));
  }
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (update.dim(i) > x.dim(i)) {
      return Error(opcode, absl::StrCat("update ", update.ToString(), " is larger than operand ",
                                        x.ToString()));
    }
    if (!IsScalarInteger(*shapes[2 + i])) {
      return Error(opcode, absl::StrCat("start index ", i, " must be an s32 or s64 scalar, got ",
                                        shapes[2 + i]->ToString()));
    }
  }
  return x;
}

// reduce: the operand without the reduced `dimensions`; logical reductions need pred or integers.
absl::StatusOr<Shape> InferReduce(Opcode opcode, absl::Span<const Shape* const> shapes,
                                  const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
  const Shape& x = *shapes[0];
  if (shapes[1]->rank() != 0 || shapes[1]->dtype() != x.dtype()) {
    return Error(opcode, absl::StrCat("init value must be a ", DTypeName(x.dtype()),
                                      " scalar, got ", shapes[1]->ToString()));
  }
  TESSEL_RETURN_IF_ERROR(CheckDims(opcode, "dimensions", attrs.dimensions, x.rank()));
  bool logical = attrs.reduce_kind == ReduceKind::kAnd || attrs.reduce_kind == ReduceKind::kOr;
  if (logical && IsFloating(x.dtype())) {
    return Error(opcode, absl::StrCat("to_apply=", ReduceKindName(attrs.reduce_kind),
                                      " needs pred or integer operands, got ", x.ToString()));
  }
  if (!logical && x.dtype() == DType::kPred) {
    return Error(opcode, absl::StrCat("to_apply=", ReduceKindName(attrs.reduce_kind),
                                      " does not apply to pred"));
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (std::find(attrs.dimensions.begin(), attrs.dimensions.end(), d) == attrs.dimensions.end()) {
      dims.push_back(x.dim(d));
    }
  }
  return Shape(x.dtype(), std::move(dims));
}

// Checks that `dims` are in [0, rank), distinct and (when `sorted`) ascending.
absl::Status CheckDimList(Opcode opcode, absl::string_view what, absl::Span<const int64_t> dims,
                          int64_t rank, bool sorted) {
  TESSEL_RETURN_IF_ERROR(CheckDims(opcode, what, dims, rank));
  if (sorted && !std::is_sorted(dims.begin(), dims.end())) {
    return Error(opcode, absl::StrCat(what, "={", absl::StrJoin(dims, ","), "} must be sorted"));
  }
  return absl::OkStatus();
}

bool Contains(absl::Span<const int64_t> dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

absl::Status CheckIndices(Opcode opcode, const Shape& indices, int64_t index_vector_dim) {
  if (indices.dtype() != DType::kS32 && indices.dtype() != DType::kS64) {
    return Error(opcode, absl::StrCat("indices must be s32 or s64, got ", indices.ToString()));
  }
  if (index_vector_dim < 0 || index_vector_dim > indices.rank()) {
    return Error(opcode, absl::StrCat("index_vector_dim=", index_vector_dim,
                                      " is out of range for indices ", indices.ToString()));
  }
  return absl::OkStatus();
}

// The batching dims: operand side and indices side pair up, with equal sizes.
absl::Status CheckBatchingDims(Opcode opcode, const Shape& operand, const Shape& indices,
                               int64_t index_vector_dim, absl::string_view operand_name,
                               absl::Span<const int64_t> operand_dims,
                               absl::string_view indices_name,
                               absl::Span<const int64_t> indices_dims) {
  TESSEL_RETURN_IF_ERROR(CheckDimList(opcode, operand_name, operand_dims, operand.rank(), true));
  TESSEL_RETURN_IF_ERROR(CheckDimList(opcode, indices_name, indices_dims, indices.rank(), false));
  if (operand_dims.size() != indices_dims.size()) {
    return Error(opcode,
                 absl::StrCat(operand_name, " and ", indices_name, " must have the same length"));
  }
  for (size_t i = 0; i < operand_dims.size(); ++i) {
    if (indices_dims[i] == index_vector_dim) {
      return Error(opcode, absl::StrCat(indices_name,
                                        " must not contain index_vector_dim=", index_vector_dim));
    }
    if (operand.dim(operand_dims[i]) != indices.dim(indices_dims[i])) {
      return Error(opcode,
                   absl::StrCat(operand_name, "[", i, "]: operand dim ", operand_dims[i],
                                " has size ", operand.dim(operand_dims[i]), " but indices dim ",
                                indices_dims[i], " has size ", indices.dim(indices_dims[i])));
    }
  }
  return absl::OkStatus();
}

// The index vector: its length equals the start-index map's, whose dims are distinct, in range
// and no batching dim.
absl::Status CheckIndexMap(Opcode opcode, const Shape& operand, const Shape& indices,
                           int64_t index_vector_dim, absl::string_view map_name,
                           absl::Span<const int64_t> map, absl::Span<const int64_t> batching) {
  int64_t vector_size = index_vector_dim == indices.rank() ? 1 : indices.dim(index_vector_dim);
  if (static_cast<int64_t>(map.size()) != vector_size) {
    return Error(opcode, absl::StrCat(map_name, " has ", map.size(),
                                      " entries but the index vector (indices dim ",
                                      index_vector_dim, ") has ", vector_size));
  }
  TESSEL_RETURN_IF_ERROR(CheckDimList(opcode, map_name, map, operand.rank(), false));
  for (int64_t d : map) {
    if (Contains(batching, d)) {
      return Error(opcode, absl::StrCat(map_name, " contains batching dim ", d));
    }
  }
  return absl::OkStatus();
}

// gather: batch dims from the indices, offset dims from the slice. Source: XLA operation
// semantics "Gather", ShapeInference::InferGatherShape.
absl::StatusOr<Shape> InferGather(Opcode opcode, absl::Span<const Shape* const> shapes,
                                  const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
  const Shape& operand = *shapes[0];
  const Shape& indices = *shapes[1];
  const GatherDimensionNumbers& g = attrs.gather;
  TESSEL_RETURN_IF_ERROR(CheckIndices(opcode, indices, g.index_vector_dim));
  TESSEL_RETURN_IF_ERROR(CheckBatchingDims(
      opcode, operand, indices, g.index_vector_dim, "operand_batching_dims",
      g.operand_batching_dims, "start_indices_batching_dims", g.start_indices_batching_dims));
  TESSEL_RETURN_IF_ERROR(CheckIndexMap(opcode, operand, indices, g.index_vector_dim,
                                       "start_index_map", g.start_index_map,
                                       g.operand_batching_dims));
  if (static_cast<int64_t>(g.slice_sizes.size()) != operand.rank()) {
    return Error(opcode,
                 absl::StrCat("slice_sizes={", absl::StrJoin(g.slice_sizes, ","),
                              "} must have one entry per operand dim of ", operand.ToString()));
  }
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (g.slice_sizes[d] < 0 || g.slice_sizes[d] > operand.dim(d)) {
      return Error(opcode,
                   absl::StrCat("slice_sizes[", d, "]=", g.slice_sizes[d],
                                " is out of range for operand dim of size ", operand.dim(d)));
    }
  }
  TESSEL_RETURN_IF_ERROR(
      CheckDimList(opcode, "collapsed_slice_dims", g.collapsed_slice_dims, operand.rank(), true));
  for (int64_t d : g.collapsed_slice_dims) {
    if (Contains(g.operand_batching_dims, d)) {
      return Error(opcode,
                   absl::StrCat("collapsed_slice_dims and operand_batching_dims share dim ", d));
    }
    if (g.slice_sizes[d] != 1) {
      return Error(opcode, absl::StrCat("collapsed_slice_dims: dim ", d, " has slice size ",
                                        g.slice_sizes[d], "; must be 1"));
    }
  }
  for (int64_t d : g.operand_batching_dims) {
    if (g.slice_sizes[d] != 1) {
      return Error(opcode, absl::StrCat("operand_batching_dims: dim ", d, " has slice size ",
                                        g.slice_sizes[d], "; must be 1"));
    }
  }
  const int64_t batch_rank = indices.rank() - (g.index_vector_dim < indices.rank() ? 1 : 0);
  const int64_t window_rank = operand.rank() - static_cast<int64_t>(g.collapsed_slice_dims.size()) -
                              static_cast<int64_t>(g.operand_batching_dims.size());
  if (static_cast<int64_t>(g.offset_dims.size()) != window_rank) {
    return Error(opcode, absl::StrCat("offset_dims={", absl::StrJoin(g.offset_dims, ","),
                                      "} must have ", window_rank,
                                      " entries (operand rank minus collapsed and batching dims)"));
  }
  TESSEL_RETURN_IF_ERROR(
      CheckDimList(opcode, "offset_dims", g.offset_dims, batch_rank + window_rank, true));
  GatherDimMap map = MapGatherDims(operand.rank(), indices.rank(), g);
  std::vector<int64_t> dims;
  for (int64_t o = 0; o < batch_rank + window_rank; ++o) {
    dims.push_back(map.output_to_indices[o] >= 0 ? indices.dim(map.output_to_indices[o])
                                                 : g.slice_sizes[map.output_to_operand[o]]);
  }
  return Shape(operand.dtype(), std::move(dims));
}

// scatter: the operand's shape; updates must have the shape of the matching gather's output,
// with window sizes no larger than the operand's dims. Source: XLA operation semantics
// "Scatter", ShapeInference::InferScatterShape.
absl::StatusOr<Shape> InferScatter(Opcode opcode, absl::Span<const Shape* const> shapes,
                                   const OpAttributes& attrs,
                                   const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 3));
  const Shape& operand = *shapes[0];
  const Shape& indices = *shapes[1];
  const Shape& updates = *shapes[2];
  const ScatterDimensionNumbers& s = attrs.scatter;
  if (updates.dtype() != operand.dtype()) {
    return Error(opcode, absl::StrCat("updates ", updates.ToString(), " and operand ",
                                      operand.ToString(), " differ in element type"));
  }
  bool logical = attrs.reduce_kind == ReduceKind::kAnd || attrs.reduce_kind == ReduceKind::kOr;
  if (!attrs.scatter_overwrite &&
      (logical ? IsFloating(operand.dtype()) : operand.dtype() == DType::kPred)) {
    return Error(opcode, absl::StrCat("to_apply=", ReduceKindName(attrs.reduce_kind),
                                      " does not apply to ", operand.ToString()));
  }
  TESSEL_RETURN_IF_ERROR(CheckIndices(opcode, indices, s.index_vector_dim));
  TESSEL_RETURN_IF_ERROR(CheckBatchingDims(
      opcode, operand, indices, s.index_vector_dim, "input_batching_dims", s.input_batching_dims,
      "scatter_indices_batching_dims", s.scatter_indices_batching_dims));
  TESSEL_RETURN_IF_ERROR(CheckIndexMap(opcode, operand, indices, s.index_vector_dim,
                                       "scatter_dims_to_operand_dims",
                                       s.scatter_dims_to_operand_dims, s.input_batching_dims));
  TESSEL_RETURN_IF_ERROR(
      CheckDimList(opcode, "inserted_window_dims", s.inserted_window_dims, operand.rank(), true));
  for (int64_t d : s.inserted_window_dims) {
    if (Contains(s.input_batching_dims, d)) {
      return Error(opcode,
                   absl::StrCat("inserted_window_dims and input_batching_dims share dim ", d));
    }
  }
  const int64_t batch_rank = indices.rank() - (s.index_vector_dim < indices.rank() ? 1 : 0);
  const int64_t window_rank = operand.rank() - static_cast<int64_t>(s.inserted_window_dims.size()) -
                              static_cast<int64_t>(s.input_batching_dims.size());
  if (static_cast<int64_t>(s.update_window_dims.size()) != window_rank) {
    return Error(opcode,
                 absl::StrCat("update_window_dims={", absl::StrJoin(s.update_window_dims, ","),
                              "} must have ", window_rank,
                              " entries (operand rank minus inserted and batching dims)"));
  }
  if (updates.rank() != batch_rank + window_rank) {
    return Error(opcode, absl::StrCat("updates ", updates.ToString(), " must have rank ",
                                      batch_rank + window_rank, " (", batch_rank,
                                      " scatter dims + ", window_rank, " window dims)"));
  }
  TESSEL_RETURN_IF_ERROR(
      CheckDimList(opcode, "update_window_dims", s.update_window_dims, updates.rank(), true));
  GatherDimensionNumbers g = ScatterAsGather(s, operand, updates);
  GatherDimMap map = MapGatherDims(operand.rank(), indices.rank(), g);
  for (int64_t u = 0; u < updates.rank(); ++u) {
    if (map.output_to_indices[u] >= 0) {
      if (updates.dim(u) != indices.dim(map.output_to_indices[u])) {
        return Error(opcode, absl::StrCat("updates ", updates.ToString(), ": scatter dim ", u,
                                          " must equal indices dim ", map.output_to_indices[u],
                                          " of ", indices.ToString()));
      }
    } else if (updates.dim(u) > operand.dim(map.output_to_operand[u])) {
      return Error(opcode, absl::StrCat("updates ", updates.ToString(), ": window dim ", u,
                                        " is larger than operand dim ", map.output_to_operand[u],
                                        " of ", operand.ToString()));
    }
  }
  return operand;
}

// tuple: the tuple of the operand shapes.
absl::StatusOr<Shape> InferTuple(Opcode opcode, absl::Span<const Shape* const> shapes,
                                 const OpAttributes& attrs, const std::optional<Shape>& declared) {
  std::vector<Shape> elements;
  for (const Shape* s : shapes) elements.push_back(*s);
  return Shape::Tuple(std::move(elements));
}

// get-tuple-element: element `index` of a tuple operand.
absl::StatusOr<Shape> InferGetTupleElement(Opcode opcode, absl::Span<const Shape* const> shapes,
                                           const OpAttributes& attrs,
                                           const std::optional<Shape>& declared) {
  if (shapes.size() != 1 || !shapes[0]->is_tuple()) {
    return Error(opcode, "expected one tuple operand");
  }
  int64_t n = static_cast<int64_t>(shapes[0]->tuple_shapes().size());
  if (attrs.tuple_index < 0 || attrs.tuple_index >= n) {
    return Error(opcode, absl::StrCat("index=", attrs.tuple_index, " is out of range for ",
                                      shapes[0]->ToString()));
  }
  return shapes[0]->tuple_shapes()[attrs.tuple_index];
}

// The one-parameter signature of called computation `comp` (what `role` calls it, e.g.
// "body"): its only parameter must have `param`'s shape.
absl::Status CheckCalledParameter(Opcode opcode, const Graph& comp, const std::string& role,
                                  const Shape& param) {
  std::vector<Node*> params = comp.parameters();
  if (params.size() != 1) {
    return Error(opcode, absl::StrCat(role, " %", comp.name(), " must take one parameter, takes ",
                                      params.size()));
  }
  if (params[0]->shape() != param) {
    return Error(opcode,
                 absl::StrCat(role, " %", comp.name(), " takes ", params[0]->shape().ToString(),
                              " but is passed ", param.ToString()));
  }
  if (comp.root() == nullptr) {
    return Error(opcode, absl::StrCat(role, " %", comp.name(), " has no root"));
  }
  return absl::OkStatus();
}

// while: condition and body take the loop state (init's shape); the body returns it and the
// condition returns pred[]. Source: XLA ShapeInference::InferWhileShape.
absl::StatusOr<Shape> InferWhile(Opcode opcode, absl::Span<const Shape* const> shapes,
                                 const OpAttributes& attrs) {
  if (shapes.size() != 1) {
    return Error(opcode,
                 absl::StrCat("expected 1 operand (the initial loop state), got ", shapes.size()));
  }
  if (attrs.called_computations.size() != 2 || attrs.called_computations[0] == nullptr ||
      attrs.called_computations[1] == nullptr) {
    return Error(opcode, "needs a condition and a body computation");
  }
  const Graph& condition = *attrs.called_computations[0];
  const Graph& body = *attrs.called_computations[1];
  const Shape& state = *shapes[0];
  TESSEL_RETURN_IF_ERROR(CheckCalledParameter(opcode, condition, "condition", state));
  TESSEL_RETURN_IF_ERROR(CheckCalledParameter(opcode, body, "body", state));
  if (body.root()->shape() != state) {
    return Error(opcode,
                 absl::StrCat("body %", body.name(), " returns ", body.root()->shape().ToString(),
                              " but the loop state (init) is ", state.ToString()));
  }
  if (condition.root()->shape() != Shape(DType::kPred, {})) {
    return Error(opcode, absl::StrCat("condition %", condition.name(), " returns ",
                                      condition.root()->shape().ToString(), ", not pred[]"));
  }
  return state;
}

// conditional: operand 0 is pred[] (two branches: true, false) or s32[] (N branches); branch k
// takes operand k+1 and every branch returns the result's shape. Source: XLA
// ShapeInference::InferConditionalShape.
absl::StatusOr<Shape> InferConditional(Opcode opcode, absl::Span<const Shape* const> shapes,
                                       const OpAttributes& attrs) {
  const auto& branches = attrs.called_computations;
  if (branches.empty()) return Error(opcode, "needs at least one branch computation");
  if (shapes.size() != branches.size() + 1) {
    return Error(opcode, absl::StrCat("has ", branches.size(), " branch(es), so it takes ",
                                      branches.size() + 1, " operands, got ", shapes.size()));
  }
  const Shape& selector = *shapes[0];
  const bool is_pred = selector == Shape(DType::kPred, {});
  if (!is_pred && selector != Shape(DType::kS32, {})) {
    return Error(opcode,
                 absl::StrCat("operand 0 must be pred[] or s32[], got ", selector.ToString()));
  }
  if (is_pred && branches.size() != 2) {
    return Error(opcode, absl::StrCat("a pred[] selector needs 2 branches, got ", branches.size()));
  }
  std::optional<Shape> result;
  for (size_t k = 0; k < branches.size(); ++k) {
    if (branches[k] == nullptr) return Error(opcode, absl::StrCat("branch ", k, " is missing"));
    const Graph& branch = *branches[k];
    TESSEL_RETURN_IF_ERROR(
        CheckCalledParameter(opcode, branch, absl::StrCat("branch ", k), *shapes[k + 1]));
    if (result.has_value() && branch.root()->shape() != *result) {
      return Error(opcode, absl::StrCat("branch ", k, " %", branch.name(), " returns ",
                                        branch.root()->shape().ToString(), " but branch 0 %",
                                        branches[0]->name(), " returns ", result->ToString()));
    }
    result = branch.root()->shape();
  }
  return *result;
}

// partition-id: an s32 scalar.
absl::StatusOr<Shape> InferPartitionId(Opcode opcode, absl::Span<const Shape* const> shapes,
                                       const OpAttributes& attrs,
                                       const std::optional<Shape>& declared) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 0));
  return Shape(DType::kS32, {});
}

// custom-call (SPMDFullToShardShape / SPMDShardToFullShape): the result shape is declared, since
// it depends on the sharding; it keeps the operand's element type and rank, and a shard is never
// larger than the whole value (each dim <= the global dim; 0-sized dims stay 0).
absl::StatusOr<Shape> InferCustomCall(Opcode opcode, absl::Span<const Shape* const> shapes,
                                      const OpAttributes& attrs,
                                      const std::optional<Shape>& declared) {
  const std::string& target = attrs.custom_call_target;
  const bool to_shard = target == kFullToShardShapeTarget;
  if (!to_shard && target != kShardToFullShapeTarget) {
    return Error(opcode,
                 absl::StrCat("custom_call_target \"", target, "\" is not supported (supported: \"",
                              std::string(kFullToShardShapeTarget), "\", \"",
                              std::string(kShardToFullShapeTarget), "\")"));
  }
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  const Shape& x = *shapes[0];
  if (!declared.has_value()) {
    return Error(opcode,
                 absl::StrCat(target, " needs its result shape (it depends on the sharding)"));
  }
  if (x.is_tuple() || declared->is_tuple() || declared->dtype() != x.dtype() ||
      declared->rank() != x.rank()) {
    return Error(
        opcode, absl::StrCat(target, ": result ", declared->ToString(),
                             " must have the element type and rank of the operand ", x.ToString()));
  }
  const Shape& global = to_shard ? x : *declared;
  const Shape& local = to_shard ? *declared : x;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (local.dim(d) > global.dim(d) || (local.dim(d) == 0) != (global.dim(d) == 0)) {
      return Error(opcode, absl::StrCat(target, ": the shard ", local.ToString(),
                                        " does not fit the global shape ", global.ToString(),
                                        " in dim ", d));
    }
  }
  return *declared;
}

// sort(k, v...): operands of one set of dims (any element types); dimensions={d} in range; the
// result is the operand's shape, or the tuple of all operand shapes when there are several.
// Source: xla::ShapeInference::InferVariadicOpShape (kSort).
absl::StatusOr<Shape> InferSort(Opcode opcode, absl::Span<const Shape* const> shapes,
                                const OpAttributes& attrs) {
  if (shapes.empty()) return Error(opcode, "needs at least one operand");
  const Shape& keys = *shapes[0];
  std::vector<Shape> results;
  for (const Shape* s : shapes) {
    if (s->is_tuple() || s->dims() != keys.dims()) {
      return Error(opcode, absl::StrCat("operands must be arrays of the dims of ", keys.ToString(),
                                        ", got ", s->ToString()));
    }
    results.push_back(*s);
  }
  if (attrs.dimensions.size() != 1 || attrs.dimensions[0] < 0 ||
      attrs.dimensions[0] >= std::max<int64_t>(keys.rank(), 1)) {
    return Error(opcode, absl::StrCat("dimensions must name one dim of ", keys.ToString()));
  }
  if (keys.rank() == 0) return Error(opcode, "cannot sort a scalar");
  if (results.size() == 1) return results[0];
  return Shape::Tuple(std::move(results));
}

// topk(x), k=K: x of rank >= 1, 0 <= K <= its last dim; result (x's type with last dim K,
// s32 of the same dims). Source: XLA TopK (xla::ShapeInference::InferTopKShape).
absl::StatusOr<Shape> InferTopK(Opcode opcode, absl::Span<const Shape* const> shapes,
                                const OpAttributes& attrs) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  const Shape& x = *shapes[0];
  if (x.is_tuple() || x.rank() == 0 || x.dtype() == DType::kPred) {
    return Error(opcode,
                 absl::StrCat("operand must be a numeric array of rank >= 1, got ", x.ToString()));
  }
  if (attrs.topk_k < 0 || attrs.topk_k > x.dim(x.rank() - 1)) {
    return Error(opcode, absl::StrCat("k=", attrs.topk_k, " is outside [0, ", x.dim(x.rank() - 1),
                                      "] for ", x.ToString()));
  }
  std::vector<int64_t> dims = x.dims();
  dims.back() = attrs.topk_k;
  return Shape::Tuple({Shape(x.dtype(), dims), Shape(DType::kS32, dims)});
}

// XLA ShapeInference::InferReducePrecisionShape: a floating operand, exponent_bits >= 1,
// mantissa_bits >= 0.
absl::StatusOr<Shape> InferReducePrecision(Opcode opcode, absl::Span<const Shape* const> shapes,
                                           const OpAttributes& attrs) {
  TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
  if (!IsFloating(shapes[0]->dtype())) {
    return Error(opcode,
                 absl::StrCat("operand must be floating point, got ", shapes[0]->ToString()));
  }
  if (attrs.exponent_bits < 1 || attrs.mantissa_bits < 0) {
    return Error(opcode, absl::StrCat("needs exponent_bits >= 1 and mantissa_bits >= 0, got ",
                                      attrs.exponent_bits, " and ", attrs.mantissa_bits));
  }
  return *shapes[0];
}

absl::StatusOr<Shape> InferRule(Opcode opcode, absl::Span<const Shape* const> shapes,
                                const OpAttributes& attrs, const std::optional<Shape>& declared) {
  if (opcode == Opcode::kReducePrecision) return InferReducePrecision(opcode, shapes, attrs);
  if (IsElementwise(opcode)) return InferElementwise(opcode, shapes, declared);
  switch (opcode) {
    case Opcode::kParameter:
      return InferParameter(opcode, shapes, attrs, declared);
    case Opcode::kConstant:
      return InferConstant(opcode, shapes, attrs, declared);
    case Opcode::kIota:
      return InferIota(opcode, shapes, attrs, declared);
    case Opcode::kRng:
      return InferRng(opcode, shapes, attrs, declared);
    case Opcode::kBroadcast:
      return InferBroadcast(opcode, shapes, attrs, declared);
    case Opcode::kReshape:
      return InferReshape(opcode, shapes, attrs, declared);
    case Opcode::kTranspose:
      return InferTranspose(opcode, shapes, attrs, declared);
    case Opcode::kSlice:
      return InferSlice(opcode, shapes, attrs, declared);
    case Opcode::kPad:
      return InferPad(opcode, shapes, attrs, declared);
    case Opcode::kConcatenate:
      return InferConcatenate(opcode, shapes, attrs, declared);
    case Opcode::kDynamicSlice:
      return InferDynamicSlice(opcode, shapes, attrs, declared);
    case Opcode::kDynamicUpdateSlice:
      return InferDynamicUpdateSlice(opcode, shapes, attrs, declared);
    case Opcode::kGather:
      return InferGather(opcode, shapes, attrs, declared);
    case Opcode::kScatter:
      return InferScatter(opcode, shapes, attrs, declared);
    case Opcode::kReduce:
      return InferReduce(opcode, shapes, attrs, declared);
    case Opcode::kDot:
      return InferDot(shapes, attrs);
    case Opcode::kConvolution:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
      return InferConvolutionShape(*shapes[0], *shapes[1], attrs, shapes[0]->dtype());
    case Opcode::kReduceWindow:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 2));
      return InferReduceWindowShape(*shapes[0], *shapes[1], attrs);
    case Opcode::kSelectAndScatter:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 3));
      return InferSelectAndScatterShape(*shapes[0], *shapes[1], *shapes[2], attrs);
    case Opcode::kReverse:
      TESSEL_RETURN_IF_ERROR(CheckOperandCount(opcode, shapes, 1));
      return InferReverseShape(*shapes[0], attrs);
    case Opcode::kTuple:
      return InferTuple(opcode, shapes, attrs, declared);
    case Opcode::kGetTupleElement:
      return InferGetTupleElement(opcode, shapes, attrs, declared);
    case Opcode::kWhile:
      return InferWhile(opcode, shapes, attrs);
    case Opcode::kConditional:
      return InferConditional(opcode, shapes, attrs);
    case Opcode::kPartitionId:
      return InferPartitionId(opcode, shapes, attrs, declared);
    case Opcode::kAllReduce:
    case Opcode::kAllGather:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll:
    case Opcode::kCollectivePermute:
      return InferCollective(opcode, shapes, attrs);
    case Opcode::kCustomCall:
      return InferCustomCall(opcode, shapes, attrs, declared);
    case Opcode::kSort:
      return InferSort(opcode, shapes, attrs);
    case Opcode::kTopK:
      return InferTopK(opcode, shapes, attrs);
    default:
      break;
  }
  return Error(opcode, "no shape rule");
}

}  // namespace

GatherDimMap MapGatherDims(int64_t operand_rank, int64_t indices_rank,
                           const GatherDimensionNumbers& dnums) {
  const int64_t batch_rank = indices_rank - (dnums.index_vector_dim < indices_rank ? 1 : 0);
  const int64_t output_rank = batch_rank + static_cast<int64_t>(dnums.offset_dims.size());
  GatherDimMap map;
  map.output_to_indices.assign(output_rank, -1);
  map.output_to_operand.assign(output_rank, -1);
  map.indices_to_output.assign(indices_rank, -1);
  map.operand_to_output.assign(operand_rank, -1);
  int64_t next_indices_dim = 0;
  int64_t next_operand_dim = 0;
  for (int64_t o = 0; o < output_rank; ++o) {
    if (Contains(dnums.offset_dims, o)) {
      while (Contains(dnums.collapsed_slice_dims, next_operand_dim) ||
             Contains(dnums.operand_batching_dims, next_operand_dim)) {
        ++next_operand_dim;
      }
      map.output_to_operand[o] = next_operand_dim;
      map.operand_to_output[next_operand_dim++] = o;
    } else {
      if (next_indices_dim == dnums.index_vector_dim) ++next_indices_dim;
      map.output_to_indices[o] = next_indices_dim;
      map.indices_to_output[next_indices_dim++] = o;
    }
  }
  return map;
}

GatherDimensionNumbers ScatterAsGather(const ScatterDimensionNumbers& dnums, const Shape& operand,
                                       const Shape& updates) {
  GatherDimensionNumbers g;
  g.offset_dims = dnums.update_window_dims;
  g.collapsed_slice_dims = dnums.inserted_window_dims;
  g.start_index_map = dnums.scatter_dims_to_operand_dims;
  g.operand_batching_dims = dnums.input_batching_dims;
  g.start_indices_batching_dims = dnums.scatter_indices_batching_dims;
  g.index_vector_dim = dnums.index_vector_dim;
  g.indices_are_sorted = dnums.indices_are_sorted;
  g.slice_sizes.assign(operand.rank(), 1);
  size_t window = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (Contains(dnums.inserted_window_dims, d) || Contains(dnums.input_batching_dims, d)) continue;
    if (window < dnums.update_window_dims.size()) {
      g.slice_sizes[d] = updates.dim(dnums.update_window_dims[window++]);
    }
  }
  return g;
}

ScatterDimensionNumbers GatherAsScatter(const GatherDimensionNumbers& dnums) {
  ScatterDimensionNumbers s;
  s.update_window_dims = dnums.offset_dims;
  s.inserted_window_dims = dnums.collapsed_slice_dims;
  s.scatter_dims_to_operand_dims = dnums.start_index_map;
  s.input_batching_dims = dnums.operand_batching_dims;
  s.scatter_indices_batching_dims = dnums.start_indices_batching_dims;
  s.index_vector_dim = dnums.index_vector_dim;
  s.indices_are_sorted = dnums.indices_are_sorted;
  return s;
}

absl::StatusOr<Shape> InferShape(Opcode opcode, absl::Span<const Shape* const> operand_shapes,
                                 const OpAttributes& attrs, const std::optional<Shape>& declared) {
  TESSEL_ASSIGN_OR_RETURN(Shape shape, InferRule(opcode, operand_shapes, attrs, declared));
  if (absl::StatusOr<int64_t> bytes = CheckedByteSize(shape); !bytes.ok()) {
    return Error(opcode, bytes.status().message());
  }
  if (declared.has_value() && *declared != shape) {
    return Error(opcode, absl::StrCat("declared shape ", declared->ToString(),
                                      " differs from the inferred ", shape.ToString()));
  }
  return shape;
}

}  // namespace tessel
