#include "tessel/partitioner/internal/halo.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

// What the targets need from one hop: the union of their ranges in the source's local buffer.
struct HopNeed {
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();
  std::vector<bool> targets;
};

absl::Status CheckWindow(const spmd::Sharding& s, const Shape& global, const HaloWindow& w) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("halo exchange along dim ", w.dim, " of ",
                                                   global.ToString(), " under ", s.ToString(), ": ",
                                                   why));
  };
  if (w.dim < 0 || w.dim >= global.rank()) return bad("no such dim");
  const int64_t tiles = s.num_tiles(w.dim);
  if (tiles <= 1) return bad("the dim is not tiled");
  if (static_cast<int64_t>(w.start.size()) != tiles) {
    return bad(absl::StrCat("expected ", tiles, " window starts, got ", w.start.size()));
  }
  if (w.size < 1) return bad(absl::StrCat("window size must be >= 1, got ", w.size));
  if (w.valid_begin < 0 || w.valid_begin >= w.valid_end || w.valid_end > global.dim(w.dim)) {
    return bad(absl::StrCat("valid range [", w.valid_begin, ", ", w.valid_end,
                            ") is empty or outside [0, ", global.dim(w.dim), ")"));
  }
  return absl::OkStatus();
}

// Plans one dim. `extents` holds the current local extent of every dim (earlier dims already at
// their window size); the bytes of the pieces that travel are added to `bytes`.
HaloDimPlan PlanDim(const spmd::Sharding& s, const Shape& global, const HaloWindow& w,
                    int64_t num_devices, const std::vector<int64_t>& extents, int64_t& bytes) {
  const int64_t tiles = s.num_tiles(w.dim);
  const int64_t shard = (global.dim(w.dim) + tiles - 1) / tiles;
  HaloDimPlan plan;
  plan.window = w;
  plan.shard_size = shard;
  // Clipping each window to the valid range first is what keeps a far-reaching window (a pad
  // of 100 on a dim of 8) from asking for hops to tiles that do not exist.
  std::map<int64_t, HopNeed> needs;
  std::vector<bool> has_need(tiles, false);
  for (int64_t k = 0; k < tiles; ++k) {
    const int64_t a = std::max(w.start[k], w.valid_begin);
    const int64_t b = std::min(w.start[k] + w.size, w.valid_end);
    plan.needs_mask =
        plan.needs_mask || w.start[k] < w.valid_begin || w.start[k] + w.size > w.valid_end;
    if (a >= b) continue;
    has_need[k] = true;
    for (int64_t j = a / shard; j <= (b - 1) / shard; ++j) {
      HopNeed& need = needs[j - k];
      need.lo = std::min(need.lo, std::max(a - j * shard, int64_t{0}));
      need.hi = std::max(need.hi, std::min(b - j * shard, shard));
      need.targets.resize(tiles, false);
      need.targets[k] = true;
    }
  }
  plan.offset_by_device.assign(num_devices, 0);
  if (needs.empty()) {
    // Nothing valid anywhere: the device's own shard, padded to the window, stands in for the
    // window; every element is out of range.
    plan.pieces.push_back(HaloPiece{0, 0, shard, {}});
    plan.pad_high = std::max(int64_t{0}, w.size - shard);
    return plan;
  }
  const int64_t hop_min = needs.begin()->first, hop_max = needs.rbegin()->first;
  // Inner hops send whole shards and the outer ones end at the shard's edge, so the pieces tile
  // one contiguous global range: [(k + hop_min) * shard + first begin, ...).
  const spmd::DeviceArray& ta = s.tile_assignment();
  int64_t total = 0;
  for (int64_t h = hop_min; h <= hop_max; ++h) {
    auto it = needs.find(h);
    HaloPiece piece{h, 0, shard, {}};
    if (h == hop_min) piece.begin = it->second.lo;
    if (h == hop_max) piece.end = it->second.hi;
    if (h != 0 && it != needs.end()) {
      for (int64_t device = 0; device < num_devices; ++device) {
        std::optional<std::vector<int64_t>> index = s.TileAssignmentIndexOf(device);
        if (!index.has_value() || !it->second.targets[(*index)[w.dim]]) continue;
        (*index)[w.dim] += h;
        piece.pairs.emplace_back(ta.at(*index), device);
      }
      int64_t elements = piece.end - piece.begin;
      for (size_t d = 0; d < extents.size(); ++d) {
        if (static_cast<int64_t>(d) != w.dim) elements *= extents[d];
      }
      bytes += elements * ByteWidth(global.dtype());
    }
    total += piece.end - piece.begin;
    plan.pieces.push_back(std::move(piece));
  }
  std::vector<int64_t> offset(tiles, 0);
  for (int64_t k = 0; k < tiles; ++k) {
    if (!has_need[k]) continue;
    offset[k] = w.start[k] - ((k + hop_min) * shard + plan.pieces.front().begin);
    plan.pad_low = std::max(plan.pad_low, -offset[k]);
    plan.pad_high = std::max(plan.pad_high, offset[k] + w.size - total);
  }
  // A tile that needs nothing reads any in-bounds window (all of it is out of range).
  for (int64_t k = 0; k < tiles; ++k) {
    offset[k] += plan.pad_low;
    if (!has_need[k]) offset[k] = 0;
  }
  for (int64_t device = 0; device < num_devices; ++device) {
    std::optional<std::vector<int64_t>> index = s.TileIndexOf(device);
    if (index.has_value()) plan.offset_by_device[device] = offset[(*index)[w.dim]];
  }
  return plan;
}

