#include "tessel/spmd/sharding.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"

namespace tessel::spmd {

std::string_view SubgroupTypeName(SubgroupType type) {
  switch (type) {
    case SubgroupType::kManual:
      return "manual";
    case SubgroupType::kUnreduced:
      return "unreduced";
    case SubgroupType::kReplicated:
      return "replicated";
  }
  // Unreachable (every enumerator returns above); keeps -Wreturn-type quiet.
  return "replicated";
}

// ----------------------------------------------------------------------------------------------
// Factories and normalization.
//
// Every factory returns the canonical form (sharding.h), because operator== and the hash
// compare representations: the partitioner memoizes reshard plans and replica groups keyed on
// shardings, and propagation asks "equal?" to decide whether anything must move. Two spellings
// of one layout that compared unequal would cost a collective that moves nothing.

Sharding Sharding::Manual() {
  Sharding s;
  s.kind_ = Kind::kManual;
  return s;
}

Sharding Sharding::Unreduced() {
  Sharding s;
  s.kind_ = Kind::kUnreduced;
  return s;
}

Sharding Sharding::AssignDevice(int64_t device_id) {
  TESSEL_CHECK(device_id >= 0);
  Sharding s;
  s.kind_ = Kind::kMaximal;
  // A [1] array holding the device, as XLA stores maximal shardings: UsesDevice, operator== and
  // the hash then need no special case for the device.
  s.tile_assignment_ = DeviceArray({1}, {device_id});
  return s;
}

absl::Status Sharding::ValidateTileAssignment(const DeviceArray& tile_assignment) {
  // Rank 0 would tile no dim and hold one device: that is {maximal}, spelled otherwise.
  if (tile_assignment.rank() == 0) {
    return absl::InvalidArgumentError("a tile assignment needs at least one dim");
  }
  for (int64_t d : tile_assignment.dims()) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat("tile dim ", d, " is < 1"));
  }
  if (tile_assignment.is_compact()) return absl::OkStatus();  // ids 0..n-1, each once
  const std::vector<int64_t>& ids = tile_assignment.device_ids();
  int64_t max_id = -1;
  for (int64_t id : ids) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("negative device id ", id));
    max_id = std::max(max_id, id);
  }
  auto twice = [](int64_t id) {
    return absl::InvalidArgumentError(absl::StrCat("device id ", id, " appears twice"));
  };
  // The same density threshold as DeviceArray's position table: a bitmap while it stays within
  // a small multiple of the id count, a hash set for sparse ids (a huge id in user text must not
  // allocate a huge bitmap).
  if (max_id <= 4 * static_cast<int64_t>(ids.size()) + 1024) {
    std::vector<bool> seen(max_id + 1, false);  // dense ids: a bitmap, no hashing
    for (int64_t id : ids) {
      if (seen[id]) return twice(id);
      seen[id] = true;
    }
    return absl::OkStatus();
  }
  absl::flat_hash_set<int64_t> seen;
  for (int64_t id : ids) {
    if (!seen.insert(id).second) return twice(id);
  }
  return absl::OkStatus();
}

// Tile keeps its input as is (XLA's HloSharding::Tile does too): with no subgroup dims there is
// nothing to reorder, and a tile assignment of one tile per dim is still a (trivial) tiling.
Sharding Sharding::Tile(DeviceArray tile_assignment) {
  TESSEL_CHECK_OK(ValidateTileAssignment(tile_assignment));
  Sharding s;
  s.kind_ = Kind::kTiled;
  s.tile_assignment_ = std::move(tile_assignment);
  return s;
}

Sharding Sharding::PartialTile(const DeviceArray& tiles) {
  TESSEL_CHECK_OK(ValidateTileAssignment(tiles));
  const int64_t group_size = tiles.dims().back();
  // Rank 1 means no data dim at all, and a group holding every device means one data tile:
  // either way every device holds the whole value.
  if (tiles.rank() == 1 || group_size == tiles.num_elements()) return Replicate();
  if (group_size == 1) {
    std::vector<int64_t> dims = tiles.dims();
    dims.pop_back();
    return Tile(tiles.Reshape(std::move(dims)));
  }
  // Devices of one replication group hold identical data, so their order carries no meaning;
  // sorting makes it canonical (XLA's PartialTile does the same, and torch_xla's
  // _get_group_assignment lists each group's devices sorted).
  Sharding s;
  s.kind_ = Kind::kTiled;
  s.tile_assignment_ = tiles.SortLastDimGroups();
  s.replicate_on_last_tile_dim_ = true;
  return s;
}

