#include "tessel/spmd/partition_spec.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"

namespace tessel::spmd {

// A name prints bare only when Parse reads it back as that name (no leading digit or '-', which
// begin an index, and only [A-Za-z0-9_.-]); any other is quoted, with the quote it does not hold
// (Parse cannot produce a name holding both). The fuzzer found "\x85" printed bare.
std::string AxisRef::ToString() const {
  if (is_index()) return absl::StrCat(index());
  const std::string& n = name();
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  };
  if (!n.empty() && !std::isdigit(static_cast<unsigned char>(n[0])) && n[0] != '-' &&
      std::all_of(n.begin(), n.end(), name_char)) {
    return n;
  }
  const char* quote = n.find('\'') == std::string::npos ? "'" : "\"";
  return absl::StrCat(quote, n, quote);
}

// The same syntax Parse reads (no spaces, Python's None), so a printed spec can be pasted back
// on a command line.
std::string PartitionSpec::Entry::ToString() const {
  if (is_none()) return "None";
  if (!tuple_) return axes_[0].ToString();
  return absl::StrCat(
      "(",
      absl::StrJoin(axes_, ",",
                    [](std::string* out, const AxisRef& a) { absl::StrAppend(out, a.ToString()); }),
      ")");
}

std::string PartitionSpec::ToString() const {
  return absl::StrJoin(
      entries_, ",", [](std::string* out, const Entry& e) { absl::StrAppend(out, e.ToString()); });
}

// ----------------------------------------------------------------------------------------------
// Parsing the command-line form.
//
// The text is what a user would write inside Python's P(...) / mesh partition_spec tuples:
// "0,None", "('data','fsdp'),None", "x,(y,z)". Quotes are optional so that the form survives a
// shell without escaping; None may also be written none or _.

namespace {

class SpecParser {
 public:
  explicit SpecParser(std::string_view text) : text_(text) {}

