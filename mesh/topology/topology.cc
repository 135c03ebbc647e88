#include "tessel/mesh/topology/topology.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/core/config_json.h"
#include "tessel/core/file_util.h"
#include "tessel/core/status_macros.h"

namespace tessel::mesh {
namespace {

using json = nlohmann::json;

// Upper bound on `hbm_bytes` (16 TiB per device) so that totals over kMaxDevices fit in int64.
constexpr int64_t kMaxHbmBytes = int64_t{1} << 44;

// Keys accepted on every object and never interpreted beyond a type check. They let preset
// files document themselves (JSON has no comments) without weakening the unknown-key check.
constexpr std::string_view kMetaKeys[] = {"name", "description", "source", "comment"};

bool IsMetaKey(std::string_view key) {
  return std::find(std::begin(kMetaKeys), std::end(kMetaKeys), key) != std::end(kMetaKeys);
}

// "a, b, c" from a range of std::string_view (Debian's absl::StrJoin takes no std::string_view).
template <typename It>
std::string JoinNames(It begin, It end) {
  std::string out;
  for (It it = begin; it != end; ++it) {
    if (!out.empty()) out += ", ";
    out.append(it->data(), it->size());
  }
  return out;
}

std::string FormatInts(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

// Unchecked: only called on shapes whose products were already bounded by kMaxDevices.
int64_t Product(const std::vector<int64_t>& values) {
  int64_t product = 1;
  for (int64_t v : values) product *= v;
  return product;
}

// Coordinates of linear index `index` in `shape`, coords[0] fastest: JAX's TPU numbering, where
// chip (1,0,0) follows (0,0,0) (column-major, unlike numpy's default).
std::vector<int64_t> Delinearize(int64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> coords(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    coords[d] = index % shape[d];
    index /= shape[d];
  }
  return coords;
}

// Linear index of `coords` in `shape`, coords[0] fastest (the inverse of Delinearize): the key
// of the per-slice coordinate tables. Precondition: in range.
int64_t Linearize(const std::vector<int64_t>& coords, const std::vector<int64_t>& shape) {
  int64_t index = 0;
  for (size_t d = shape.size(); d-- > 0;) index = index * shape[d] + coords[d];
  return index;
}

// A slice as read from JSON, before devices exist; first_host is its hosts' offset in the
// global host numbering (slices number their hosts consecutively, in slice order).
struct SliceInput {
  std::vector<int64_t> shape;
  std::vector<bool> wraparound;
  int64_t num_hosts = 0;
  int64_t devices_per_host = 0;
  std::vector<int64_t> host_shape;
  int64_t first_host = 0;
};

}  // namespace

// Reads a parsed JSON document into a Topology. Every user error is a Status naming the source
// and the JSON pointer; it only uses nlohmann accessors after checking the type, and its caller
// catches anything nlohmann throws regardless.
class TopologyBuilder {
 public:
  explicit TopologyBuilder(std::string_view source) : source_(source) {}

  absl::StatusOr<Topology> Build(const json& root);

  // Fills the derived tables (hosts, per-slice lists, coordinate lookup) from `slices` and
  // `topology->devices_`, which must hold valid devices at index == id.
  static void Finish(const std::vector<SliceInput>& slices, Topology* topology);

 private:
  // The root's JSON pointer is "", which reads badly in a message; "/" is printed instead.
  absl::Status Error(std::string_view pointer, std::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", pointer.empty() ? std::string("/") : std::string(pointer), ": ",
                     std::string(message)));
  }
  // "expected <what>, got <value>" (or "got nothing (missing key)" when `got` is null).
  absl::Status Expected(std::string_view pointer, std::string_view what, const json* got) const {
    return Error(pointer, absl::StrCat("expected ", std::string(what), ", got ",
                                       got == nullptr ? std::string("nothing (missing key)")
                                                      : JsonForMessage(*got)));
  }

  absl::Status CheckObject(const json& value, std::string_view pointer) const {
    if (!value.is_object()) return Expected(pointer, "an object", &value);
    return absl::OkStatus();
  }

  // Unknown keys are errors (typos are common); meta keys are type-checked.
  absl::Status CheckKeys(const json& object, const std::string& pointer,
                         std::initializer_list<std::string_view> allowed) const;

  // The member `key` of `object`, or nullptr when absent.
  static const json* Find(const json& object, std::string_view key) {
    auto it = object.find(std::string(key));
    return it == object.end() ? nullptr : &*it;
  }

  absl::StatusOr<int64_t> ReadInt(const json* value, const std::string& pointer, int64_t min,
                                  int64_t max, std::string_view what) const;
  // An integer in [1, max]; the message says "a positive integer" unless the value is one
  // that exceeds `max`. The bound (kMaxDevices for counts) keeps every later product of counts
  // within int64 and every table sized by them small.
  absl::StatusOr<int64_t> ReadPositiveInt(const json* value, const std::string& pointer,
                                          int64_t max) const {
    bool too_large =
        value != nullptr && value->is_number_integer() &&
        (value->is_number_unsigned() ? value->get<uint64_t>() > static_cast<uint64_t>(max)
                                     : value->get<int64_t>() > max);
    return ReadInt(value, pointer, 1, max,
                   too_large ? absl::StrCat("a positive integer at most ", max)
                             : std::string("a positive integer"));
  }
  // A finite number >= 0 (`allow_zero`) or > 0.
  absl::StatusOr<double> ReadNumber(const json* value, const std::string& pointer,
                                    bool allow_zero) const;
  absl::StatusOr<std::string> ReadString(const json* value, const std::string& pointer) const;
  absl::StatusOr<std::vector<int64_t>> ReadShape(const json* value, const std::string& pointer,
                                                 std::string_view what) const;
  absl::StatusOr<std::vector<bool>> ReadBools(const json* value, const std::string& pointer,
                                              const std::vector<int64_t>& shape) const;