Sharding Sharding::Subgroup(DeviceArray tiles, std::vector<SubgroupType> types) {
  TESSEL_CHECK_OK(ValidateTileAssignment(tiles));
  TESSEL_CHECK(static_cast<int64_t>(types.size()) <= tiles.rank());
  if (types.empty()) return Tile(std::move(tiles));
  const int64_t data_rank = tiles.rank() - static_cast<int64_t>(types.size());
  // No data tiling and a single kind of subgroup: every device holds the value the same way
  // (all replicas, all partial sums, all manual), so the short kinds say it with no device
  // list at all.
  const bool one_type =
      std::all_of(types.begin(), types.end(), [&](SubgroupType t) { return t == types[0]; });
  if (one_type && Product(absl::MakeConstSpan(tiles.dims()).subspan(0, data_rank)) == 1) {
    switch (types[0]) {
      case SubgroupType::kManual:
        return Manual();
      case SubgroupType::kUnreduced:
        return Unreduced();
      case SubgroupType::kReplicated:
        return Replicate();
    }
  }

  // Drop subgroup dims of size 1, gather the dims of each type (in canonical type order) and
  // merge them into one dim per type.
  std::vector<int64_t> perm(data_rank);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::vector<int64_t> merged_dims(tiles.dims().begin(), tiles.dims().begin() + data_rank);
  std::vector<SubgroupType> merged_types;
  for (SubgroupType type :
       {SubgroupType::kManual, SubgroupType::kUnreduced, SubgroupType::kReplicated}) {
    int64_t size = 1;
    for (size_t i = 0; i < types.size(); ++i) {
      const int64_t dim = data_rank + static_cast<int64_t>(i);
      if (types[i] != type || tiles.dim(dim) == 1) continue;
      perm.push_back(dim);
      size *= tiles.dim(dim);
    }
    if (size > 1) {
      merged_dims.push_back(size);
      merged_types.push_back(type);
    }
  }
  for (size_t i = 0; i < types.size(); ++i) {
    const int64_t dim = data_rank + static_cast<int64_t>(i);
    if (tiles.dim(dim) == 1) perm.push_back(dim);  // trivial dims go last, then vanish
  }
  // Transposing the subgroup dims of one type next to each other, in their given order, and
  // reshaping merges them row-major: the earlier dim becomes the major part. The size-1 dims
  // moved last vanish in the reshape without moving any device.
  DeviceArray merged = tiles.Transpose(perm).Reshape(merged_dims);

  const int64_t data_tiles = Product(absl::MakeConstSpan(merged_dims).subspan(0, data_rank));
  if (merged_types.empty()) {
    if (data_rank == 0) return Replicate();  // only trivial subgroup dims: one device
    return Tile(std::move(merged));
  }
  if (merged_types.size() == 1 && data_tiles == 1) {
    switch (merged_types[0]) {
      case SubgroupType::kManual:
        return Manual();
      case SubgroupType::kUnreduced:
        return Unreduced();
      case SubgroupType::kReplicated:
        return Replicate();
    }
  }
  // Replication alone is spelled last_tile_dim_replicate, as XLA's Subgroup also returns a
  // PartialTile then; otherwise the same layout would have two spellings.
  if (merged_types.size() == 1 && merged_types[0] == SubgroupType::kReplicated) {
    return PartialTile(merged);
  }
  Sharding s;
  s.kind_ = Kind::kTiled;
  // Only a replicated last dim is sorted: the order along manual and unreduced dims is kept as
  // given (UnreducedGroups sorts when it lists groups, which is what collectives use).
  s.tile_assignment_ =
      merged_types.back() == SubgroupType::kReplicated ? merged.SortLastDimGroups() : merged;
  s.subgroup_types_ = std::move(merged_types);
  return s;
}

