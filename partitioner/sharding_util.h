// Sharding algebra used by propagation and partitioning: moving tiles between dims, into and
// out of replication, and merging compatible shardings. All functions take and return
// normalized spmd::Sharding values (spmd/sharding.h) over devices 0..num_devices-1.
//
// Terms: a tiled sharding of rank r has r data dims in its tile assignment followed by subgroup
// dims; "projecting" keeps some data dims and moves the tiles of the others into the replicated
// subgroup (those devices then hold the same data along the kept dims).
//
//   s = {devices=[2,4]0,...,7}                          // f32[B, F]: B over 2, F over 4
//   Project(s, {0})    == {devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}   // rank 1
//   Embed(Project(s, {0}), 3, {0})                      // rank 3, B tiled, dims 1 and 2 whole
//   PartiallyReplicate(s, {1}) == {devices=[2,1,4]... last_tile_dim_replicate}
//
// Source: the same operations as XLA's hlo_sharding_util (PartiallyReplicateTiledShardingOnDims,
// TransposeSharding, MergeSharding), written for Tessel's Sharding type.
#ifndef TESSEL_PARTITIONER_SHARDING_UTIL_H_
#define TESSEL_PARTITIONER_SHARDING_UTIL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner {

using spmd::DeviceArray;
using spmd::Sharding;

// True for a tiled sharding whose only subgroup (if any) is replicated, or a replicated one:
// the shardings propagation and partitioning reason about.
bool IsPlainTiling(const Sharding& s);

// Keeps data dims `dims` of `s` (result dim i is s's dim dims[i]) and moves the tiles of every
// other data dim into the replicated subgroup. Replicated in, replicated out.
// Precondition: IsPlainTiling(s), dims distinct and < s.TiledDataRank() (when tiled).
Sharding Project(const Sharding& s, const std::vector<int64_t>& dims);

// Places the data dims of `s` at positions `positions` (dim i of s becomes dim positions[i]) of
// a rank-`rank` sharding; other dims get one tile. Precondition: IsPlainTiling(s).
Sharding Embed(const Sharding& s, int64_t rank, const std::vector<int64_t>& positions);

// Moves the tiles of data dims `dims` into replication, keeping the rank.
Sharding PartiallyReplicate(const Sharding& s, int64_t rank, const std::vector<int64_t>& dims);

// Output dim i of the result is dim perm[i] of s (as transpose does to values).
Sharding TransposeSharding(const Sharding& s, const std::vector<int64_t>& perm);

// The sharding whose data dims combine those of a and b (both of rank `rank`): each device keeps
// its tile index from a on a's tiled dims and from b on b's. nullopt when they conflict (a dim
// tiled by both with another device mapping) or the combination is not a valid tiling
// (unequal replica counts). Source: XLA hlo_sharding_util::MergeSharding.
std::optional<Sharding> MergeShardings(const Sharding& a, const Sharding& b, int64_t rank,
                                       int64_t num_devices);

// Groups of devices along data dims `dims` of the tile assignment: one group per position of all
// the other tile dims (row-major), each listing the devices in row-major order over `dims`.
// These are the replica_groups of a collective over those dims.
std::vector<std::vector<int64_t>> GroupsAlongDims(const Sharding& s,
                                                  const std::vector<int64_t>& dims);

// Per-device padded local shape of `global` under `s`: ceil(dim / num_tiles(dim)).
Shape LocalShape(const Shape& global, const Sharding& s);

// True when every device id 0..num_devices-1 holds exactly one position of the tile assignment
// (or `s` is replicated / maximal).
bool CoversAllDevices(const Sharding& s, int64_t num_devices);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_SHARDING_UTIL_H_
