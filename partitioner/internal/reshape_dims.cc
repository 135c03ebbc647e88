#include "tessel/partitioner/internal/reshape_dims.h"

#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

std::optional<spmd::Sharding> ReshapeSharding(const spmd::Sharding& s, const Shape& from,
                                              const Shape& to) {
  // The header's conditions suffice because a reshape only regroups each group's contiguous
  // row-major block: cutting the group's major dim into t equal parts cuts the block into t
  // contiguous pieces on both sides, and device k holds the same elements before and after. A
  // tiled minor dim, or two tiled dims in one group, would give a device elements that are not
  // one contiguous piece of the block, which no tiling of the other side describes. Padding
  // would shift the pieces, hence the divisibility on both sides.
  if (!s.IsTiled()) return s;
  if (!IsPlainTiling(s)) return std::nullopt;
  const int64_t rank_in = from.rank(), rank_out = to.rank();
  std::vector<int64_t> out_tiles(rank_out, 1);
  int64_t i = 0, j = 0;
  while (i < rank_in || j < rank_out) {
    // Take the next group: the shortest runs of dims with equal products.
    int64_t i0 = i, j0 = j;
    int64_t pin = 1, pout = 1;
    if (i < rank_in) pin *= from.dim(i++);
    if (j < rank_out) pout *= to.dim(j++);
    while (pin != pout) {
      if (pin < pout && i < rank_in) {
        pin *= from.dim(i++);
      } else if (pout < pin && j < rank_out) {
        pout *= to.dim(j++);
      } else {
        return std::nullopt;
      }
    }
    // Trailing size-1 dims join this group.
    while (i < rank_in && from.dim(i) == 1 && (j >= rank_out || to.dim(j) != 1)) ++i;
    while (j < rank_out && to.dim(j) == 1 && (i >= rank_in || from.dim(i) != 1)) ++j;
    int64_t tiled_in = -1;
    for (int64_t d = i0; d < i; ++d) {
      if (s.num_tiles(d) > 1) {
        if (tiled_in >= 0) return std::nullopt;
        tiled_in = d;
      }
    }
    if (tiled_in < 0) continue;
    // The tiled dim must be the major non-1 dim of its group on both sides.
    int64_t major_in = i0;
    while (major_in < i && from.dim(major_in) == 1) ++major_in;
    int64_t major_out = j0;
    while (major_out < j && to.dim(major_out) == 1) ++major_out;
    if (tiled_in != major_in || major_out >= j) return std::nullopt;
    int64_t t = s.num_tiles(tiled_in);
    if (from.dim(tiled_in) % t != 0 || to.dim(major_out) % t != 0) return std::nullopt;
    out_tiles[major_out] = t;
  }
  // The tile assignment's row-major contents are kept and only re-dimensioned: each group had
  // at most one tiled dim, taken over in the same order on the output side, so device k along it
  // stays device k.
  std::vector<int64_t> dims = out_tiles;
  const auto& ta_dims = s.tile_assignment_dims();
  for (int64_t d = s.TiledDataRank(); d < static_cast<int64_t>(ta_dims.size()); ++d) {
    dims.push_back(ta_dims[d]);
  }
  spmd::DeviceArray ta = s.tile_assignment().Reshape(dims);
  return s.NumSubgroupDims() == 0 ? spmd::Sharding::Tile(ta) : spmd::Sharding::PartialTile(ta);
}

std::optional<std::pair<spmd::Sharding, spmd::Sharding>> PartialReshapeSharding(
    const spmd::Sharding& s, const Shape& from, const Shape& to) {
  if (!s.IsTiled() || !IsPlainTiling(s)) return std::nullopt;
  const int64_t rank_in = from.rank(), rank_out = to.rank();
  // The same grouping as ReshapeSharding; here a group that cannot keep its tiling is only
  // recorded (its input dims made whole below) instead of failing the whole reshape.
  std::vector<int64_t> whole;
  int64_t i = 0, j = 0;
  while (i < rank_in || j < rank_out) {
    int64_t i0 = i, j0 = j;
    int64_t pin = 1, pout = 1;
    if (i < rank_in) pin *= from.dim(i++);
    if (j < rank_out) pout *= to.dim(j++);
    while (pin != pout) {
      if (pin < pout && i < rank_in) {
        pin *= from.dim(i++);
      } else if (pout < pin && j < rank_out) {
        pout *= to.dim(j++);
      } else {
        return std::nullopt;
      }
    }
    while (i < rank_in && from.dim(i) == 1 && (j >= rank_out || to.dim(j) != 1)) ++i;
    while (j < rank_out && to.dim(j) == 1 && (i >= rank_in || from.dim(i) != 1)) ++j;
    std::vector<int64_t> tiled;
    for (int64_t d = i0; d < i; ++d) {
      if (s.num_tiles(d) > 1) tiled.push_back(d);
    }
    if (tiled.empty()) continue;
    int64_t major_in = i0;
    while (major_in < i && from.dim(major_in) == 1) ++major_in;
    int64_t major_out = j0;
    while (major_out < j && to.dim(major_out) == 1) ++major_out;
    const int64_t t = s.num_tiles(tiled[0]);
    const bool keeps = tiled.size() == 1 && tiled[0] == major_in && major_out < j &&
                       from.dim(tiled[0]) % t == 0 && to.dim(major_out) % t == 0;
    if (!keeps) whole.insert(whole.end(), tiled.begin(), tiled.end());
  }
  if (whole.empty()) return std::nullopt;  // ReshapeSharding's own case
  spmd::Sharding kept = PartiallyReplicate(s, rank_in, whole);
  if (kept.NumTiles() <= 1) return std::nullopt;
  std::optional<spmd::Sharding> out = ReshapeSharding(kept, from, to);
  if (!out.has_value()) return std::nullopt;
  return std::make_pair(kept, *out);
}

}  // namespace tessel::partitioner::internal