// Flat, as XLA's tuple shardings list the leaves of a (possibly nested) tuple shape.
Sharding Sharding::Tuple(std::vector<Sharding> elements) {
  for (const Sharding& e : elements) TESSEL_CHECK(!e.IsTuple());
  Sharding s;
  s.kind_ = Kind::kTuple;
  s.tuple_elements_ = std::move(elements);
  return s;
}

// ----------------------------------------------------------------------------------------------
// Queries.

bool Sharding::IsReplicated() const {
  if (kind_ == Kind::kTuple) {
    return std::all_of(tuple_elements_.begin(), tuple_elements_.end(),
                       [](const Sharding& e) { return e.IsReplicated(); });
  }
  return kind_ == Kind::kReplicated;
}

int64_t Sharding::NumSubgroupDims() const {
  if (kind_ != Kind::kTiled) return 0;
  if (replicate_on_last_tile_dim_) return 1;
  return static_cast<int64_t>(subgroup_types_.size());
}

int64_t Sharding::SubgroupDim(SubgroupType type) const {
  if (kind_ != Kind::kTiled) return -1;
  if (replicate_on_last_tile_dim_) {
    return type == SubgroupType::kReplicated ? tile_assignment_.rank() - 1 : -1;
  }
  for (size_t i = 0; i < subgroup_types_.size(); ++i) {
    if (subgroup_types_[i] == type) return TiledDataRank() + static_cast<int64_t>(i);
  }
  return -1;
}

int64_t Sharding::TiledDataRank() const {
  if (kind_ != Kind::kTiled) return 0;
  return tile_assignment_.rank() - NumSubgroupDims();
}

// 1 rather than a CHECK for non-tiled shardings: replicated, maximal and unreduced values are
// whole along every dim, and callers (LocalShape, the reshard planner) ask about every dim of a
// value whatever its sharding kind.
int64_t Sharding::num_tiles(int64_t dim) const {
  if (kind_ != Kind::kTiled || dim < 0 || dim >= TiledDataRank()) return 1;
  return tile_assignment_.dim(dim);
}

int64_t Sharding::NumTiles() const {
  if (kind_ != Kind::kTiled) return 1;
  return Product(absl::MakeConstSpan(tile_assignment_.dims()).subspan(0, TiledDataRank()));
}

std::optional<int64_t> Sharding::unique_device() const {
  if (kind_ != Kind::kMaximal) return std::nullopt;
  return tile_assignment_.AtLinear(0);
}

bool Sharding::UsesDevice(int64_t device_id) const {
  switch (kind_) {
    case Kind::kReplicated:
    case Kind::kManual:
    case Kind::kUnreduced:
      return true;
    // O(rank) for compact tile assignments, so asking every device stays O(devices * rank).
    case Kind::kMaximal:
    case Kind::kTiled:
      return tile_assignment_.IndexOf(device_id).has_value();
    case Kind::kTuple:
      return std::any_of(tuple_elements_.begin(), tuple_elements_.end(),
                         [&](const Sharding& e) { return e.UsesDevice(device_id); });
  }
  return false;
}

std::optional<std::vector<int64_t>> Sharding::TileAssignmentIndexOf(int64_t device_id) const {
  if (kind_ != Kind::kTiled) return std::nullopt;
  return tile_assignment_.IndexOf(device_id);
}

std::optional<std::vector<int64_t>> Sharding::TileIndexOf(int64_t device_id) const {
  std::optional<std::vector<int64_t>> index = TileAssignmentIndexOf(device_id);
  // Dropping the subgroup coordinates: replicas of one tile share the data-tile index.
  if (index) index->resize(TiledDataRank());
  return index;
}

