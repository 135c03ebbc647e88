// The physical topology of a machine: slices, hosts, devices, their coordinates and the speeds of
// the chips and links. Pure data, loaded from JSON (schema: docs/topology.md; presets: configs/).
//
//   TESSEL_ASSIGN_OR_RETURN(mesh::Topology topology,
//                           mesh::LoadTopology("configs/two_slices_2x2hosts.json"));
//   topology.num_devices();          // 8
//   topology.num_slices();           // 2
//   topology.num_hosts();            // 4
//   topology.host(1).device_ids;     // {2, 3}
//   topology.device(5).coords;       // {1, 0, 0}: position inside slice 1
//   topology.device_spec().PeakTflops("bf16");  // 275.0
//
// Vocabulary (as in Cloud TPU multislice and PyTorch/XLA `HybridMesh`):
// - a *slice* is a set of devices joined by the fast inter-chip interconnect (ICI): a TPU slice
//   (a 1D/2D/3D grid or torus of chips) or a GPU node (GPUs behind an NVLink switch);
// - slices are joined by the data-center network (DCN): Ethernet or InfiniBand between hosts;
// - a *host* is one machine, one OS process of a Tessel run; it owns `devices_per_host` devices
//   of exactly one slice. Its global index is what `TESSEL_HOST_INDEX` names;
// - a *device* is one accelerator chip (a TPU chip, not a TensorCore; one GPU).
//
// Numbering (the "generated" form of the JSON, used by every preset):
// - coordinates: a device's position inside its slice, one entry per dimension of the slice
//   shape; coords[0] (x) varies fastest, as JAX numbers TPU chips ((0,0,0), (1,0,0), ...);
// - hosts: global, dense 0..H-1, ordered by slice, then by the position of the host's block of
//   chips (`host_shape`) inside the slice, x fastest;
// - devices: global ids, dense 0..N-1, ordered by slice, then host, then local index; the local
//   index orders the chips of one host by their coordinates, x fastest.
// The JSON may instead list every device explicitly (`id`, `slice`, `host`, `coords`); ids must
// still be dense 0..N-1 but may follow any order.
//
// Units are part of every name: `bandwidth_gbps` gigabits (10^9 bit) per second,
// `latency_us` microseconds, `hbm_bytes` bytes, `hbm_bandwidth_gbytes_per_s` gigabytes (10^9 byte)
// per second, `peak_tflops` 10^12 operations per second.
//
// Errors: every function that reads user input returns a Status whose message starts with the
// source (file path or "<string>") and the JSON pointer of the offending value:
//   configs/x.json: /slices/0/hosts: expected a positive integer, got 0
// Malformed input never crashes and never throws.
#ifndef TESSEL_MESH_TOPOLOGY_H_
#define TESSEL_MESH_TOPOLOGY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessel::mesh {

// Upper bounds on what a topology file may describe; larger inputs are rejected with
// kInvalidArgument (they guard memory use, not any hardware limit). The largest public
// configuration (a multislice of 3 x 6144 TPU v5p chips) is 18432 devices.
inline constexpr int64_t kMaxDevices = int64_t{1} << 18;  // 262144
inline constexpr int64_t kMaxSliceRank = 8;               // dimensions of a slice shape

// One accelerator chip.
struct Device {
  int64_t id = 0;           // global device id, 0..num_devices()-1
  int64_t slice = 0;        // index of its slice, 0..num_slices()-1
  int64_t host = 0;         // global index of its host, 0..num_hosts()-1
  int64_t local_index = 0;  // index among the devices of its host, 0..devices_per_host-1
  // Position inside the slice, one entry per dimension of `Slice::shape`, each in
  // [0, shape[d]). Unique within a slice.
  std::vector<int64_t> coords;
};