absl::StatusOr<Node*> SliceAlong(Context& ctx, Node* x, int64_t dim, int64_t begin, int64_t end) {
  if (begin == 0 && end == x->shape().dim(dim)) return x;
  OpAttributes attrs;
  for (int64_t d = 0; d < x->shape().rank(); ++d) {
    attrs.slice.push_back(d == dim ? SliceDim{begin, end, 1} : SliceDim{0, x->shape().dim(d), 1});
  }
  return ctx.Add(Opcode::kSlice, {x}, attrs);
}

// One dim's pieces, concatenation, padding and window cut.
absl::StatusOr<Node*> EmitDim(Context& ctx, Node* local, const HaloDimPlan& plan) {
  const int64_t dim = plan.window.dim;
  const DType dtype = local->shape().dtype();
  std::vector<Node*> parts;
  for (const HaloPiece& piece : plan.pieces) {
    TESSEL_ASSIGN_OR_RETURN(Node * part, SliceAlong(ctx, local, dim, piece.begin, piece.end));
    if (piece.hop != 0 && !piece.pairs.empty()) {
      OpAttributes attrs;
      attrs.source_target_pairs = piece.pairs;
      TESSEL_ASSIGN_OR_RETURN(part, ctx.Add(Opcode::kCollectivePermute, {part}, attrs));
    } else if (piece.hop != 0) {
      // An inner hop no device needs: only its size matters for the offsets.
      TESSEL_ASSIGN_OR_RETURN(
          part, ctx.Add(Opcode::kBroadcast, part->shape(), {ctx.ScalarConstant(dtype, 0)}));
    }
    parts.push_back(part);
  }
  Node* joined = parts[0];
  if (parts.size() > 1) {
    OpAttributes attrs;
    attrs.dimensions = {dim};
    TESSEL_ASSIGN_OR_RETURN(joined, ctx.Add(Opcode::kConcatenate, parts, attrs));
  }
  if (plan.pad_low > 0 || plan.pad_high > 0) {
    OpAttributes attrs;
    attrs.padding.assign(joined->shape().rank(), PadDim{});
    attrs.padding[dim] = PadDim{plan.pad_low, plan.pad_high, 0};
    TESSEL_ASSIGN_OR_RETURN(joined,
                            ctx.Add(Opcode::kPad, {joined, ctx.ScalarConstant(dtype, 0)}, attrs));
  }
  const std::vector<int64_t>& offsets = plan.offset_by_device;
  if (std::all_of(offsets.begin(), offsets.end(), [&](int64_t o) { return o == offsets[0]; })) {
    return SliceAlong(ctx, joined, dim, offsets[0], offsets[0] + plan.window.size);
  }
  // Device-dependent offsets come from a partition-id-indexed table (SPMD: one program text).
  TESSEL_ASSIGN_OR_RETURN(Node * offset, ctx.PerDeviceScalar(offsets));
  Node* zero = ctx.ScalarConstant(DType::kS32, 0);
  std::vector<Node*> operands = {joined};
  OpAttributes attrs;
  for (int64_t d = 0; d < joined->shape().rank(); ++d) {
    operands.push_back(d == dim ? offset : zero);
    attrs.dynamic_slice_sizes.push_back(d == dim ? plan.window.size : joined->shape().dim(d));
  }
  return ctx.Add(Opcode::kDynamicSlice, operands, attrs);
}