std::vector<int64_t> Sharding::DevicesForTile(absl::Span<const int64_t> tile_index) const {
  TESSEL_CHECK(kind_ == Kind::kTiled);
  const int64_t data_rank = TiledDataRank();
  TESSEL_CHECK(static_cast<int64_t>(tile_index.size()) == data_rank);
  std::vector<int64_t> subgroup_dims(tile_assignment_.dims().begin() + data_rank,
                                     tile_assignment_.dims().end());
  std::vector<int64_t> full(tile_index.begin(), tile_index.end());
  full.resize(tile_assignment_.rank());
  // Row-major over the subgroup dims, so for a partial replication the holders come in the
  // sorted order PartialTile gave the replication group.
  std::vector<int64_t> devices;
  ForEachIndex(subgroup_dims, [&](absl::Span<const int64_t> sub) {
    std::copy(sub.begin(), sub.end(), full.begin() + data_rank);
    devices.push_back(tile_assignment_.at(full));
  });
  return devices;
}

std::vector<std::vector<int64_t>> Sharding::GroupsAlong(int64_t dim) const {
  std::vector<int64_t> outer_dims = tile_assignment_.dims();
  outer_dims[dim] = 1;
  std::vector<std::vector<int64_t>> groups;
  ForEachIndex(outer_dims, [&](absl::Span<const int64_t> outer) {
    std::vector<int64_t> index(outer.begin(), outer.end());
    std::vector<int64_t> group;
    for (int64_t i = 0; i < tile_assignment_.dim(dim); ++i) {
      index[dim] = i;
      group.push_back(tile_assignment_.at(index));
    }
    // Sorted: a group names a set of devices (holders of the same data, or of partial sums),
    // so one canonical order keeps the collectives built from it, and their printed text,
    // identical across hosts and runs.
    std::sort(group.begin(), group.end());
    groups.push_back(std::move(group));
  });
  return groups;
}

namespace {
std::vector<std::vector<int64_t>> Singletons(absl::Span<const int64_t> ids) {
  std::vector<std::vector<int64_t>> groups;
  for (int64_t id : ids) groups.push_back({id});
  return groups;
}
std::vector<int64_t> AllDevices(int64_t num_devices) {
  std::vector<int64_t> ids(num_devices);
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return ids;
}
}  // namespace

std::vector<std::vector<int64_t>> Sharding::ReplicationGroups(int64_t num_devices) const {
  TESSEL_CHECK(kind_ != Kind::kTuple);
  switch (kind_) {
    case Kind::kReplicated:
      return {AllDevices(num_devices)};
    case Kind::kMaximal:
      return {tile_assignment_.device_ids()};
    // A manual or unreduced value differs from device to device: no two hold identical data.
    case Kind::kManual:
    case Kind::kUnreduced:
      return Singletons(AllDevices(num_devices));
    default:
      break;
  }
  const int64_t dim = SubgroupDim(SubgroupType::kReplicated);
  if (dim < 0) return Singletons(tile_assignment_.device_ids());
  return GroupsAlong(dim);
}

std::vector<std::vector<int64_t>> Sharding::UnreducedGroups(int64_t num_devices) const {
  TESSEL_CHECK(kind_ != Kind::kTuple);
  switch (kind_) {
    case Kind::kUnreduced:
      return {AllDevices(num_devices)};
    // Maximal: the one device already holds the complete value, a group of one.
    case Kind::kMaximal:
      return {tile_assignment_.device_ids()};
    // Replicated and manual values are complete on each device: nothing to sum.
    case Kind::kReplicated:
    case Kind::kManual:
      return Singletons(AllDevices(num_devices));
    default:
      break;
  }
  const int64_t dim = SubgroupDim(SubgroupType::kUnreduced);
  if (dim < 0) return Singletons(tile_assignment_.device_ids());
  return GroupsAlong(dim);
}

// For an error message: the iota form where the device list has one (its text does not grow
// with the device count), and an explicit list cut after 200 characters.
std::string Sharding::ForMessage() const {
  constexpr size_t kMaxChars = 200;
  std::string text = ToString(DeviceListFormat::kIota);
  if (text.size() > kMaxChars) text = absl::StrCat(text.substr(0, kMaxChars), "...");
  return text;
}