  absl::StatusOr<DeviceSpec> ReadDeviceSpec(const json* value, const std::string& pointer) const;
  absl::StatusOr<IciSpec> ReadIci(const json* value, const std::string& pointer) const;
  absl::StatusOr<DcnSpec> ReadDcn(const json* value, const std::string& pointer,
                                  std::string_view why) const;
  absl::StatusOr<SliceInput> ReadSlice(const json& value, const std::string& pointer,
                                       bool explicit_devices) const;
  absl::Status ReadExplicitDevices(const json* value, const std::string& pointer,
                                   const std::vector<SliceInput>& slices, Topology* topology) const;
  static void GenerateDevices(const std::vector<SliceInput>& slices, Topology* topology);

  std::string source_;
};

absl::Status TopologyBuilder::CheckKeys(const json& object, const std::string& pointer,
                                        std::initializer_list<std::string_view> allowed) const {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    std::string child = JsonPointerChild(pointer, key);
    // "source" may list several references (a spec sheet and a paper), so it alone also takes
    // an array of strings.
    if (key == "source") {
      const json& v = it.value();
      bool ok = v.is_string();
      if (v.is_array()) {
        ok = std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); });
      }
      if (!ok) return Expected(child, "a string or an array of strings", &v);
      continue;
    }
    if (IsMetaKey(key)) {
      if (!it.value().is_string()) return Expected(child, "a string", &it.value());
      continue;
    }
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::vector<std::string> names;
    for (std::string_view name : allowed)
      names.push_back(absl::StrCat("\"", std::string(name), "\""));
    return Error(child, absl::StrCat("unknown key \"", key, "\"; expected one of ",
                                     absl::StrJoin(names, ", "),
                                     " (or \"name\", \"description\", \"source\", \"comment\")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TopologyBuilder::ReadInt(const json* value, const std::string& pointer,
                                                 int64_t min, int64_t max,
                                                 std::string_view what) const {
  if (value == nullptr) return Expected(pointer, what, nullptr);
  // Floats (2.0) are not integers here: a count written as 2.5 is a typo worth reporting.
  std::optional<int64_t> result = JsonIntegerInRange(*value, min, max);
  if (!result.has_value()) return Expected(pointer, what, value);
  return *result;
}

absl::StatusOr<double> TopologyBuilder::ReadNumber(const json* value, const std::string& pointer,
                                                   bool allow_zero) const {
  // Bandwidths, peaks and factors divide costs; a zero, negative, tiny (1e-320) or huge (1e308)
  // one would give infinite, negative or zero times downstream. The bounds hold any real
  // hardware in these units (GB/s, Gbps, TFLOP/s, us, fractions) with room to spare and keep
  // every cost finite. Latencies may be 0 (allow_zero).
  constexpr double kSmallest = 1e-6;
  constexpr double kLargest = 1e9;
  const std::string what = absl::StrCat(allow_zero ? "0 or a number from " : "a number from ",
                                        kSmallest, " to ", kLargest);
  if (value == nullptr || !value->is_number()) return Expected(pointer, what, value);
  double result = value->get<double>();
  if (!std::isfinite(result) || result > kLargest ||
      !(result >= kSmallest || (allow_zero && result == 0.0))) {
    return Expected(pointer, what, value);
  }
  return result;
}

absl::StatusOr<std::string> TopologyBuilder::ReadString(const json* value,
                                                        const std::string& pointer) const {
  if (value == nullptr || !value->is_string()) return Expected(pointer, "a string", value);
  return value->get<std::string>();
}

absl::StatusOr<std::vector<int64_t>> TopologyBuilder::ReadShape(const json* value,
                                                                const std::string& pointer,
                                                                std::string_view what) const {
  if (value == nullptr || !value->is_array() || value->empty() ||
      value->size() > static_cast<size_t>(kMaxSliceRank)) {
    return Expected(
        pointer, absl::StrCat(std::string(what), " (1 to ", kMaxSliceRank, " positive integers)"),
        value);
  }
  // Each dim is bounded by kMaxDevices, so products of up to kMaxSliceRank dims can be checked
  // step by step without overflow (the callers do).
  std::vector<int64_t> shape;
  for (size_t i = 0; i < value->size(); ++i) {
    TESSEL_ASSIGN_OR_RETURN(
        int64_t dim, ReadPositiveInt(&(*value)[i], JsonPointerChild(pointer, i), kMaxDevices));
    shape.push_back(dim);
  }
  return shape;
}

absl::StatusOr<std::vector<bool>> TopologyBuilder::ReadBools(
    const json* value, const std::string& pointer, const std::vector<int64_t>& shape) const {
  // No default: whether a dim wraps changes the cost of collectives along it by up to 2x (ring
  // vs line), so the file has to say it for every dim.
  std::string what = absl::StrCat("an array of ", shape.size(),
                                  " booleans (one per dimension of shape ", FormatInts(shape), ")");
  if (value == nullptr || !value->is_array() || value->size() != shape.size()) {
    return Expected(pointer, what, value);
  }
  std::vector<bool> result;
  for (size_t i = 0; i < value->size(); ++i) {
    const json& e = (*value)[i];
    if (!e.is_boolean()) return Expected(JsonPointerChild(pointer, i), "true or false", &e);
    result.push_back(e.get<bool>());
  }
  return result;
}

absl::StatusOr<DeviceSpec> TopologyBuilder::ReadDeviceSpec(const json* value,
                                                           const std::string& pointer) const {
  if (value == nullptr) return Expected(pointer, "an object (the device spec)", nullptr);
  TESSEL_RETURN_IF_ERROR(CheckObject(*value, pointer));
  TESSEL_RETURN_IF_ERROR(CheckKeys(*value, pointer,
                                   {"peak_tflops", "hbm_bytes", "hbm_bandwidth_gbytes_per_s",
                                    "efficiency", "matmul_tile", "host_bandwidth_gbytes_per_s"}));
  // The meta key "name" doubles as the device's name ("TPU v5p"), used in the cost model's
  // notes; CheckKeys has made sure it is a string.
  DeviceSpec spec;
  if (const json* name = Find(*value, "name")) spec.name = name->get<std::string>();

  // At least one peak is required: the cost model cannot time a dot without one (it falls
  // back from a missing dtype to bf16 or f32, but needs something).
  std::string peak_pointer = JsonPointerChild(pointer, "peak_tflops");
  const json* peak = Find(*value, "peak_tflops");
  if (peak == nullptr || !peak->is_object() || peak->empty()) {
    return Expected(peak_pointer,
                    "a non-empty object mapping dtype names to 10^12 op/s (e.g. {\"bf16\": 275})",
                    peak);
  }
  for (auto it = peak->begin(); it != peak->end(); ++it) {
    std::string child = JsonPointerChild(peak_pointer, it.key());
    // Unknown dtype names are errors, not ignored: "bfloat16" for "bf16" would otherwise
    // silently leave the model on a fallback peak.
    bool known = std::find(std::begin(kKnownDTypeNames), std::end(kKnownDTypeNames), it.key()) !=
                 std::end(kKnownDTypeNames);
    if (!known) {
      return Error(
          child, absl::StrCat("unknown dtype \"", it.key(), "\"; expected one of ",
                              JoinNames(std::begin(kKnownDTypeNames), std::end(kKnownDTypeNames))));
    }
    TESSEL_ASSIGN_OR_RETURN(double tflops, ReadNumber(&it.value(), child, false));
    spec.peak_tflops[it.key()] = tflops;
  }
  // An integer, not a number: byte counts such as 96 GiB are exact, and 1e11 written as a float
  // is rejected rather than rounded.
  TESSEL_ASSIGN_OR_RETURN(
      spec.hbm_bytes,
      ReadInt(Find(*value, "hbm_bytes"), JsonPointerChild(pointer, "hbm_bytes"), 1, kMaxHbmBytes,
              absl::StrCat("a positive integer (bytes) at most ", kMaxHbmBytes)));
  TESSEL_ASSIGN_OR_RETURN(
      spec.hbm_bandwidth_gbytes_per_s,
      ReadNumber(Find(*value, "hbm_bandwidth_gbytes_per_s"),
                 JsonPointerChild(pointer, "hbm_bandwidth_gbytes_per_s"), false));
  if (const json* efficiency = Find(*value, "efficiency")) {
    std::string eff_pointer = JsonPointerChild(pointer, "efficiency");
    if (!efficiency->is_object()) {
      return Expected(eff_pointer, "an object mapping op classes to factors in (0, 1]", efficiency);
    }
    for (auto it = efficiency->begin(); it != efficiency->end(); ++it) {
      std::string child = JsonPointerChild(eff_pointer, it.key());
      bool known = std::find(std::begin(kEfficiencyClasses), std::end(kEfficiencyClasses),
                             it.key()) != std::end(kEfficiencyClasses);
      if (!known) {
        return Error(child, absl::StrCat("unknown op class \"", it.key(), "\"; expected one of ",
                                         JoinNames(std::begin(kEfficiencyClasses),
                                                   std::end(kEfficiencyClasses))));
      }
      // A fraction of peak: above 1 would claim more than the hardware can do.
      TESSEL_ASSIGN_OR_RETURN(double factor, ReadNumber(&it.value(), child, false));
      if (factor > 1.0) return Expected(child, "a factor in (0, 1]", &it.value());
      spec.efficiency[it.key()] = factor;
    }
  }
  if (const json* tile = Find(*value, "matmul_tile")) {
    // Systolic arrays are at most a few hundred cells on a side; 4096 bounds typos (128000).
    TESSEL_ASSIGN_OR_RETURN(spec.matmul_tile,
                            ReadInt(tile, JsonPointerChild(pointer, "matmul_tile"), 1, 4096,
                                    "a positive integer (the matrix unit's side) at most 4096"));
  }
  if (const json* host = Find(*value, "host_bandwidth_gbytes_per_s")) {
    TESSEL_ASSIGN_OR_RETURN(
        spec.host_bandwidth_gbytes_per_s,
        ReadNumber(host, JsonPointerChild(pointer, "host_bandwidth_gbytes_per_s"), false));
  }
  return spec;
}

absl::StatusOr<IciSpec> TopologyBuilder::ReadIci(const json* value,
                                                 const std::string& pointer) const {
  if (value == nullptr) return Expected(pointer, "an object (the ICI link spec)", nullptr);
  TESSEL_RETURN_IF_ERROR(CheckObject(*value, pointer));
  TESSEL_RETURN_IF_ERROR(CheckKeys(*value, pointer, {"kind", "bandwidth_gbps", "latency_us"}));
  // "kind" is optional and defaults to torus: the TPU case, which most presets describe.
  IciSpec ici;
  if (const json* kind = Find(*value, "kind")) {
    if (kind->is_string() && kind->get<std::string>() == "torus") {
      ici.kind = IciKind::kTorus;
    } else if (kind->is_string() && kind->get<std::string>() == "switch") {
      ici.kind = IciKind::kSwitch;
    } else {
      return Expected(JsonPointerChild(pointer, "kind"), "\"torus\" or \"switch\"", kind);
    }
  }
  TESSEL_ASSIGN_OR_RETURN(ici.bandwidth_gbps,
                          ReadNumber(Find(*value, "bandwidth_gbps"),
                                     JsonPointerChild(pointer, "bandwidth_gbps"), false));
  TESSEL_ASSIGN_OR_RETURN(
      ici.latency_us,
      ReadNumber(Find(*value, "latency_us"), JsonPointerChild(pointer, "latency_us"), true));
  return ici;
}

// `why` says in the "missing" message why DCN is needed ("required with 2 slices"), since the
// key is optional for a single slice.
absl::StatusOr<DcnSpec> TopologyBuilder::ReadDcn(const json* value, const std::string& pointer,
                                                 std::string_view why) const {
  if (value == nullptr) {
    return Expected(pointer, absl::StrCat("an object (the DCN link spec, ", std::string(why), ")"),
                    nullptr);
  }
  TESSEL_RETURN_IF_ERROR(CheckObject(*value, pointer));
  TESSEL_RETURN_IF_ERROR(CheckKeys(*value, pointer, {"bandwidth_gbps", "latency_us"}));
  DcnSpec dcn;
  TESSEL_ASSIGN_OR_RETURN(dcn.bandwidth_gbps,
                          ReadNumber(Find(*value, "bandwidth_gbps"),
                                     JsonPointerChild(pointer, "bandwidth_gbps"), false));
  TESSEL_ASSIGN_OR_RETURN(
      dcn.latency_us,
      ReadNumber(Find(*value, "latency_us"), JsonPointerChild(pointer, "latency_us"), true));
  return dcn;
}

absl::StatusOr<SliceInput> TopologyBuilder::ReadSlice(const json& value, const std::string& pointer,
                                                      bool explicit_devices) const {
  TESSEL_RETURN_IF_ERROR(CheckObject(value, pointer));
  TESSEL_RETURN_IF_ERROR(CheckKeys(
      value, pointer, {"shape", "wraparound", "hosts", "devices_per_host", "host_shape"}));
  SliceInput slice;
  std::string shape_pointer = JsonPointerChild(pointer, "shape");
  TESSEL_ASSIGN_OR_RETURN(slice.shape, ReadShape(Find(value, "shape"), shape_pointer, "an array"));
  // Checked before multiplying, so a shape like [2^18, 2^18, 2^18] is reported, not wrapped.
  int64_t num_chips = 1;
  for (int64_t dim : slice.shape) {
    if (num_chips > kMaxDevices / dim) {
      return Error(shape_pointer, absl::StrCat("expected at most ", kMaxDevices,
                                               " devices, got shape ", FormatInts(slice.shape)));
    }
    num_chips *= dim;
  }
  TESSEL_ASSIGN_OR_RETURN(
      slice.wraparound,
      ReadBools(Find(value, "wraparound"), JsonPointerChild(pointer, "wraparound"), slice.shape));
  TESSEL_ASSIGN_OR_RETURN(
      slice.num_hosts,
      ReadPositiveInt(Find(value, "hosts"), JsonPointerChild(pointer, "hosts"), kMaxDevices));
  TESSEL_ASSIGN_OR_RETURN(
      slice.devices_per_host,
      ReadPositiveInt(Find(value, "devices_per_host"),
                      JsonPointerChild(pointer, "devices_per_host"), kMaxDevices));
  // Both factors are at most kMaxDevices = 2^18, so the product cannot overflow. Every chip
  // belongs to exactly one host, hence the equality.
  if (slice.num_hosts * slice.devices_per_host != num_chips) {
    return Error(
        JsonPointerChild(pointer, "devices_per_host"),
        absl::StrCat("expected hosts * devices_per_host = ", num_chips, " (the product of shape ",
                     FormatInts(slice.shape), "), got ", slice.num_hosts, " * ",
                     slice.devices_per_host, " = ", slice.num_hosts * slice.devices_per_host));
  }
  if (const json* host_shape = Find(value, "host_shape")) {
    std::string host_pointer = JsonPointerChild(pointer, "host_shape");
    // Two sources of truth for which host owns which chip would have to agree; rather than
    // check that, the explicit form owns the mapping alone.
    if (explicit_devices) {
      return Error(host_pointer,
                   "host_shape is only used when devices are generated; with a top-level "
                   "\"devices\" list each device names its host");
    }
    TESSEL_ASSIGN_OR_RETURN(slice.host_shape, ReadShape(host_shape, host_pointer, "an array"));
    if (slice.host_shape.size() != slice.shape.size()) {
      return Expected(host_pointer,
                      absl::StrCat("an array of ", slice.shape.size(),
                                   " positive integers (one per dimension of shape ",
                                   FormatInts(slice.shape), ")"),
                      host_shape);
    }
    // The host blocks must tile the slice exactly (TPU v4 / v5p hosts own a 2x2x1 block of the
    // torus), so each chip has exactly one host.
    for (size_t d = 0; d < slice.shape.size(); ++d) {
      if (slice.shape[d] % slice.host_shape[d] != 0) {
        return Expected(JsonPointerChild(host_pointer, d),
                        absl::StrCat("a divisor of shape[", d, "] = ", slice.shape[d]),
                        &(*host_shape)[d]);
      }
    }
    // The block is the host's devices, so its size must be devices_per_host; with the
    // divisibility above, the blocks then number exactly `hosts`.
    if (Product(slice.host_shape) != slice.devices_per_host) {
      return Expected(
          host_pointer,
          absl::StrCat("a block of devices_per_host = ", slice.devices_per_host, " devices"),
          host_shape);
    }
  }
  return slice;
}

// The "generated" numbering of topology.h: ids in slice, host, local-index order, so a host's
// devices are a contiguous id range and host h of the launcher owns ids [h * d, (h + 1) * d)
// when every host has d devices. Input was validated by ReadSlice; nothing can fail here.
void TopologyBuilder::GenerateDevices(const std::vector<SliceInput>& slices, Topology* topology) {
  int64_t next_id = 0;
  for (size_t s = 0; s < slices.size(); ++s) {
    const SliceInput& slice = slices[s];
    // host_grid: how many host blocks fit along each dim; host h sits at block Delinearize(h).
    std::vector<int64_t> host_grid;
    if (!slice.host_shape.empty()) {
      for (size_t d = 0; d < slice.shape.size(); ++d) {
        host_grid.push_back(slice.shape[d] / slice.host_shape[d]);
      }
    }
    for (int64_t h = 0; h < slice.num_hosts; ++h) {
      for (int64_t l = 0; l < slice.devices_per_host; ++l) {
        Device device;
        device.id = next_id++;
        device.slice = static_cast<int64_t>(s);
        device.host = slice.first_host + h;
        device.local_index = l;
        // Without host_shape a host owns a run of consecutive chips, x fastest (a GPU node: one
        // host, all its GPUs); with it, a block of the torus, hosts ordered x fastest too.
        if (slice.host_shape.empty()) {
          device.coords = Delinearize(h * slice.devices_per_host + l, slice.shape);
        } else {
          std::vector<int64_t> block = Delinearize(h, host_grid);
          std::vector<int64_t> offset = Delinearize(l, slice.host_shape);
          device.coords.resize(slice.shape.size());
          for (size_t d = 0; d < slice.shape.size(); ++d) {
            device.coords[d] = block[d] * slice.host_shape[d] + offset[d];
          }
        }
        topology->devices_.push_back(std::move(device));
      }
    }
  }
}

absl::Status TopologyBuilder::ReadExplicitDevices(const json* value, const std::string& pointer,
                                                  const std::vector<SliceInput>& slices,
                                                  Topology* topology) const {
  if (!value->is_array()) return Expected(pointer, "an array of devices", value);
  int64_t expected_total = 0;
  for (const SliceInput& slice : slices) expected_total += Product(slice.shape);
  // Hosts come from the slices (not from the device entries), so a host that lists no device
  // is caught by the per-host count check below.
  const int64_t num_listed = static_cast<int64_t>(value->size());
  const int64_t num_hosts = slices.back().first_host + slices.back().num_hosts;
  if (num_listed > kMaxDevices) {
    return Error(pointer,
                 absl::StrCat("expected at most ", kMaxDevices, " devices, got ", num_listed));
  }

  // Where each id and each (slice, coordinate) was first seen, for duplicate messages.
  // Sized by the listed count, already bounded by kMaxDevices, and by each slice's product:
  // no user value can make these tables large.
  std::vector<int64_t> entry_of_id(num_listed, -1);
  std::vector<std::vector<int64_t>> entry_of_coords(slices.size());
  for (size_t s = 0; s < slices.size(); ++s) {
    entry_of_coords[s].assign(Product(slices[s].shape), -1);
  }
  std::vector<int64_t> devices_of_host(num_hosts, 0);
  std::vector<Device> devices;

  for (int64_t i = 0; i < num_listed; ++i) {
    const json& entry = (*value)[i];
    std::string entry_pointer = JsonPointerChild(pointer, static_cast<size_t>(i));
    TESSEL_RETURN_IF_ERROR(CheckObject(entry, entry_pointer));
    TESSEL_RETURN_IF_ERROR(CheckKeys(entry, entry_pointer, {"id", "slice", "host", "coords"}));
    Device device;
    std::string id_pointer = JsonPointerChild(entry_pointer, "id");
    // Ids in [0, N) and no duplicates together mean dense 0..N-1, whatever the listing order:
    // the rest of Tessel indexes devices by id.
    TESSEL_ASSIGN_OR_RETURN(device.id, ReadInt(Find(entry, "id"), id_pointer, 0, num_listed - 1,
                                               absl::StrCat("an id in [0, ", num_listed,
                                                            ") (ids are dense 0..N-1 for the N = ",
                                                            num_listed, " listed devices)")));
    if (entry_of_id[device.id] >= 0) {
      return Error(id_pointer,
                   absl::StrCat("duplicate device id ", device.id, " (also at ",
                                JsonPointerChild(pointer, entry_of_id[device.id]), ")"));
    }
    entry_of_id[device.id] = i;
    TESSEL_ASSIGN_OR_RETURN(
        device.slice, ReadInt(Find(entry, "slice"), JsonPointerChild(entry_pointer, "slice"), 0,
                              static_cast<int64_t>(slices.size()) - 1,
                              absl::StrCat("a slice index in [0, ", slices.size(), ")")));
    const SliceInput& slice = slices[device.slice];
    // A host owns devices of exactly one slice (topology.h), so the host must be one of the
    // slice's global host indices.
    TESSEL_ASSIGN_OR_RETURN(
        device.host,
        ReadInt(Find(entry, "host"), JsonPointerChild(entry_pointer, "host"), slice.first_host,
                slice.first_host + slice.num_hosts - 1,
                absl::StrCat("a global host index of slice ", device.slice, " (", slice.first_host,
                             "..", slice.first_host + slice.num_hosts - 1, ")")));
    std::string coords_pointer = JsonPointerChild(entry_pointer, "coords");
    const json* coords = Find(entry, "coords");
    // One coordinate per dim of the device's own slice: slices may differ in rank.
    if (coords == nullptr || !coords->is_array() || coords->size() != slice.shape.size()) {
      return Expected(coords_pointer,
                      absl::StrCat("an array of ", slice.shape.size(), " integers (slice ",
                                   device.slice, " has shape ", FormatInts(slice.shape), ")"),
                      coords);
    }
    for (size_t d = 0; d < slice.shape.size(); ++d) {
      TESSEL_ASSIGN_OR_RETURN(
          int64_t c,
          ReadInt(&(*coords)[d], JsonPointerChild(coords_pointer, d), 0, slice.shape[d] - 1,
                  absl::StrCat("an integer in [0, ", slice.shape[d], ") (slice ", device.slice,
                               " has shape ", FormatInts(slice.shape), ")")));
      device.coords.push_back(c);
    }
    // Two devices at one coordinate would break the torus model (links join coordinates) and,
    // with the total right, leave another coordinate without a device.
    int64_t linear = Linearize(device.coords, slice.shape);
    int64_t& seen = entry_of_coords[device.slice][linear];
    if (seen >= 0) {
      return Error(coords_pointer,
                   absl::StrCat("duplicate coordinates ", FormatInts(device.coords), " in slice ",
                                device.slice, " (also at ",
                                JsonPointerChild(pointer, static_cast<size_t>(seen)), ")"));
    }
    seen = i;
    ++devices_of_host[device.host];
    devices.push_back(std::move(device));
  }
  // Counted after the loop so that a bad entry is reported at its own pointer first.
  if (num_listed != expected_total) {
    return Error(pointer,
                 absl::StrCat("expected ", expected_total,
                              " devices (the products of the slice shapes), got ", num_listed));
  }
  // With the total right, ids and coordinates unique and in range, every slice holds exactly
  // the product of its shape; only the split between its hosts can still be wrong.
  for (size_t s = 0; s < slices.size(); ++s) {
    for (int64_t h = slices[s].first_host; h < slices[s].first_host + slices[s].num_hosts; ++h) {
      if (devices_of_host[h] != slices[s].devices_per_host) {
        return Error(pointer, absl::StrCat("expected devices_per_host = ",
                                           slices[s].devices_per_host, " devices on host ", h,
                                           " (slice ", s, "), got ", devices_of_host[h]));
      }
    }
  }
  // Place by id; local index = rank of the id among its host's ids. Local indices therefore
  // follow ids, not the listing order, so Host::device_ids (ascending) has device_ids[i] at
  // local index i.
  topology->devices_.assign(devices.size(), Device{});
  for (Device& device : devices) {
    int64_t id = device.id;
    topology->devices_[id] = std::move(device);
  }
  std::vector<int64_t> next_local(num_hosts, 0);
  for (Device& device : topology->devices_) device.local_index = next_local[device.host]++;
  return absl::OkStatus();
}

// Shared by both ways of making devices, so the derived tables are built one way only. Devices
// are visited in id order, so every per-slice and per-host id list comes out ascending.
void TopologyBuilder::Finish(const std::vector<SliceInput>& inputs, Topology* topology) {
  topology->slices_.clear();
  topology->hosts_.clear();
  topology->device_at_.clear();
  for (size_t s = 0; s < inputs.size(); ++s) {
    const SliceInput& input = inputs[s];
    Slice slice;
    slice.index = static_cast<int64_t>(s);
    slice.shape = input.shape;
    slice.wraparound = input.wraparound;
    slice.num_hosts = input.num_hosts;
    slice.devices_per_host = input.devices_per_host;
    slice.host_shape = input.host_shape;
    for (int64_t h = 0; h < input.num_hosts; ++h) {
      Host host;
      host.index = input.first_host + h;
      host.slice = slice.index;
      host.index_in_slice = h;
      slice.host_indices.push_back(host.index);
      topology->hosts_.push_back(std::move(host));
    }
    topology->slices_.push_back(std::move(slice));
    // Dense per-slice table keyed like Linearize: a coordinate lookup is O(rank) (DeviceAt, and
    // IciLinks for every chip and dim).
    topology->device_at_.emplace_back(Product(input.shape), -1);
  }
  for (const Device& device : topology->devices_) {
    topology->slices_[device.slice].device_ids.push_back(device.id);
    topology->hosts_[device.host].device_ids.push_back(device.id);
    topology->device_at_[device.slice][Linearize(device.coords, inputs[device.slice].shape)] =
        device.id;
  }
}

absl::StatusOr<Topology> TopologyBuilder::Build(const json& root) {
  const std::string pointer;  // the root
  TESSEL_RETURN_IF_ERROR(CheckObject(root, pointer));
  TESSEL_RETURN_IF_ERROR(
      CheckKeys(root, pointer, {"device_spec", "ici", "dcn", "slices", "devices"}));
  Topology topology;
  // CheckKeys has type-checked the meta keys, so these get<> calls cannot throw.
  if (const json* name = Find(root, "name")) topology.name_ = name->get<std::string>();
  if (const json* description = Find(root, "description")) {
    topology.description_ = description->get<std::string>();
  }
  if (const json* source = Find(root, "source")) {
    if (source->is_string()) {
      topology.sources_.push_back(source->get<std::string>());
    } else {
      for (const json& s : *source) topology.sources_.push_back(s.get<std::string>());
    }
  }
  TESSEL_ASSIGN_OR_RETURN(topology.device_spec_,
                          ReadDeviceSpec(Find(root, "device_spec"), "/device_spec"));
  TESSEL_ASSIGN_OR_RETURN(topology.ici_, ReadIci(Find(root, "ici"), "/ici"));

  // Slices are read first even with an explicit device list: they fix the shapes, host counts
  // and host numbering the devices are checked against.
  const json* devices = Find(root, "devices");
  const json* slices_json = Find(root, "slices");
  if (slices_json == nullptr || !slices_json->is_array() || slices_json->empty()) {
    return Expected("/slices", "a non-empty array of slices", slices_json);
  }
  std::vector<SliceInput> slices;
  int64_t total_devices = 0;
  int64_t next_host = 0;
  // The running total is checked per slice, so the message points at the slice that crosses
  // kMaxDevices and no later sum can overflow.
  for (size_t s = 0; s < slices_json->size(); ++s) {
    std::string slice_pointer = JsonPointerChild("/slices", s);
    TESSEL_ASSIGN_OR_RETURN(SliceInput slice,
                            ReadSlice((*slices_json)[s], slice_pointer, devices != nullptr));
    total_devices += Product(slice.shape);
    if (total_devices > kMaxDevices) {
      return Error(slice_pointer,
                   absl::StrCat("expected at most ", kMaxDevices, " devices in all slices, got ",
                                total_devices, " up to this slice"));
    }
    // Hosts are numbered globally in slice order, so a slice's hosts are a contiguous range.
    slice.first_host = next_host;
    next_host += slice.num_hosts;
    slices.push_back(std::move(slice));
  }

  // Required with several slices (they talk only over DCN), optional but validated with one.
  if (Find(root, "dcn") != nullptr || slices.size() > 1) {
    TESSEL_ASSIGN_OR_RETURN(topology.dcn_,
                            ReadDcn(Find(root, "dcn"), "/dcn",
                                    absl::StrCat("required with ", slices.size(), " slices")));
  }

  if (devices != nullptr) {
    TESSEL_RETURN_IF_ERROR(ReadExplicitDevices(devices, "/devices", slices, &topology));
  } else {
    GenerateDevices(slices, &topology);
  }
  Finish(slices, &topology);
  return topology;
}

std::string_view IciKindName(IciKind kind) {
  switch (kind) {
    case IciKind::kTorus:
      return "torus";
    case IciKind::kSwitch:
      return "switch";
  }
  return "torus";  // unreachable: every enumerator is handled
}

std::optional<double> DeviceSpec::PeakTflops(std::string_view dtype) const {
  auto it = peak_tflops.find(std::string(dtype));
  if (it == peak_tflops.end()) return std::nullopt;
  return it->second;
}

// CHECKed, not a Status: ids reaching these accessors come from validated programs and
// topologies; user-given ids go through FindDevice / FindHost.
const Device& Topology::device(int64_t id) const {
  TESSEL_CHECK(id >= 0 && id < num_devices());
  return devices_[id];
}

const Slice& Topology::slice(int64_t index) const {
  TESSEL_CHECK(index >= 0 && index < num_slices());
  return slices_[index];
}

const Host& Topology::host(int64_t index) const {
  TESSEL_CHECK(index >= 0 && index < num_hosts());
  return hosts_[index];
}

// The message names the valid range and the topology, since the id usually comes from a
// command line or the environment (TESSEL_HOST_INDEX for FindHost).
absl::StatusOr<const Device*> Topology::FindDevice(int64_t id) const {
  if (id < 0 || id >= num_devices()) {
    return absl::OutOfRangeError(absl::StrCat("device id ", id, " is outside the topology",
                                              name_.empty() ? "" : " ", name_, " (ids 0..",
                                              num_devices() - 1, ")"));
  }
  return &devices_[id];
}

absl::StatusOr<const Host*> Topology::FindHost(int64_t index) const {
  if (index < 0 || index >= num_hosts()) {
    return absl::OutOfRangeError(absl::StrCat("host index ", index, " is outside the topology",
                                              name_.empty() ? "" : " ", name_, " (hosts 0..",
                                              num_hosts() - 1, ")"));
  }
  return &hosts_[index];
}

// Out-of-range input gives nullopt, not a CHECK as device() does: coordinates may come from
// users. Inside a slice every coordinate has a device, so the table never yields its -1 fill.
std::optional<int64_t> Topology::DeviceAt(int64_t slice, const std::vector<int64_t>& coords) const {
  if (slice < 0 || slice >= num_slices()) return std::nullopt;
  const std::vector<int64_t>& shape = slices_[slice].shape;
  if (coords.size() != shape.size()) return std::nullopt;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (coords[d] < 0 || coords[d] >= shape[d]) return std::nullopt;
  }
  return device_at_[slice][Linearize(coords, shape)];
}