// pred[local shape]: the dim's global index (window start + position) inside the valid range.
absl::StatusOr<Node*> InRange(Context& ctx, const Shape& shape, const spmd::Sharding& s,
                              const HaloDimPlan& plan, int64_t num_devices) {
  const HaloWindow& w = plan.window;
  std::vector<int64_t> starts(num_devices, 0);
  for (int64_t device = 0; device < num_devices; ++device) {
    std::optional<std::vector<int64_t>> index = s.TileIndexOf(device);
    if (index.has_value()) starts[device] = w.start[(*index)[w.dim]];
  }
  Shape index_shape(DType::kS32, shape.dims());
  OpAttributes iota;
  iota.iota_dimension = w.dim;
  TESSEL_ASSIGN_OR_RETURN(Node * position, ctx.Add(Opcode::kIota, index_shape, {}, iota));
  TESSEL_ASSIGN_OR_RETURN(Node * start, ctx.PerDeviceScalar(starts));
  TESSEL_ASSIGN_OR_RETURN(Node * starts_b, ctx.Add(Opcode::kBroadcast, index_shape, {start}));
  TESSEL_ASSIGN_OR_RETURN(Node * global, ctx.Add(Opcode::kAdd, {position, starts_b}));
  auto compare = [&](int64_t bound, ComparisonDirection dir) -> absl::StatusOr<Node*> {
    TESSEL_ASSIGN_OR_RETURN(Node * b, ctx.Add(Opcode::kBroadcast, index_shape,
                                              {ctx.ScalarConstant(DType::kS32, bound)}));
    OpAttributes attrs;
    attrs.comparison_direction = dir;
    return ctx.Add(Opcode::kCompare, {global, b}, attrs);
  };
  TESSEL_ASSIGN_OR_RETURN(Node * above, compare(w.valid_begin, ComparisonDirection::kGe));
  TESSEL_ASSIGN_OR_RETURN(Node * below, compare(w.valid_end, ComparisonDirection::kLt));
  return ctx.Add(Opcode::kAnd, {above, below});
}

}  // namespace

absl::StatusOr<HaloPlan> PlanHalo(const spmd::Sharding& s, const Shape& global,
                                  const std::vector<HaloWindow>& windows, int64_t num_devices) {
  if (!s.IsTiled() || !IsPlainTiling(s)) {
    return absl::UnimplementedError(
        absl::StrCat("halo exchange needs a plain tiling, got ", s.ToString()));
  }
  HaloPlan plan;
  std::vector<int64_t> extents = LocalShape(global, s).dims();
  for (const HaloWindow& w : windows) {
    TESSEL_RETURN_IF_ERROR(CheckWindow(s, global, w));
    for (const HaloDimPlan& done : plan.dims) {
      if (done.window.dim == w.dim) {
        return absl::InvalidArgumentError(
            absl::StrCat("halo exchange: dim ", w.dim, " has two windows"));
      }
    }
    plan.dims.push_back(PlanDim(s, global, w, num_devices, extents, plan.bytes_per_device));
    extents[w.dim] = w.size;
  }
  return plan;
}