absl::Status Sharding::Validate(const Shape& shape, int64_t num_devices) const {
  if (kind_ == Kind::kTuple) {
    if (!shape.is_tuple()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tuple sharding ", ForMessage(), " for non-tuple shape ", shape.ToString()));
    }
    if (shape.tuple_shapes().size() != tuple_elements_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sharding ", ForMessage(), " has ", tuple_elements_.size(), " elements but shape ",
          shape.ToString(), " has ", shape.tuple_shapes().size()));
    }
    for (size_t i = 0; i < tuple_elements_.size(); ++i) {
      TESSEL_RETURN_IF_ERROR(tuple_elements_[i].Validate(shape.tuple_shapes()[i], num_devices));
    }
    return absl::OkStatus();
  }
  // {replicated} is accepted for a tuple shape: it means every element replicated, and it is
  // what propagation writes on tuple-shaped nodes other than tuple() (propagation.cc).
  if (shape.is_tuple() && kind_ != Kind::kReplicated) {
    return absl::InvalidArgumentError(
        absl::StrCat("non-tuple sharding ", ForMessage(), " for tuple shape ", shape.ToString()));
  }
  if (kind_ == Kind::kTiled && TiledDataRank() != shape.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("sharding ", ForMessage(), " tiles ",
                                                   TiledDataRank(), " dims but shape ",
                                                   shape.ToString(), " has rank ", shape.rank()));
  }
  // Only the largest id matters for the range check, and a compact array's largest is n - 1.
  if (tile_assignment_.is_compact() && tile_assignment_.num_elements() <= num_devices) {
    return absl::OkStatus();  // ids 0..n-1; otherwise the scan below names the first bad one
  }
  for (int64_t id : tile_assignment_.device_ids()) {
    if (id >= num_devices) {
      return absl::OutOfRangeError(absl::StrCat("sharding ", ForMessage(), " uses device ", id,
                                                " but there are ", num_devices, " devices"));
    }
  }
  return absl::OkStatus();
}

// Field-wise: the factories keep every sharding canonical, so equal meaning is equal fields
// (compact tile assignments compare in O(rank)).
bool Sharding::operator==(const Sharding& other) const {
  return kind_ == other.kind_ && tile_assignment_ == other.tile_assignment_ &&
         replicate_on_last_tile_dim_ == other.replicate_on_last_tile_dim_ &&
         subgroup_types_ == other.subgroup_types_ && tuple_elements_ == other.tuple_elements_;
}

// ----------------------------------------------------------------------------------------------
// Printing.

std::string Sharding::ToString(DeviceListFormat format) const {
  switch (kind_) {
    case Kind::kReplicated:
      return "{replicated}";
    case Kind::kManual:
      return "{manual}";
    case Kind::kUnreduced:
      return "{unreduced}";
    case Kind::kMaximal:
      return absl::StrCat("{maximal device=", tile_assignment_.AtLinear(0), "}");
    case Kind::kTuple: {
      std::string out = "{";
      for (size_t i = 0; i < tuple_elements_.size(); ++i) {
        // XLA's HloSharding::ToString marks every fifth element's index; the parser skips the
        // comments, so the text reads back either way.
        if (i > 0) absl::StrAppend(&out, i % 5 == 0 ? absl::StrCat(", /*index=", i, "*/") : ", ");
        absl::StrAppend(&out, tuple_elements_[i].ToString(format));
      }
      return out + "}";
    }
    case Kind::kTiled:
      break;
  }
  // The explicit list is the default because torch_xla prints shardings that way and users
  // compare against it; the partitioner asks for kIota where the text would grow with the
  // device count.
  std::string out = absl::StrCat("{devices=[", absl::StrJoin(tile_assignment_.dims(), ","), "]");
  if (format == DeviceListFormat::kIota && tile_assignment_.is_compact()) {
    const std::vector<int64_t> perm = tile_assignment_.iota_transpose_perm();
    absl::StrAppend(&out, "<=[", absl::StrJoin(tile_assignment_.iota_reshape_dims(), ","), "]");
    // The identity transpose is omitted, as XLA prints "<=[8]" rather than "<=[8]T(0)".
    if (!std::is_sorted(perm.begin(), perm.end())) {
      absl::StrAppend(&out, "T(", absl::StrJoin(perm, ","), ")");
    }
  } else {
    absl::StrAppend(&out, absl::StrJoin(tile_assignment_.device_ids(), ","));
  }
  if (replicate_on_last_tile_dim_) out += " last_tile_dim_replicate";
  if (!subgroup_types_.empty()) {
    absl::StrAppend(&out, " last_tile_dims={",
                    absl::StrJoin(subgroup_types_, ", ",
                                  [](std::string* o, SubgroupType t) {
                                    absl::StrAppend(o, std::string(SubgroupTypeName(t)));
                                  }),
                    "}");
  }
  return out + "}";
}