// One slice: a grid or torus of devices joined by ICI.
struct Slice {
  int64_t index = 0;
  // Physical shape of the slice, e.g. {2, 2, 1} for a TPU v4-8, {16, 16} for a v5e-256, {8}
  // for an 8-GPU NVLink node. The product is the number of devices of the slice.
  std::vector<int64_t> shape;
  // wraparound[d]: whether dimension d closes into a ring (torus) instead of a line (mesh).
  // Same length as `shape`. Meaningless for an ICI of kind kSwitch.
  std::vector<bool> wraparound;
  int64_t num_hosts = 0;
  int64_t devices_per_host = 0;
  // The block of chips one host owns, e.g. {2, 2, 1} for TPU v4/v5p hosts. Same rank as
  // `shape`, divides it. Empty when the JSON lists devices explicitly or gives no
  // `host_shape` (then hosts own runs of `devices_per_host` consecutive chips, x fastest).
  std::vector<int64_t> host_shape;
  std::vector<int64_t> host_indices;  // global host indices, ascending
  std::vector<int64_t> device_ids;    // global device ids, ascending
  int64_t num_devices() const { return static_cast<int64_t>(device_ids.size()); }
};

// One host (machine, OS process).
struct Host {
  int64_t index = 0;                // global host index, 0..num_hosts()-1 (TESSEL_HOST_INDEX)
  int64_t slice = 0;                // the slice all its devices belong to
  int64_t index_in_slice = 0;       // 0..Slice::num_hosts-1
  std::vector<int64_t> device_ids;  // global ids, ascending; device_ids[i] has local_index i
  int64_t num_devices() const { return static_cast<int64_t>(device_ids.size()); }
};

// What one device can do. All devices of a topology share one spec.
struct DeviceSpec {
  std::string name;  // e.g. "TPU v4", "H100 SXM5"; may be empty
  // Peak dense throughput per dtype in 10^12 operations per second, keyed by XLA's type names
  // ("bf16", "f32", "s8", "f8e4m3fn", ...; see kKnownDTypeNames). Vendor numbers; a dtype
  // missing here has no published number for this chip.
  std::map<std::string, double> peak_tflops;
  int64_t hbm_bytes = 0;                    // HBM capacity per device, bytes
  double hbm_bandwidth_gbytes_per_s = 0.0;  // HBM bandwidth per device, 10^9 bytes/s
  // Optional (JSON "efficiency"): fraction of peak that one op class reaches, in (0, 1], keyed
  // by the names of kEfficiencyClasses ("dot", "elementwise", "reduce", "data_movement",
  // "collective", "dcn", "flash_attention"). The cost model (mesh/cost/cost_model.h) uses its
  // defaults for classes not given ("flash_attention": the "dot" factor).
  std::map<std::string, double> efficiency;
  // Optional (JSON "matmul_tile"): side of the matrix unit's systolic array (TPU MXU: 128 on
  // v4 / v5e / v5p, 256 on v6e). When set, the cost model pads a dot's contracting size and its
  // non-contracting rhs size up to a multiple of it (tile quantization); 0: no padding.
  int64_t matmul_tile = 0;
  // Optional (JSON "host_bandwidth_gbytes_per_s"): bandwidth of one device's link to its host's
  // memory (PCIe), per direction, 10^9 bytes/s; host offload of saved activations
  // (mesh/sim/training_step.h) copies over it. 0: not given (offloading is refused).
  double host_bandwidth_gbytes_per_s = 0.0;

  // Peak of `dtype` in 10^12 op/s, or nullopt when the spec gives none for it.
  [[nodiscard]] std::optional<double> PeakTflops(std::string_view dtype) const;
};

// How the devices of one slice are wired.
enum class IciKind {
  // Point-to-point links between neighbours along each slice dimension (a ring where
  // `wraparound` is set, else a line). TPU ICI.
  kTorus,
  // Every device has one port into a non-blocking switch that reaches every other device of
  // the slice in one hop. NVLink + NVSwitch inside a GPU node.
  kSwitch,
};

// "torus" or "switch".
[[nodiscard]] std::string_view IciKindName(IciKind kind);

// Inter-chip interconnect inside a slice.
struct IciSpec {
  IciKind kind = IciKind::kTorus;
  // kTorus: bandwidth of one link in one direction. kSwitch: bandwidth of one device's port
  // into the switch, one direction. Gigabits per second.
  double bandwidth_gbps = 0.0;
  double latency_us = 0.0;  // one hop, one message, microseconds
};

