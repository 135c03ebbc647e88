// Common-subexpression elimination of the per-device program's leaves: equal constants, iotas
// and broadcasts become one node each.
//
//   std::unique_ptr<Graph> smaller = CseConstantsAndBroadcasts(*program);
//
// Autodiff and the optimizer write a scalar hyperparameter (a learning rate, a beta, 0, 1) as
// its own constant and broadcast at every use; the partitioned GPT step holds some 600 such
// duplicates among its 2,150 instructions. The executor pays a fixed cost per instruction at
// every run, and a host process runs the program once per local device per step, so the
// duplicates cost eight times over on 8 devices. Broadcasts stay cheap to share: the executor's
// loop fusion copies a broadcast into every fusion that reads it (core/internal/fusion.h).
//
// Source: XLA's HloCSE (xla/service/hlo_cse.cc), restricted to constants, iotas and broadcasts.
#ifndef TESSEL_PARTITIONER_CSE_H_
#define TESSEL_PARTITIONER_CSE_H_

#include <cstdint>
#include <memory>

#include "tessel/core/graph.h"

namespace tessel::partitioner {

// Returns `program` with each constant, iota and broadcast that equals an earlier one (same
// shape, sharding text and value; for a broadcast the same operand, after merging, and
// dimensions) replaced by that earlier one, and sets `*removed` (if not null) to the number
// removed. The first of equal nodes keeps its name and place; the rest of the program keeps
// its order, names and parameters. Only the entry computation is changed. Results are equal
// bit for bit (equal nodes compute the same values).
[[nodiscard]] std::unique_ptr<Graph> CseConstantsAndBroadcasts(const Graph& program,
                                                               int64_t* removed = nullptr);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_CSE_H_