std::vector<IciLink> Topology::IciLinks(int64_t slice_index) const {
  const Slice& s = slice(slice_index);
  std::vector<IciLink> links;
  // A switch has ports, not point-to-point links between devices (NumIciLinks counts them).
  if (ici_.kind != IciKind::kTorus) return links;
  const int64_t num_chips = Product(s.shape);
  for (size_t d = 0; d < s.shape.size(); ++d) {
    const int64_t n = s.shape[d];
    if (n == 1) continue;
    // With n == 2 the wraparound link would join the two chips the plain link already joins;
    // counted once, as the cost model treats such a dim as a line.
    const bool ring = s.wraparound[d] && n > 2;
    // Each link is emitted once, from its device_a end (the smaller coordinate, or the last
    // chip for the wraparound), so no pair appears twice.
    for (int64_t linear = 0; linear < num_chips; ++linear) {
      std::vector<int64_t> coords = Delinearize(linear, s.shape);
      IciLink link;
      link.slice = slice_index;
      link.dim = static_cast<int64_t>(d);
      link.device_a = device_at_[slice_index][linear];
      if (coords[d] < n - 1) {
        ++coords[d];
      } else if (ring) {
        coords[d] = 0;
        link.wraparound = true;
      } else {
        continue;
      }
      link.device_b = device_at_[slice_index][Linearize(coords, s.shape)];
      links.push_back(link);
    }
  }
  return links;
}

