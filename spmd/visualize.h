// VisualizeSharding: a text table of which devices hold which block of a 1-D or 2-D value, in
// the spirit of jax.debug.visualize_array_sharding and torch_xla visualize_tensor_sharding.
//
//   VisualizeSharding(Shape(DType::kF32, {8, 10}),
//                     *ParseSharding("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"),
//                     8)
//   ==
//   +-------------+
//   |     0-3     |
//   | [0:4, 0:10] |
//   +-------------+
//   |     4-7     |
//   | [4:8, 0:10] |
//   +-------------+
//
// Rows are the tiles of dim 0 and columns the tiles of dim 1 (a 1-D value is one row of tiles
// along dim 0; a 0-d or tile-maximal value one cell). Each cell shows the devices holding the
// block (ascending; runs of 3 or more consecutive ids are written "4-7") and the block's global
// index ranges [start:limit] (trailing uneven blocks may be short or empty, e.g. [5:5]). Devices
// holding unreduced partial values of a block are joined with " + ".
#ifndef TESSEL_SPMD_VISUALIZE_H_
#define TESSEL_SPMD_VISUALIZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/sharding.h"

namespace tessel::spmd {

// The table for a value of `shape` under `sharding` on devices 0..num_devices-1, ending in a
// newline. `num_devices` <= 0 means "the devices the sharding names" (replicated and unreduced
// shardings then show "all devices").
// Errors: kInvalidArgument for rank > 2 (like JAX), tuple or manual shardings, or a sharding
// that does not fit the shape; kOutOfRange for a device id >= num_devices.
[[nodiscard]] absl::StatusOr<std::string> VisualizeSharding(const Shape& shape,
                                                            const Sharding& sharding,
                                                            int64_t num_devices = 0);

// "0,1,2" / "0-3,8-11" / "5": ascending ids, runs of 3 or more consecutive ids as "a-b".
std::string CompactDeviceList(std::vector<int64_t> device_ids);

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_VISUALIZE_H_