  absl::StatusOr<PartitionSpec> Parse() {
    std::vector<PartitionSpec::Entry> entries;
    SkipSpace();
    while (pos_ < text_.size()) {
      TESSEL_ASSIGN_OR_RETURN(PartitionSpec::Entry e, ParseEntry());
      entries.push_back(std::move(e));
      SkipSpace();
      if (pos_ >= text_.size()) break;
      if (text_[pos_] != ',') {
        return Error(absl::StrCat("unexpected '", std::string(text_.substr(pos_, 1)),
                                  "' at offset ", pos_, " (entries are separated by ',')"));
      }
      ++pos_;
      SkipSpace();
      if (pos_ >= text_.size() && !entries.empty()) break;  // trailing comma, as in (0,)
    }
    return PartitionSpec(std::move(entries));
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad partition_spec \"", std::string(text_), "\": ", what));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::StatusOr<AxisRef> ParseAxis() {
    SkipSpace();
    size_t start = pos_;
    if (pos_ < text_.size() &&
        (text_[pos_] == '-' || std::isdigit(static_cast<unsigned char>(text_[pos_])))) {
      ++pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      std::string digits(text_.substr(start, pos_ - start));
      // At most 15 characters keeps std::stoll far from overflow (it would throw). A negative
      // index is read so ShardingFromPartitionSpec can report it against the mesh's axes.
      if (digits == "-" || digits.size() > 15) {
        return Error(absl::StrCat("bad axis index \"", digits, "\""));
      }
      return AxisRef(static_cast<int64_t>(std::stoll(digits)));
    }
    // Unquoted names may contain '-' and '.' ("dcn-data") but cannot start with '-' or a digit,
    // which begin an index above; such names need quotes.
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
            text_[pos_] == '-' || text_[pos_] == '.')) {
      ++pos_;
    }
    if (pos_ == start) {
      if (pos_ >= text_.size()) return Error("expected an axis at the end");
      return Error(absl::StrCat("expected an axis at '", std::string(text_.substr(pos_, 1)),
                                "' (offset ", pos_, ")"));
    }
    // Names may be anything a HybridMesh/Mesh accepts; quotes are allowed around them.
    return AxisRef(std::string(text_.substr(start, pos_ - start)));
  }
  absl::StatusOr<PartitionSpec::Entry> ParseEntry() {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      ++pos_;
      std::vector<AxisRef> axes;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ')') return Error("empty tuple \"()\"");
      while (true) {
        SkipSpace();
        TESSEL_ASSIGN_OR_RETURN(AxisRef axis, ParseQuotedOrAxis());
        // A tuple entry lists the axes of one dim, so None has no meaning inside it; the likely
        // intent is a whole spec wrapped in parentheses.
        if (!axis.is_index() && IsNoneWord(axis.name())) {
          return Error(
              "None inside a tuple (write the spec without outer parentheses, e.g. 0,None)");
        }
        axes.push_back(std::move(axis));
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          SkipSpace();
          if (pos_ < text_.size() && text_[pos_] == ')') break;
          continue;
        }
        break;
      }
      if (pos_ >= text_.size() || text_[pos_] != ')') return Error("missing ')'");
      ++pos_;
      return PartitionSpec::Entry(Axes(std::move(axes)));
    }
    // An empty entry (",," or a leading ",") reads as None. A trailing comma adds no entry
    // (Parse stops first), as in Python's (0,).
    if (pos_ >= text_.size() || text_[pos_] == ',') return PartitionSpec::Entry(kNone);
    TESSEL_ASSIGN_OR_RETURN(AxisRef axis, ParseQuotedOrAxis());
    if (!axis.is_index() && IsNoneWord(axis.name())) return PartitionSpec::Entry(kNone);
    return PartitionSpec::Entry(std::move(axis));
  }
  // A quoted name is always a name: '0' is the axis called "0", not axis index 0.
  absl::StatusOr<AxisRef> ParseQuotedOrAxis() {
    if (pos_ < text_.size() && (text_[pos_] == '\'' || text_[pos_] == '"')) {
      const char quote = text_[pos_++];
      size_t end = text_.find(quote, pos_);
      if (end == std::string_view::npos) return Error("unterminated quote");
      std::string name(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
      if (name.empty()) return Error("empty axis name");
      return AxisRef(std::move(name));
    }
    return ParseAxis();
  }
  static bool IsNoneWord(const std::string& word) {
    return word == "None" || word == "none" || word == "_";
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<PartitionSpec> PartitionSpec::Parse(std::string_view text) {
  return SpecParser(text).Parse();
}

// ----------------------------------------------------------------------------------------------
// Translation to a Sharding.

absl::StatusOr<Sharding> ShardingFromPartitionSpec(const Mesh& mesh, int64_t rank,
                                                   const PartitionSpec& spec) {
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat("negative tensor rank ", rank));
  // One entry per dim, as torch_xla's mark_sharding asserts (JAX would pad a short spec with
  // None; here a missing entry is an error).
  if (spec.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("partition_spec (", spec.ToString(), ") has ",
                                                   spec.size(), " entries for a rank-", rank,
                                                   " tensor; it needs one entry per dim"));
  }
  // Resolve every axis to its index; check range and single use.
  std::vector<std::vector<int64_t>> entry_axes(rank);
  std::vector<int64_t> used_in(mesh.rank(), -1);
  for (int64_t d = 0; d < rank; ++d) {
    const PartitionSpec::Entry& entry = spec[d];
    // The parser refuses "()", but a PartitionSpec built in C++ can hold Axes{}.
    if (entry.is_tuple() && entry.axes().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("partition_spec[", d, "] is an empty tuple"));
    }
    for (const AxisRef& ref : entry.axes()) {
      int64_t axis;
      if (ref.is_index()) {
        axis = ref.index();
        if (axis < 0 || axis >= mesh.rank()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "partition_spec[", d, "] (", spec.ToString(), ") refers to mesh axis ", axis,
              ", outside the mesh of ", mesh.rank(), " axes ", mesh.AxesToString()));
        }
      } else {
        absl::StatusOr<int64_t> index = mesh.AxisIndex(ref.name());
        if (!index.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("unknown mesh axis \"", ref.name(),
                                                         "\" in partition_spec[", d,
                                                         "]; mesh has axes ", mesh.AxesToString()));
        }
        axis = *index;
      }
      // torch_xla and JAX forbid using one mesh axis for two dims: the device's coordinate on
      // that axis would pick its tile along both dims, a diagonal that no tile assignment can
      // express (the off-diagonal tiles would have no device).
      if (used_in[axis] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("mesh axis ", ref.ToString(), " is used twice in partition_spec (",
                         spec.ToString(), "), in entries ", used_in[axis], " and ", d,
                         "; each mesh axis may shard at most one dim"));
      }
      used_in[axis] = d;
      entry_axes[d].push_back(axis);
    }
  }

  const bool all_none = std::all_of(entry_axes.begin(), entry_axes.end(),
                                    [](const std::vector<int64_t>& a) { return a.empty(); });
  // The torch_xla shortcuts: a 0-d tensor, a 1-device mesh or an all-None spec is replicated.
  if (rank == 0 || mesh.size() == 1 || all_none) return Sharding::Replicate();

  // Tile assignment: used axes in spec order, then unused axes ascending. Transposing the
  // logical mesh this way puts, for every device, its coordinates on the axes of dim 0 first,
  // then dim 1's, ...; a tuple's axes stay adjacent in the order written, so the first one is
  // the major part of the dim's tile index (torch_xla's _get_tile_assignment).
  std::vector<int64_t> perm;
  for (const auto& axes : entry_axes) perm.insert(perm.end(), axes.begin(), axes.end());
  const int64_t num_used = static_cast<int64_t>(perm.size());
  for (int64_t a = 0; a < mesh.rank(); ++a) {
    if (used_in[a] < 0) perm.push_back(a);
  }
  DeviceArray transposed = mesh.logical_mesh().Transpose(perm);
  // Devices per replication group: those that differ only in their coordinates on unused axes.
  const int64_t replicas = Product(absl::MakeConstSpan(transposed.dims()).subspan(num_used));
  const bool any_none = std::any_of(entry_axes.begin(), entry_axes.end(),
                                    [](const std::vector<int64_t>& a) { return a.empty(); });

  // Data tile counts per tensor dim (1 for None; product of the tuple's axes otherwise).
  std::vector<int64_t> tile_dims(rank, 1);
  for (int64_t d = 0; d < rank; ++d) {
    for (int64_t axis : entry_axes[d]) tile_dims[d] *= mesh.axis_size(axis);
  }
  // Every dim sharded and every axis used: each device holds exactly one tile, no replication.
  if (!any_none && num_used == mesh.rank()) {
    // Plain tiling (torch_xla ShardingType.TILED): the transposed mesh, tuples merged.
    return Sharding::Tile(transposed.Reshape(tile_dims));
  }
  // Partial replication (ShardingType.PARTIAL): the transposed mesh is [used..., unused...]
  // row-major, so reshaping to [tile dims..., replicas] puts each replication group in the
  // last dim; PartialTile sorts the groups and collapses trivial ones.
  std::vector<int64_t> dims = tile_dims;
  dims.push_back(replicas);
  return Sharding::PartialTile(transposed.Reshape(std::move(dims)));
}

}  // namespace tessel::spmd