std::ostream& operator<<(std::ostream& os, const Sharding& sharding) {
  return os << sharding.ToString();
}

// ----------------------------------------------------------------------------------------------
// Parsing: a small recursive-descent parser over the text, skipping whitespace and comments.

namespace {

class ShardingParser {
 public:
  explicit ShardingParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Sharding> Parse() {
    absl::StatusOr<Sharding> result = ParseTop();
    if (!result.ok()) return result;
    // Trailing text is an error, not ignored: "{replicated}}" or two shardings pasted together
    // should not quietly mean the first one.
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the closing '}'");
    return result;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad sharding \"", std::string(text_), "\": ", what));
  }
  absl::Status ErrorAt(const std::string& what) const {
    return Error(absl::StrCat(what, " at offset ", pos_));
  }

  // Comments are whitespace here, which is how XLA's "/*index=5*/" markers in tuple
  // shardings are read; an unterminated comment runs to the end (then "missing '}'").
  void SkipSpace() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "/*") {
        size_t end = text_.find("*/", pos_ + 2);
        pos_ = end == std::string_view::npos ? text_.size() : end + 2;
      } else {
        return;
      }
    }
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool Consume(char c) {
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }
  absl::Status Expect(char c) {
    if (Consume(c)) return absl::OkStatus();
    return ErrorAt(absl::StrCat("expected '", std::string(1, c), "'"));
  }
  // A word of letters, digits and '_'.
  std::string_view Word() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }
  absl::StatusOr<int64_t> Integer() {
    SkipSpace();
    size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    size_t digits = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      // 2^50 * 10 + 9 < 2^63, so the next step cannot overflow; no device id or dim comes near.
      if (value > (int64_t{1} << 50)) return ErrorAt("integer too large");
      value = value * 10 + (text_[pos_] - '0');
      ++pos_;
    }
    if (pos_ == digits) {
      pos_ = start;
      return ErrorAt("expected an integer");
    }
    return text_[start] == '-' ? -value : value;
  }
  // "[a,b,c]" (possibly empty).
  absl::StatusOr<std::vector<int64_t>> BracketList() {
    TESSEL_RETURN_IF_ERROR(Expect('['));
    std::vector<int64_t> values;
    if (Consume(']')) return values;
    do {
      TESSEL_ASSIGN_OR_RETURN(int64_t v, Integer());
      values.push_back(v);
    } while (Consume(','));
    TESSEL_RETURN_IF_ERROR(Expect(']'));
    return values;
  }

  absl::StatusOr<Sharding> ParseTop() {
    TESSEL_RETURN_IF_ERROR(Expect('{'));
    // A leaf starts with an attribute word, so a second '{' (or "{}", XLA's empty tuple) can
    // only be a tuple. XLA never nests tuple shardings (they are flat over the leaves).
    if (Peek('{') || Peek('}')) {  // tuple
      std::vector<Sharding> elements;
      if (Consume('}')) return Sharding::Tuple({});
      do {
        if (!Peek('{')) return ErrorAt("expected '{' starting a tuple element");
        ++pos_;
        TESSEL_ASSIGN_OR_RETURN(Sharding e, ParseLeafBody());
        elements.push_back(std::move(e));
      } while (Consume(','));
      TESSEL_RETURN_IF_ERROR(Expect('}'));
      return Sharding::Tuple(std::move(elements));
    }
    return ParseLeafBody();
  }

  // The attributes of one leaf, as read (checked for consistency by ParseLeafBody).
  struct LeafAttrs {
    bool replicated = false, manual = false, unreduced = false, maximal = false;
    bool last_tile_dim_replicate = false;
    std::optional<int64_t> device;
    std::optional<std::vector<int64_t>> tile_dims;
    std::vector<int64_t> ids;
    bool iota = false;
    std::vector<int64_t> iota_reshape, iota_perm;
    std::optional<std::vector<SubgroupType>> last_tile_dims;
  };

  // Parses the attributes after a leaf's '{' up to and including its '}'.
  absl::StatusOr<Sharding> ParseLeafBody() {
    LeafAttrs a;
    // Attributes are collected in any order first and checked for consistency afterwards, so
    // the messages name the conflict ("more than one sharding kind") rather than a position.
    while (!Consume('}')) {
      if (pos_ >= text_.size()) return Error("missing '}'");
      std::string_view word = Word();
      if (word.empty()) return ErrorAt("expected an attribute");
      if (word == "replicated") {
        a.replicated = true;
      } else if (word == "manual") {
        a.manual = true;
      } else if (word == "unreduced") {
        a.unreduced = true;
      } else if (word == "maximal") {
        a.maximal = true;
      } else if (word == "last_tile_dim_replicate") {
        a.last_tile_dim_replicate = true;
      } else if (word == "device") {
        TESSEL_RETURN_IF_ERROR(Expect('='));
        TESSEL_ASSIGN_OR_RETURN(a.device, Integer());
      } else if (word == "devices") {
        TESSEL_RETURN_IF_ERROR(ParseDevices(a));
      } else if (word == "last_tile_dims") {
        TESSEL_ASSIGN_OR_RETURN(a.last_tile_dims, ParseSubgroupTypes());
      } else {
        return ErrorAt(
            absl::StrCat("unknown or unsupported attribute \"", std::string(word), "\""));
      }
    }

    // Exactly one kind per leaf: "{replicated devices=[2]0,1}" has no meaning, and silently
    // preferring one word would hide a typo.
    const int kinds = int{a.replicated} + int{a.manual} + int{a.unreduced} + int{a.maximal} +
                      int{a.tile_dims.has_value()};
    // Subgroup markers describe trailing tile dims, so they need a tile assignment to attach to.
    if ((a.last_tile_dim_replicate || a.last_tile_dims) && !a.tile_dims) {
      return Error("last_tile_dim_replicate / last_tile_dims need devices=[...]");
    }
    if (kinds == 0) return Error("no sharding kind (replicated, maximal, manual, devices=...)");
    if (kinds > 1) return Error("more than one sharding kind");
    if (a.device && !a.maximal) return Error("device= is only valid with maximal");
    if (a.replicated) return Sharding::Replicate();
    if (a.manual) return Sharding::Manual();
    if (a.unreduced) return Sharding::Unreduced();
    if (a.maximal) {
      if (!a.device) return Error("maximal needs device=N");
      if (*a.device < 0) return Error(absl::StrCat("negative device id ", *a.device));
      return Sharding::AssignDevice(*a.device);
    }
    return BuildTiled(a);
  }

  // The value of `devices=`: "[dims]" then either an id list or XLA's iota form.
  absl::Status ParseDevices(LeafAttrs& a) {
    TESSEL_RETURN_IF_ERROR(Expect('='));
    TESSEL_ASSIGN_OR_RETURN(a.tile_dims, BracketList());
    SkipSpace();
    // XLA's iota (V2) tile assignment: "<=[reshape dims]" and an optional "T(perm)", in
    // place of the id list.
    if (text_.substr(pos_, 2) == "<=") {
      pos_ += 2;
      a.iota = true;
      TESSEL_ASSIGN_OR_RETURN(a.iota_reshape, BracketList());
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == 'T') {
        ++pos_;
        TESSEL_RETURN_IF_ERROR(Expect('('));
        do {
          TESSEL_ASSIGN_OR_RETURN(int64_t p, Integer());
          a.iota_perm.push_back(p);
        } while (Consume(','));
        TESSEL_RETURN_IF_ERROR(Expect(')'));
      }
    } else if (pos_ < text_.size() &&
               (text_[pos_] == '-' || std::isdigit(static_cast<unsigned char>(text_[pos_])))) {
      // A '-' is read too, so a negative id gets ValidateTileAssignment's "negative device
      // id" rather than a syntax error. No list at all is left to the count check below.
      do {
        TESSEL_ASSIGN_OR_RETURN(int64_t id, Integer());
        a.ids.push_back(id);
      } while (Consume(','));
    }
    return absl::OkStatus();
  }

  // The value of `last_tile_dims=`: "{manual, unreduced, replicated}" in any combination.
  absl::StatusOr<std::vector<SubgroupType>> ParseSubgroupTypes() {
    TESSEL_RETURN_IF_ERROR(Expect('='));
    TESSEL_RETURN_IF_ERROR(Expect('{'));
    std::vector<SubgroupType> types;
    if (Consume('}')) return types;
    do {
      std::string_view type = Word();
      if (type == "manual") {
        types.push_back(SubgroupType::kManual);
      } else if (type == "unreduced") {
        types.push_back(SubgroupType::kUnreduced);
      } else if (type == "replicated") {
        types.push_back(SubgroupType::kReplicated);
      } else {
        return ErrorAt(absl::StrCat("unknown subgroup type \"", std::string(type),
                                    "\" (expected manual, unreduced or replicated)"));
      }
    } while (Consume(','));
    TESSEL_RETURN_IF_ERROR(Expect('}'));
    return types;
  }

  // A tiled leaf (devices=...), with its subgroup dims, checked before any factory CHECKs.
  absl::StatusOr<Sharding> BuildTiled(LeafAttrs& a) {
    // Two spellings of the trailing subgroup dims at once would leave their count ambiguous.
    if (a.last_tile_dim_replicate && a.last_tile_dims) {
      return Error("both last_tile_dim_replicate and last_tile_dims");
    }
    for (int64_t d : *a.tile_dims) {
      if (d < 1) return Error(absl::StrCat("tile dim ", d, " is < 1"));
    }
    if (a.tile_dims->empty()) return Error("devices=[] has no dims");
    // Guards memory (an iota form names its devices implicitly); 2^24 devices is far more than
    // any topology Tessel loads.
    constexpr int64_t kMaxTiles = int64_t{1} << 24;
    int64_t num_tiles = 1;
    for (int64_t d : *a.tile_dims) {
      if (d > kMaxTiles / num_tiles) {
        return Error(absl::StrCat("more than ", kMaxTiles, " tiles"));
      }
      num_tiles *= d;
    }
    // The iota form never materializes its ids: DeviceArray keeps it compact, so an annotation
    // for 8192 devices parses in O(rank).
    DeviceArray tiles;
    if (a.iota) {
      absl::StatusOr<DeviceArray> iota =
          DeviceArray::IotaTransposed(*a.tile_dims, a.iota_reshape, a.iota_perm);
      if (!iota.ok()) return Error(std::string(iota.status().message()));
      tiles = *std::move(iota);
    } else {
      if (static_cast<int64_t>(a.ids.size()) != num_tiles) {
        return Error(absl::StrCat(a.ids.size(), " device ids for ", num_tiles, " tiles"));
      }
      tiles = DeviceArray(*a.tile_dims, a.ids);
    }
    // The factories TESSEL_CHECK the same conditions; checking first turns bad user text into
    // a Status instead of an abort.
    absl::Status valid = Sharding::ValidateTileAssignment(tiles);
    if (!valid.ok()) return Error(std::string(valid.message()));
    if (a.last_tile_dim_replicate) return Sharding::PartialTile(tiles);
    if (a.last_tile_dims) {
      // Subgroup() CHECKs this too; here it is the user's text that is wrong.
      if (static_cast<int64_t>(a.last_tile_dims->size()) > tiles.rank()) {
        return Error(absl::StrCat(a.last_tile_dims->size(), " subgroup types for ", tiles.rank(),
                                  " tile dims"));
      }
      return Sharding::Subgroup(std::move(tiles), *std::move(a.last_tile_dims));
    }
    return Sharding::Tile(std::move(tiles));
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Sharding> ParseSharding(std::string_view text) {
  return ShardingParser(text).Parse();
}

}  // namespace tessel::spmd