// Data-center network between slices.
struct DcnSpec {
  // Bandwidth of one host's network interfaces together, one direction, gigabits per second;
  // shared by the devices of the host.
  double bandwidth_gbps = 0.0;
  double latency_us = 0.0;  // host to host, one message, microseconds
};

// One physical ICI link of a kTorus slice, between two devices that are neighbours along
// dimension `dim`. `device_a` is the one with the smaller coordinate along `dim` (for the
// wraparound link: the device at shape[dim]-1, and `device_b` the one at 0).
struct IciLink {
  int64_t slice = 0;
  int64_t dim = 0;
  int64_t device_a = 0;
  int64_t device_b = 0;
  bool wraparound = false;  // the link that closes the ring
};

// The op classes accepted as keys of DeviceSpec::efficiency: "dot" (dot, the MXU / tensor
// cores), "elementwise" (unary, binary, compare, select, convert, ...), "reduce",
// "data_movement" (broadcast, transpose, reshape, slice, pad, concatenate, dynamic-slice, ...),
// "collective" (fraction of an ICI / NVLink link's bandwidth that a collective reaches), "dcn"
// (fraction of the host NICs' bandwidth that a collective across slices reaches),
// "flash_attention" (fraction of the matrix unit's peak that a fused attention kernel reaches on
// its tile-padded matmul flops: Pallas flash / splash attention, FlashAttention; the simulator's
// analytic attention, mesh/sim/training_step.h).
inline constexpr std::string_view kEfficiencyClasses[] = {
    "dot", "elementwise", "reduce", "data_movement", "collective", "dcn", "flash_attention"};

// The XLA type names accepted as keys of `peak_tflops`.
inline constexpr std::string_view kKnownDTypeNames[] = {
    "pred", "s4",  "s8",  "s16",  "s32", "s64", "u4",       "u8",    "u16",
    "u32",  "u64", "f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2"};

// A validated topology. An immutable value: copying it copies every device and host.
class Topology {
 public:
  // An empty topology (no slices, hosts or devices): a placeholder to assign to. Everything
  // else comes from ParseTopology, LoadTopology or MakeUniformTopology.
  Topology() = default;

  // From the JSON "name" (may be empty), "description" and "source" fields. `sources` holds
  // one entry per string of "source" (a string or an array of strings in the JSON).
  const std::string& name() const { return name_; }
  const std::string& description() const { return description_; }
  const std::vector<std::string>& sources() const { return sources_; }

  const std::vector<Device>& devices() const { return devices_; }  // sorted by id
  const std::vector<Slice>& slices() const { return slices_; }     // sorted by index
  const std::vector<Host>& hosts() const { return hosts_; }        // sorted by index
  int64_t num_devices() const { return static_cast<int64_t>(devices_.size()); }
  int64_t num_slices() const { return static_cast<int64_t>(slices_.size()); }
  int64_t num_hosts() const { return static_cast<int64_t>(hosts_.size()); }

  // Checked accessors. Precondition: 0 <= index < num_*(); aborts (TESSEL_CHECK) otherwise,
  // so use FindDevice / FindHost for ids that come from users or the environment.
  const Device& device(int64_t id) const;
  const Slice& slice(int64_t index) const;
  const Host& host(int64_t index) const;

  // The device with `id`, or kOutOfRange naming the id and the valid range.
  [[nodiscard]] absl::StatusOr<const Device*> FindDevice(int64_t id) const;
  // The host with global index `index`, or kOutOfRange naming it and the valid range.
  [[nodiscard]] absl::StatusOr<const Host*> FindHost(int64_t index) const;

  // The device of slice `slice` at `coords`, or nullopt if `slice` or `coords` is outside it.
  [[nodiscard]] std::optional<int64_t> DeviceAt(int64_t slice,
                                                const std::vector<int64_t>& coords) const;

  const DeviceSpec& device_spec() const { return device_spec_; }
  const IciSpec& ici() const { return ici_; }
  // The DCN spec; present whenever the topology has more than one slice (the JSON must give
  // it then), optional for a single slice.
  const std::optional<DcnSpec>& dcn() const { return dcn_; }

