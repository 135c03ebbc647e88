// How a tiling survives a reshape (internal to the partitioner).
#ifndef TESSEL_PARTITIONER_INTERNAL_RESHAPE_DIMS_H_
#define TESSEL_PARTITIONER_INTERNAL_RESHAPE_DIMS_H_

#include <optional>
#include <utility>

#include "tessel/core/shape.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner::internal {

// The sharding of the reshaped value when the tiling of `s` (on a value of shape `from`) can be
// kept by a reshape to `to` without moving data: the dims are split into groups of equal
// element count; in each group at most one dim may be tiled, it must be the group's major
// (first non-1) dim, and its tile count must divide the major dim on both sides. Then device k
// holds exactly the rows k*s.. of the group on both sides. nullopt otherwise.
std::optional<spmd::Sharding> ReshapeSharding(const spmd::Sharding& s, const Shape& from,
                                              const Shape& to);

// When ReshapeSharding(s, from, to) fails because some groups of dims cannot keep their tiling
// (a head dim split into [kv_heads, group] with more tiles than kv_heads, say), the tiling of
// the other groups can still pass: returns {s with the tiles of the failing groups' dims moved
// into replication, its image on `to`}, or nullopt when no tiled dim survives (or the dims do
// not group at all). GSPMD keeps the batch tiling through such a reshape in the same way
// (spmd_partitioner.cc, HandleReshape; hlo_sharding_util::ReshapeSharding).
std::optional<std::pair<spmd::Sharding, spmd::Sharding>> PartialReshapeSharding(
    const spmd::Sharding& s, const Shape& from, const Shape& to);

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_RESHAPE_DIMS_H_
