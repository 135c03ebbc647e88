#include "tessel/spmd/sharded_tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::spmd {

std::vector<int64_t> Shard::data_dims() const {
  std::vector<int64_t> dims;
  for (const auto& [start, limit] : index) dims.push_back(limit - start);
  return dims;
}

absl::StatusOr<ShardedTensor> ShardedTensor::Create(const Shape& global_shape,
                                                    const Sharding& sharding, int64_t num_devices) {
  if (global_shape.is_tuple() || sharding.IsTuple()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sharded tensor needs an array shape and a "
                     "non-tuple sharding, got ",
                     global_shape.ToString(), " and ", sharding.ToString()));
  }
  // Manual pieces have no global layout to cut or assemble, so only the program knows them.
  if (sharding.IsManual() || sharding.SubgroupDim(SubgroupType::kManual) >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding ", sharding.ToString(),
        " is manual: its per-device pieces are defined by the program, not by a layout"));
  }
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices must be >= 1, got ", num_devices));
  }
  TESSEL_RETURN_IF_ERROR(sharding.Validate(global_shape, num_devices));

  ShardedTensor t;
  t.global_shape_ = global_shape;
  t.sharding_ = sharding;
  // One local shape for every device (SPMD): ceil(dim / tiles), as LocalShape in the
  // partitioner computes it, so Split's pieces match the partitioned program's parameters.
  // Written without dim + tiles - 1, which wraps for a dim near 2^63 (Python's shard() aborted).
  const int64_t rank = global_shape.rank();
  std::vector<int64_t> local_dims(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t tiles = sharding.num_tiles(d);
    local_dims[d] = global_shape.dim(d) / tiles + (global_shape.dim(d) % tiles != 0 ? 1 : 0);
  }
  t.local_shape_ = Shape(global_shape.dtype(), local_dims);

  auto full_range = [&] {
    std::vector<std::pair<int64_t, int64_t>> index;
    for (int64_t d = 0; d < rank; ++d) index.emplace_back(0, global_shape.dim(d));
    return index;
  };
  // Ranges follow the ceil rule: tile k starts at min(k * s, dim), so trailing tiles can be
  // short or empty ([dim, dim)) but never overlap, and their buffers are padded to s.
  if (sharding.IsTiled()) {
    const int64_t replicated_dim = sharding.SubgroupDim(SubgroupType::kReplicated);
    const int64_t unreduced_dim = sharding.SubgroupDim(SubgroupType::kUnreduced);
    for (int64_t id : sharding.device_list()) {
      std::vector<int64_t> full = *sharding.TileAssignmentIndexOf(id);
      Shard shard;
      shard.device_id = id;
      shard.tile_index.assign(full.begin(), full.begin() + rank);
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t dim = global_shape.dim(d);
        const int64_t s = local_dims[d];
        // min(k * s, dim), with k * s not formed when it exceeds dim (it could wrap near 2^63).
        auto bound = [&](int64_t k) { return s == 0 || k > dim / s ? dim : k * s; };
        shard.index.emplace_back(bound(full[d]), bound(full[d] + 1));
      }
      // Replication groups are sorted (PartialTile), so replica 0 of every tile is its lowest
      // device id: the copy Assemble reads.
      if (replicated_dim >= 0) shard.replica_id = full[replicated_dim];
      if (unreduced_dim >= 0) shard.unreduced_id = full[unreduced_dim];
      t.shards_.push_back(std::move(shard));
    }
  } else if (sharding.IsMaximal()) {
    // One shard only: the other devices hold nothing, and shard_for returns nullptr for them.
    Shard shard;
    shard.device_id = *sharding.unique_device();
    shard.index = full_range();
    shard.tile_index.assign(rank, 0);
    t.shards_.push_back(std::move(shard));
  } else {  // replicated or unreduced: every device holds the whole shape
    for (int64_t id = 0; id < num_devices; ++id) {
      Shard shard;
      shard.device_id = id;
      shard.index = full_range();
      shard.tile_index.assign(rank, 0);
      // For {replicated} every device is its own copy (torch_xla numbers replicas by device);
      // for {unreduced} every device holds its own partial value.
      (sharding.IsUnreduced() ? shard.unreduced_id : shard.replica_id) = id;
      t.shards_.push_back(std::move(shard));
    }
  }
  // Tile-assignment order depends on the sharding; ascending device ids give Split and
  // Assemble one fixed order for every sharding, and shard_for its binary search.
  std::sort(t.shards_.begin(), t.shards_.end(),
            [](const Shard& a, const Shard& b) { return a.device_id < b.device_id; });
  return t;
}

const Shard* ShardedTensor::shard_for(int64_t device_id) const {
  auto it = std::lower_bound(shards_.begin(), shards_.end(), device_id,
                             [](const Shard& s, int64_t id) { return s.device_id < id; });
  if (it == shards_.end() || it->device_id != device_id) return nullptr;
  return &*it;
}

