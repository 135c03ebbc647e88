#include "tessel/spmd/visualize.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"
#include "tessel/spmd/sharded_tensor.h"

namespace tessel::spmd {

std::string CompactDeviceList(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    // Runs of 3 or more become "a-b"; a pair stays "a,b", which is no longer than "a-b" and
    // easier to read.
    if (j - i >= 2) {
      parts.push_back(absl::StrCat(ids[i], "-", ids[j]));
    } else {
      for (size_t k = i; k <= j; ++k) parts.push_back(absl::StrCat(ids[k]));
    }
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

namespace {

struct Cell {
  std::string devices;
  std::string range;
};

// An odd leftover space goes to the right. Precondition: text.size() <= width (the caller's
// width is the widest cell plus margins, so the subtraction cannot wrap).
std::string Center(const std::string& text, size_t width) {
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

std::string RangeText(const Shard& shard) {
  std::vector<std::string> parts;
  for (const auto& [start, limit] : shard.index) parts.push_back(absl::StrCat(start, ":", limit));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

}  // namespace

absl::StatusOr<std::string> VisualizeSharding(const Shape& shape, const Sharding& sharding,
                                              int64_t num_devices) {
  if (shape.is_tuple() || shape.rank() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("VisualizeSharding draws 1-D and 2-D values only, got ", shape.ToString()));
  }
  // Without a device count, the sharding's own ids define it; replicated and unreduced name no
  // ids, so one device is enough to lay them out and their cells say "all devices" instead.
  const bool names_all = num_devices <= 0;
  if (names_all) {
    num_devices = 1;
    // Just enough devices for every id the sharding names to pass ShardedTensor's range check.
    if (sharding.IsTiled() || sharding.IsMaximal()) {
      for (int64_t id : sharding.device_list()) num_devices = std::max(num_devices, id + 1);
    }
  }
  TESSEL_ASSIGN_OR_RETURN(ShardedTensor t, ShardedTensor::Create(shape, sharding, num_devices));

  // Cells indexed by the data tile index (row, column). A 1-D value is drawn as one row so its
  // blocks read left to right like the dim's indices, as JAX draws it.
  const int64_t rows = shape.rank() == 2 ? sharding.num_tiles(0) : 1;
  const int64_t cols = shape.rank() == 2   ? sharding.num_tiles(1)
                       : shape.rank() == 1 ? sharding.num_tiles(0)
                                           : 1;
  std::vector<std::vector<Cell>> cells(rows, std::vector<Cell>(cols));
  // The shards of each cell in one pass (a scan per cell was quadratic in the device count).
  std::vector<std::vector<const Shard*>> holders(static_cast<size_t>(rows * cols));
  for (const Shard& shard : t.shards()) {
    const std::vector<int64_t>& ti = shard.tile_index;
    const int64_t cell = ti.size() == 2 ? ti[0] * cols + ti[1] : ti.size() == 1 ? ti[0] : 0;
    holders[static_cast<size_t>(cell)].push_back(&shard);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      // The devices of this tile, grouped by unreduced position: devices within a group hold
      // the same partial value, and the groups' values add up ("0,1 + 2,3").
      std::vector<std::vector<int64_t>> partials;
      const Shard* any = nullptr;
      for (const Shard* holder : holders[static_cast<size_t>(r * cols + c)]) {
        const Shard& shard = *holder;
        if (any == nullptr) any = &shard;
        if (static_cast<int64_t>(partials.size()) <= shard.unreduced_id) {
          partials.resize(shard.unreduced_id + 1);
        }
        partials[shard.unreduced_id].push_back(shard.device_id);
      }
      Cell& cell = cells[r][c];
      if (any == nullptr) continue;  // cannot happen for a validated tiling
      if (names_all && (sharding.IsReplicated() || sharding.IsUnreduced())) {
        cell.devices = sharding.IsReplicated() ? "all devices" : "all devices (unreduced)";
      } else {
        std::vector<std::string> groups;
        groups.reserve(partials.size());
        for (auto& group : partials) groups.push_back(CompactDeviceList(group));
        cell.devices = absl::StrJoin(groups, " + ");
      }
      // Every holder of a tile has the same index ranges, so any one of them describes it.
      cell.range = RangeText(*any);
    }
  }

  // One width for every column, so the borders line up whatever the text of each cell.
  size_t width = 0;
  for (const auto& row : cells) {
    for (const Cell& cell : row) width = std::max({width, cell.devices.size(), cell.range.size()});
  }
  width += 2;  // one space of margin on each side
  std::string border = "+";
  for (int64_t c = 0; c < cols; ++c) border += std::string(width, '-') + "+";
  border += "\n";
  std::string out = border;
  for (const auto& row : cells) {
    std::string devices_line = "|", range_line = "|";
    for (const Cell& cell : row) {
      devices_line += Center(cell.devices, width) + "|";
      range_line += Center(cell.range, width) + "|";
    }
    absl::StrAppend(&out, devices_line, "\n", range_line, "\n", border);
  }
  return out;
}

}  // namespace tessel::spmd
