// How a tiling survives a reshape (internal to the partitioner).
#ifndef TESSEL_PARTITIONER_INTERNAL_RESHAPE_DIMS_H_
#define TESSEL_PARTITIONER_INTERNAL_RESHAPE_DIMS_H_

#include <optional>

#include "core/shape.h"
#include "spmd/sharding.h"

namespace tessel::partitioner::internal {

// The sharding of the reshaped value when the tiling of `s` (on a value of shape `from`) can be
// kept by a reshape to `to` without moving data: the dims are split into groups of equal
// element count; in each group at most one dim may be tiled, it must be the group's major
// (first non-1) dim, and its tile count must divide the major dim on both sides. Then device k
// holds exactly the rows k*s.. of the group on both sides. nullopt otherwise.
std::optional<spmd::Sharding> ReshapeSharding(const spmd::Sharding& s, const Shape& from,
                                              const Shape& to);

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_RESHAPE_DIMS_H_