namespace {

// Calls fn(src_linear, dst_linear, run) for each contiguous run of the last dim of a box of
// `extent` that starts at `src_start` in an array of `src_dims` and at `dst_start` in one of
// `dst_dims`. Nothing when the box is empty.
template <typename Fn>
void ForEachRun(absl::Span<const int64_t> src_dims, absl::Span<const int64_t> src_start,
                absl::Span<const int64_t> dst_dims, absl::Span<const int64_t> dst_start,
                absl::Span<const int64_t> extent, Fn&& fn) {
  const int64_t rank = static_cast<int64_t>(extent.size());
  for (int64_t e : extent) {
    if (e == 0) return;
  }
  // A scalar is one run of one element (ForEachIndex over zero outer dims would call once
  // too, but the last-dim arithmetic below needs rank >= 1).
  if (rank == 0) {
    fn(0, 0, 1);
    return;
  }
  auto strides = [](absl::Span<const int64_t> dims) {
    std::vector<int64_t> s(dims.size(), 1);
    for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
      s[i] = s[i + 1] * dims[i + 1];
    }
    return s;
  };
  // One memcpy per run of the last dim instead of one per element: the box is contiguous along
  // the last dim in both arrays, whatever their other dims.
  const std::vector<int64_t> src_strides = strides(src_dims);
  const std::vector<int64_t> dst_strides = strides(dst_dims);
  ForEachIndex(extent.subspan(0, rank - 1), [&](absl::Span<const int64_t> outer) {
    int64_t src = src_start[rank - 1], dst = dst_start[rank - 1];
    for (int64_t i = 0; i + 1 < rank; ++i) {
      src += (src_start[i] + outer[i]) * src_strides[i];
      dst += (dst_start[i] + outer[i]) * dst_strides[i];
    }
    fn(src, dst, extent[rank - 1]);
  });
}

}  // namespace

absl::StatusOr<std::vector<Literal>> ShardedTensor::Split(const Literal& global) const {
  // The shape (dtype included) must match exactly: Split copies raw bytes.
  if (global.shape() != global_shape_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot split a ", global.shape().ToString(),
                                                   " literal as ", global_shape_.ToString()));
  }
  const int64_t width = ByteWidth(global_shape_.dtype());
  const int64_t rank = global_shape_.rank();
  std::vector<Literal> locals;
  locals.reserve(shards_.size());
  for (const Shard& shard : shards_) {
    Literal local(local_shape_);  // zero-filled: the padding
    // Only the first partial value carries the data; the others stay zero, so the partial
    // values still sum to the value (the partitioner's all-reduce or Assemble add them up).
    if (shard.unreduced_id == 0) {
      std::vector<int64_t> src_start(rank), dst_start(rank, 0);
      for (int64_t d = 0; d < rank; ++d) src_start[d] = shard.index[d].first;
      ForEachRun(global_shape_.dims(), src_start, local_shape_.dims(), dst_start, shard.data_dims(),
                 [&](int64_t src, int64_t dst, int64_t run) {
                   std::memcpy(local.raw_data() + dst * width, global.raw_data() + src * width,
                               run * width);
                 });
    }
    locals.push_back(std::move(local));
  }
  return locals;
}

absl::StatusOr<Literal> ShardedTensor::Assemble(absl::Span<const Literal> locals) const {
  if (locals.size() != shards_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("assembling ", global_shape_.ToString(),
                                                   " under ", sharding_.ToString(), " needs ",
                                                   shards_.size(), " shards, got ", locals.size()));
  }
  // Shapes are checked before anything is copied: the runs below trust them and use raw
  // memcpy offsets.
  for (size_t i = 0; i < locals.size(); ++i) {
    if (locals[i].shape() != local_shape_) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, " (device ", shards_[i].device_id,
                                                     ") is ", locals[i].shape().ToString(),
                                                     ", expected ", local_shape_.ToString()));
    }
  }
  Literal global(global_shape_);
  const int64_t width = ByteWidth(global_shape_.dtype());
  const int64_t rank = global_shape_.rank();
  // Pass 0 copies the first partial value of each tile, pass 1 adds the other partial values.
  // Two passes because shards are in device order, which need not put unreduced_id 0 first:
  // a copy after an add would overwrite the sum. Replicas other than the first (replica_id
  // != 0) are skipped, so replicated data is read once and never added to itself.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < shards_.size(); ++i) {
      const Shard& shard = shards_[i];
      if (shard.replica_id != 0 || (shard.unreduced_id == 0) != (pass == 0)) continue;
      std::vector<int64_t> src_start(rank, 0), dst_start(rank);
      for (int64_t d = 0; d < rank; ++d) dst_start[d] = shard.index[d].first;
      const Literal& local = locals[i];
      ForEachRun(local_shape_.dims(), src_start, global_shape_.dims(), dst_start, shard.data_dims(),
                 [&](int64_t src, int64_t dst, int64_t run) {
                   if (shard.unreduced_id == 0) {
                     std::memcpy(global.raw_data() + dst * width, local.raw_data() + src * width,
                                 run * width);
                     return;
                   }
                   VisitDType(global_shape_.dtype(), [&]<typename T>() {
                     T* out = global.data<T>().data() + dst;
                     const T* in = local.data<T>().data() + src;
                     for (int64_t k = 0; k < run; ++k) {
                       // pred partial values combine with OR, as the partitioner's
                       // all-reduce of a pred does.
                       if constexpr (std::is_same_v<T, bool>) {
                         out[k] = out[k] || in[k];
                       } else {
                         out[k] = static_cast<T>(out[k] + in[k]);
                       }
                     }
                   });
                 });
    }
  }
  return global;
}

}  // namespace tessel::spmd