int64_t Topology::NumIciLinks(int64_t slice_index) const {
  const Slice& s = slice(slice_index);
  if (ici_.kind == IciKind::kSwitch) return s.num_devices();
  const int64_t num_chips = Product(s.shape);
  int64_t links = 0;
  for (size_t d = 0; d < s.shape.size(); ++d) {
    const int64_t n = s.shape[d];
    if (n == 1) continue;
    // The same count as IciLinks without building the list: num_chips / n lines along dim d,
    // each with n - 1 links, or n when it closes into a ring.
    const int64_t per_line = (s.wraparound[d] && n > 2) ? n : n - 1;
    links += per_line * (num_chips / n);
  }
  return links;
}

std::map<std::string, double> Topology::TotalPeakTflops() const {
  std::map<std::string, double> totals;
  for (const auto& [dtype, tflops] : device_spec_.peak_tflops) {
    totals[dtype] = tflops * static_cast<double>(num_devices());
  }
  return totals;
}

// Cannot overflow: hbm_bytes <= 2^44 (kMaxHbmBytes) and num_devices <= 2^18.
int64_t Topology::TotalHbmBytes() const { return device_spec_.hbm_bytes * num_devices(); }

absl::StatusOr<Topology> ParseTopology(std::string_view json_text, std::string_view source) {
  const std::string source_text(source);
  // Strict JSON (no comments), so preset files stay valid for any JSON tool; the meta keys
  // ("comment", "description") carry the documentation instead.
  TESSEL_ASSIGN_OR_RETURN(json root, ParseConfigJson(json_text, source_text));
  // The adapter that stops nlohmann's exceptions (STYLE.md: third-party exceptions become a
  // Status at the adapter); the builder checks types before it reads, so this is a backstop.
  try {
    return TopologyBuilder(source_text).Build(root);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_text, ": cannot read JSON: ", std::string(e.what())));
  } catch (const std::exception& e) {
    // Not the user's fault (e.g. bad_alloc): kInternal, still a Status rather than a crash.
    return absl::InternalError(
        absl::StrCat(source_text, ": unexpected error while reading the topology: ", e.what()));
  }
}

