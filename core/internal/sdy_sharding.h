// Shardy (sdy) sharding text, as JAX's Shardy export writes it into HLO frontend attributes,
// turned into XLA HloSharding text (internal to the HLO parser).
//
// JAX lowers a shard_map under Shardy to custom-calls "xla.sdy.GlobalToLocalShape" /
// "xla.sdy.LocalToGlobalShape" whose shardings exist only in sdy form:
//   module:      frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=2, "model"=4]>}}
//   custom-call: xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{\"data\"}, {}]>]>"
//                xla.sdy.manual_axes="#sdy<manual_axes{\"data\", \"model\"}>"
// The parser lowers them to the GSPMD form (SPMDFullToShardShape / SPMDShardToFullShape), which
// needs the HloSharding of each value:
//   <@mesh, [{"data"}, {"model"}]>  on ["data"=2, "model"=4]  ->  {devices=[2,4]<=[8]}
//   <@mesh, [{"model"}, {}]>        on ["data"=2, "model"=4]  ->
//       {devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}
// Source: Shardy's dialect syntax (openxla/shardy, sdy.mesh / sdy.sharding) and its HLO export
// (xla/service/spmd/shardy/stablehlo_round_trip/export_shardings.cc, which converts the same way:
// the device array is the mesh's iota, transposed so the axes of dim 0, dim 1, ... come first and
// the unused axes last, then reshaped to the tile dims and one replication dim).
#ifndef TESSEL_CORE_INTERNAL_SDY_SHARDING_H_
#define TESSEL_CORE_INTERNAL_SDY_SHARDING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace tessel::internal {

// A mesh: its axes in order, (name, size).
using SdyMesh = std::vector<std::pair<std::string, int64_t>>;
using SdyMeshes = absl::flat_hash_map<std::string, SdyMesh>;

// The meshes named in the value of a module's `xla.sdy.meshes` (the text between the braces
// after "xla.sdy.meshes=", e.g. `{mesh = #sdy.mesh<["data"=2, "model"=4]>}`; \" escapes allowed).
// Errors: kInvalidArgument on malformed text; kUnimplemented for a mesh with explicit
// device_ids (only iota meshes are supported).
[[nodiscard]] absl::StatusOr<SdyMeshes> ParseSdyMeshes(std::string_view text);

// The value of frontend attribute `key` in the text of a `frontend_attributes={...}` attribute,
// with its quotes removed and \" unescaped; for an unquoted value, its balanced text. Returns
// kNotFound if the key is absent.
[[nodiscard]] absl::StatusOr<std::string> FindFrontendAttribute(std::string_view attributes,
                                                                std::string_view key);

// The HloSharding text of each value in `#sdy.sharding_per_value<[<@mesh, [...]>, ...]>`, or of
// the one value of `#sdy.sharding<@mesh, [...]>`. Dims list their axes major to minor; a dim
// with no axes is not split; axes no dim uses replicate (last_tile_dim_replicate).
// Errors: kInvalidArgument for malformed text or an unknown mesh or axis (naming it, and the
// mesh's axes); kUnimplemented for sub-axes ("x":(1)2), open dims (`?`), and explicit
// `replicated=` / `unreduced=` lists.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> SdyShardingsToHlo(std::string_view text,
                                                                         const SdyMeshes& meshes);

// The axis names of `#sdy<manual_axes{"data", "model"}>`.
// Errors: kInvalidArgument for malformed text.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ParseSdyManualAxes(std::string_view text);

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_SDY_SHARDING_H_