  // The physical ICI links of slice `slice` (precondition: valid index): for kTorus, one per
  // pair of neighbours along each dimension, plus the wraparound link of each ring whose
  // dimension has wraparound and size > 2 (a ring of 2 is one link). Empty for kSwitch.
  // Ordered by dimension, then by device_a's coordinates (x fastest).
  [[nodiscard]] std::vector<IciLink> IciLinks(int64_t slice) const;
  // Number of physical ICI links of slice `slice`: IciLinks(slice).size() for kTorus; for
  // kSwitch, one port per device (num_devices of the slice).
  [[nodiscard]] int64_t NumIciLinks(int64_t slice) const;

  // Totals over all devices: peak per dtype (10^12 op/s) and HBM bytes.
  [[nodiscard]] std::map<std::string, double> TotalPeakTflops() const;
  [[nodiscard]] int64_t TotalHbmBytes() const;

 private:
  friend class TopologyBuilder;  // mesh/topology.cc: the only producer of a non-empty value

  std::string name_;
  std::string description_;
  std::vector<std::string> sources_;
  std::vector<Device> devices_;
  std::vector<Slice> slices_;
  std::vector<Host> hosts_;
  DeviceSpec device_spec_;
  IciSpec ici_;
  std::optional<DcnSpec> dcn_;
  // device_at_[slice][linear index of coords, x fastest] = device id.
  std::vector<std::vector<int64_t>> device_at_;
};

// Parses and validates topology JSON (schema: docs/topology.md).
//
// `source` (a file path, or "<string>") starts every error message.
// Errors: kInvalidArgument, with the source and the JSON pointer of the offending value, for
//   text that is not JSON (with line, column and byte offset), nesting deeper than 64,
//   missing required keys, unknown keys (typos; "name", "description", "source" and
//   "comment" are allowed on every object), wrong types, non-positive counts, shapes whose rank
//   differs from `wraparound`/`host_shape`/`coords`, a `host_shape` that does not tile the
//   slice, hosts * devices_per_host != product of the slice shape, more than kMaxDevices
//   devices, unknown dtype names in `peak_tflops`, a missing `dcn` with several slices, and
//   for explicitly listed devices: duplicate or non-dense ids, slice or host out of range,
//   a host of another slice, coordinates outside the slice shape, duplicate coordinates in a
//   slice, per-slice or per-host device counts that do not add up.
// Never throws.
[[nodiscard]] absl::StatusOr<Topology> ParseTopology(std::string_view json_text,
                                                     std::string_view source);

// Reads the file at `path` and parses it with `path` as the source.
// Errors: kNotFound if the file does not exist; kInvalidArgument if it cannot be read (a
// directory, no permission) or does not validate (see ParseTopology).
[[nodiscard]] absl::StatusOr<Topology> LoadTopology(const std::string& path);

// A synthetic topology for tests and examples: `num_slices` identical slices of shape
// `slice_shape` (no wraparound unless `wraparound` is given, same rank), each split into
// `hosts_per_slice` hosts of consecutive chips (x fastest), ICI kTorus, with a placeholder
// device spec ("test-device": f32 and bf16 at 1 TFLOP/s, 16 GiB HBM at 1000 GB/s), ICI at
// 400 Gbps / 1 us and DCN at 200 Gbps / 10 us. Ids follow the generated numbering above.
// Example: MakeUniformTopology(2, {2, 2, 1}, 2) is the layout of
// configs/two_slices_2x2hosts.json (8 devices, 4 hosts of 2).
// Errors: kInvalidArgument as ParseTopology (source "<uniform>"), e.g. when `hosts_per_slice`
// does not divide the number of chips of a slice.
[[nodiscard]] absl::StatusOr<Topology> MakeUniformTopology(
    int64_t num_slices, const std::vector<int64_t>& slice_shape, int64_t hosts_per_slice,
    const std::vector<bool>& wraparound = {});

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_TOPOLOGY_H_