absl::StatusOr<Topology> LoadTopology(const std::string& path) {
  // A topology is a few KiB; 64 MiB leaves room for hand-written coordinate lists.
  constexpr int64_t kMaxTopologyFileBytes = int64_t{64} << 20;
  TESSEL_ASSIGN_OR_RETURN(std::string text,
                          ReadInputFile(path, "a JSON file", kMaxTopologyFileBytes));
  return ParseTopology(text, path);
}

absl::StatusOr<Topology> MakeUniformTopology(int64_t num_slices,
                                             const std::vector<int64_t>& slice_shape,
                                             int64_t hosts_per_slice,
                                             const std::vector<bool>& wraparound) {
  constexpr char kSource[] = "<uniform>";
  // The arguments are checked here (with "<uniform>" messages) before the JSON is built, so no
  // product below can overflow; the parse then validates everything else.
  if (num_slices < 1 || num_slices > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat(kSource, ": num_slices: expected a positive integer at most ", kMaxDevices,
                     ", got ", num_slices));
  }
  int64_t num_chips = 1;
  for (int64_t dim : slice_shape) {
    if (dim < 1 || dim > kMaxDevices || num_chips > kMaxDevices / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(kSource, ": slice_shape: expected positive dimensions with at most ",
                       kMaxDevices, " devices, got ", FormatInts(slice_shape)));
    }
    num_chips *= dim;
  }
  if (hosts_per_slice < 1 || num_chips % hosts_per_slice != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kSource, ": hosts_per_slice: expected a positive divisor of the ", num_chips,
        " devices of slice shape ", FormatInts(slice_shape), ", got ", hosts_per_slice));
  }
  // Built as JSON and parsed, so a synthetic topology passes exactly the validation and
  // numbering a topology file gets; there is no second way to make a Topology.
  json slice = {{"shape", slice_shape},
                {"wraparound",
                 wraparound.empty() ? std::vector<bool>(slice_shape.size(), false) : wraparound},
                {"hosts", hosts_per_slice},
                {"devices_per_host", num_chips / hosts_per_slice}};
  json root = {{"name", "uniform"},
               {"device_spec",
                {{"name", "test-device"},
                 {"peak_tflops", {{"bf16", 1.0}, {"f32", 1.0}}},
                 {"hbm_bytes", int64_t{16} << 30},
                 {"hbm_bandwidth_gbytes_per_s", 1000.0}}},
               {"ici", {{"kind", "torus"}, {"bandwidth_gbps", 400.0}, {"latency_us", 1.0}}},
               {"dcn", {{"bandwidth_gbps", 200.0}, {"latency_us", 10.0}}},
               {"slices", json::array()}};
  for (int64_t s = 0; s < num_slices; ++s) root["slices"].push_back(slice);
  return ParseTopology(root.dump(), kSource);
}

}  // namespace tessel::mesh