bool UseHalo(int64_t halo_bytes, int64_t gather_bytes) { return halo_bytes < gather_bytes; }

HaloWindow WindowedOpHalo(int64_t dim, int64_t tiles, int64_t input_size, int64_t output_size,
                          int64_t window_size, int64_t stride, int64_t padding_low,
                          int64_t window_dilation) {
  const int64_t s_out = (output_size + tiles - 1) / tiles;
  HaloWindow w;
  w.dim = dim;
  for (int64_t k = 0; k < tiles; ++k) w.start.push_back(k * s_out * stride - padding_low);
  w.size = (s_out - 1) * stride + (window_size - 1) * window_dilation + 1;
  w.valid_begin = 0;
  w.valid_end = input_size;
  return w;
}

namespace {

// Rounding towards minus infinity (window starts go negative at the padded edges).
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

}  // namespace

std::optional<ConvLhsHalo> BaseDilatedConvHalo(int64_t dim, int64_t tiles, int64_t input_size,
                                               int64_t output_size, const WindowDim& w) {
  const int64_t bd = w.base_dilation;
  const int64_t s_out = (output_size + tiles - 1) / tiles;
  const int64_t span = (s_out - 1) * w.stride + (w.size - 1) * w.window_dilation + 1;
  ConvLhsHalo halo;
  halo.window.dim = dim;
  halo.window.valid_begin = 0;
  halo.window.valid_end = input_size;
  halo.window_size = w.size;
  for (int64_t k = 0; k < tiles; ++k) {
    const int64_t begin = k * s_out * w.stride - w.padding_low;
    const int64_t first = CeilDiv(begin, bd);
    const int64_t last = FloorDiv(begin + span - 1, bd);
    const int64_t padding_low = first * bd - begin;
    if (last < first) return std::nullopt;
    if (k > 0 && (padding_low != halo.padding_low || last - first + 1 != halo.window.size)) {
      return std::nullopt;
    }
    halo.padding_low = padding_low;
    halo.window.size = last - first + 1;
    halo.window.start.push_back(first);
  }
  halo.padding_high = span - halo.padding_low - ((halo.window.size - 1) * bd + 1);
  return halo;
}

ConvLhsHalo KernelTiledConvHalo(int64_t dim, int64_t tiles, int64_t input_size, int64_t kernel_size,
                                int64_t output_size, const WindowDim& w) {
  const int64_t s_k = (kernel_size + tiles - 1) / tiles;
  ConvLhsHalo halo;
  halo.window.dim = dim;
  for (int64_t k = 0; k < tiles; ++k) {
    halo.window.start.push_back(k * s_k * w.window_dilation - w.padding_low);
  }
  halo.window.size = (s_k - 1) * w.window_dilation + (output_size - 1) * w.stride + 1;
  halo.window.valid_begin = 0;
  halo.window.valid_end = input_size;
  halo.window_size = s_k;
  return halo;
}

absl::StatusOr<HaloResult> ExchangeHalo(Context& ctx, Node* local, const spmd::Sharding& s,
                                        const HaloPlan& plan, bool want_mask) {
  HaloResult result;
  result.local = local;
  for (const HaloDimPlan& dim : plan.dims) {
    TESSEL_ASSIGN_OR_RETURN(result.local, EmitDim(ctx, result.local, dim));
  }
  if (!want_mask) return result;
  for (const HaloDimPlan& dim : plan.dims) {
    if (!dim.needs_mask) continue;
    TESSEL_ASSIGN_OR_RETURN(Node * in_range,
                            InRange(ctx, result.local->shape(), s, dim, ctx.num_devices()));
    if (result.in_range == nullptr) {
      result.in_range = in_range;
    } else {
      TESSEL_ASSIGN_OR_RETURN(result.in_range, ctx.Add(Opcode::kAnd, {result.in_range, in_range}));
    }
  }
  return result;
}

}  // namespace tessel::partitioner::internal
