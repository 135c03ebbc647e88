#include "tessel/transport/testing/collective_checks.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"

namespace tessel::transport::testing {
namespace {

constexpr int kDataMovement = -1;

struct Membership {
  std::vector<int64_t> members;
  int64_t index = 0;
};

Membership Find(const ReplicaGroups& groups, int64_t num_devices, int64_t device_id) {
  Membership m;
  if (groups.empty()) {
    for (int64_t d = 0; d < num_devices; ++d) m.members.push_back(d);
    m.index = device_id;
    return m;
  }
  for (const auto& g : groups) {
    auto it = std::find(g.begin(), g.end(), device_id);
    if (it != g.end()) {
      m.members = g;
      m.index = it - g.begin();
    }
  }
  return m;
}

std::string GroupsText(const ReplicaGroups& groups) {
  if (groups.empty()) return "{}";
  std::vector<std::string> parts;
  for (const auto& g : groups) parts.push_back(absl::StrCat("{", absl::StrJoin(g, ","), "}"));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

int64_t Apply(ReduceKind kind, int64_t a, int64_t b) {
  switch (kind) {
    case ReduceKind::kAdd:
      return a + b;
    case ReduceKind::kMultiply:
      return a * b;
    case ReduceKind::kMaximum:
      return std::max(a, b);
    case ReduceKind::kMinimum:
      return std::min(a, b);
    case ReduceKind::kAnd:
      return a & b;
    case ReduceKind::kOr:
      return a | b;
  }
  return a;
}

std::vector<int64_t> Inputs(int reduce_kind, DType dtype, int64_t device, int64_t count,
                            int64_t salt) {
  std::vector<int64_t> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = InputValue(reduce_kind, dtype, device, i, salt);
  return v;
}

std::vector<std::byte> AsBytes(DType dtype, const std::vector<int64_t>& values) {
  std::vector<std::byte> bytes(values.size() * ByteWidth(dtype));
  FillBuffer(dtype, values, bytes.data());
  return bytes;
}

absl::Status Compare(const std::string& what, DType dtype, const std::vector<std::byte>& got,
                     const std::vector<int64_t>& expected_values) {
  const std::vector<std::byte> expected = AsBytes(dtype, expected_values);
  if (got.size() != expected.size()) {
    return absl::InternalError(
        absl::StrCat(what, ": output size ", got.size(), " != ", expected.size()));
  }
  if (std::memcmp(got.data(), expected.data(), got.size()) == 0) return absl::OkStatus();
  const int64_t w = ByteWidth(dtype);
  for (size_t i = 0; i < expected_values.size(); ++i) {
    if (std::memcmp(got.data() + i * w, expected.data() + i * w, w) != 0) {
      int64_t got_bits = 0;
      std::memcpy(&got_bits, got.data() + i * w, w);
      return absl::InternalError(absl::StrCat(what, ": element ", i, " expected ",
                                              expected_values[i], " got raw bits 0x",
                                              absl::Hex(got_bits)));
    }
  }
  return absl::InternalError(absl::StrCat(what, ": outputs differ"));
}

std::vector<ReduceKind> ReductionsFor(DType dtype) {
  std::vector<ReduceKind> kinds = {ReduceKind::kAdd, ReduceKind::kMultiply, ReduceKind::kMaximum,
                                   ReduceKind::kMinimum};
  if (!IsFloating(dtype)) {
    kinds.push_back(ReduceKind::kAnd);
    kinds.push_back(ReduceKind::kOr);
  }
  return kinds;
}

}  // namespace

int64_t InputValue(int reduce_kind, DType dtype, int64_t device, int64_t index, int64_t salt) {
  const bool is_unsigned = dtype == DType::kU8 || dtype == DType::kU32 || dtype == DType::kU64;
  if (dtype == DType::kPred) {
    const bool mostly_true = reduce_kind == static_cast<int>(ReduceKind::kMultiply) ||
                             reduce_kind == static_cast<int>(ReduceKind::kMinimum) ||
                             reduce_kind == static_cast<int>(ReduceKind::kAnd);
    const int64_t h = (device * 3 + index * 7 + salt) % 5;
    return mostly_true ? (h != 0) : (h == 0);
  }
  if (reduce_kind == static_cast<int>(ReduceKind::kMultiply)) {
    const int64_t h = (device * 5 + index * 3 + salt) % 7;
    if (h == 0) return 2;
    if (h == 1) return is_unsigned ? 1 : -1;
    return 1;
  }
  if (reduce_kind == static_cast<int>(ReduceKind::kAnd) ||
      reduce_kind == static_cast<int>(ReduceKind::kOr)) {
    return (device * 37 + index * 11 + salt) % 256;
  }
  if (reduce_kind == kDataMovement) {
    const int64_t v = (device * 1000 + index * 7 + salt) % 251;
    return is_unsigned ? v : v - 125;
  }
  const int64_t v = (device * 7 + index * 13 + salt) % 9;
  return is_unsigned ? v : v - 4;
}

void FillBuffer(DType dtype, const std::vector<int64_t>& values, void* out) {
  VisitDType(dtype, [&]<typename T>() {
    T* p = static_cast<T*>(out);
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = values[i] != 0;
      } else if constexpr (std::is_integral_v<T>) {
        p[i] = static_cast<T>(values[i]);
      } else {
        p[i] = static_cast<T>(static_cast<float>(values[i]));
      }
    }
  });
}

std::vector<ReplicaGroups> CheckGroupSets(int64_t num_devices, bool mesh_groups) {
  std::vector<ReplicaGroups> sets = {ReplicaGroups{}};
  if (!mesh_groups) return sets;
  ReplicaGroups reversed(1);
  for (int64_t d = num_devices - 1; d >= 0; --d) reversed[0].push_back(d);
  sets.push_back(reversed);
  for (int64_t rows = 2; rows * 2 <= num_devices; ++rows) {
    if (num_devices % rows != 0) continue;
    const int64_t cols = num_devices / rows;
    ReplicaGroups row_groups(rows), col_groups(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        row_groups[r].push_back(r * cols + c);
        col_groups[c].push_back(r * cols + c);
      }
    }
    sets.push_back(row_groups);
    sets.push_back(col_groups);
    break;  // one 2D factorisation is enough
  }
  return sets;
}

absl::Status RunCollectiveChecks(Communicator& comm, int64_t device_id,
                                 const CheckOptions& options) {
  const int64_t num_devices = comm.device_map().num_devices();
  int64_t salt = 0;
  for (const ReplicaGroups& groups : CheckGroupSets(num_devices, options.mesh_groups)) {
    const Membership me = Find(groups, num_devices, device_id);
    const int64_t n = static_cast<int64_t>(me.members.size());
    const std::string gtext = GroupsText(groups);
    for (DType dtype : options.dtypes) {
      const int64_t w = ByteWidth(dtype);
      for (int64_t count_option : options.counts) {
        const int64_t count = count_option < 0 ? 3 * n + 1 : count_option;
        auto what = [&](const std::string& op) {
          return absl::StrCat(op, " ", DTypeName(dtype), " x ", count, " replica_groups=", gtext,
                              " on device ", device_id);
        };
        // all-reduce with every reduction.
        for (ReduceKind kind : ReductionsFor(dtype)) {
          ++salt;
          const int k = static_cast<int>(kind);
          std::vector<std::byte> in = AsBytes(dtype, Inputs(k, dtype, device_id, count, salt));
          std::vector<std::byte> out(count * w);
          TESSEL_RETURN_IF_ERROR(
              comm.AllReduce(device_id, groups, kind, dtype, in.data(), out.data(), count));
          std::vector<int64_t> expected = Inputs(k, dtype, me.members[0], count, salt);
          for (int64_t j = 1; j < n; ++j) {
            std::vector<int64_t> other = Inputs(k, dtype, me.members[j], count, salt);
            for (int64_t i = 0; i < count; ++i) expected[i] = Apply(kind, expected[i], other[i]);
          }
          TESSEL_RETURN_IF_ERROR(Compare(
              what(absl::StrCat("all-reduce(", ReduceKindName(kind), ")")), dtype, out, expected));
        }
        // reduce-scatter (add and maximum).
        for (ReduceKind kind : {ReduceKind::kAdd, ReduceKind::kMaximum}) {
          ++salt;
          const int k = static_cast<int>(kind);
          std::vector<std::byte> in = AsBytes(dtype, Inputs(k, dtype, device_id, n * count, salt));
          std::vector<std::byte> out(count * w);
          TESSEL_RETURN_IF_ERROR(
              comm.ReduceScatter(device_id, groups, kind, dtype, in.data(), out.data(), count));
          std::vector<int64_t> expected(count);
          for (int64_t j = 0; j < n; ++j) {
            std::vector<int64_t> other = Inputs(k, dtype, me.members[j], n * count, salt);
            for (int64_t i = 0; i < count; ++i) {
              const int64_t v = other[me.index * count + i];
              expected[i] = j == 0 ? v : Apply(kind, expected[i], v);
            }
          }
          TESSEL_RETURN_IF_ERROR(
              Compare(what(absl::StrCat("reduce-scatter(", ReduceKindName(kind), ")")), dtype, out,
                      expected));
        }
        // all-gather.
        {
          ++salt;
          std::vector<std::byte> in =
              AsBytes(dtype, Inputs(kDataMovement, dtype, device_id, count, salt));
          std::vector<std::byte> out(n * count * w);
          TESSEL_RETURN_IF_ERROR(
              comm.AllGather(device_id, groups, dtype, in.data(), out.data(), count));
          std::vector<int64_t> expected;
          for (int64_t j = 0; j < n; ++j) {
            std::vector<int64_t> other = Inputs(kDataMovement, dtype, me.members[j], count, salt);
            expected.insert(expected.end(), other.begin(), other.end());
          }
          TESSEL_RETURN_IF_ERROR(Compare(what("all-gather"), dtype, out, expected));
        }
        // all-to-all.
        {
          ++salt;
          std::vector<std::byte> in =
              AsBytes(dtype, Inputs(kDataMovement, dtype, device_id, n * count, salt));
          std::vector<std::byte> out(n * count * w);
          TESSEL_RETURN_IF_ERROR(
              comm.AllToAll(device_id, groups, dtype, in.data(), out.data(), count));
          std::vector<int64_t> expected;
          for (int64_t j = 0; j < n; ++j) {
            std::vector<int64_t> other =
                Inputs(kDataMovement, dtype, me.members[j], n * count, salt);
            expected.insert(expected.end(), other.begin() + me.index * count,
                            other.begin() + (me.index + 1) * count);
          }
          TESSEL_RETURN_IF_ERROR(Compare(what("all-to-all"), dtype, out, expected));
        }
        // collective-permute: shift by one inside each group, without wrap-around (so the
        // first member of each group receives zeros), then with wrap-around.
        for (bool wrap : {false, true}) {
          ++salt;
          SourceTargetPairs pairs;
          ReplicaGroups resolved = groups;
          if (resolved.empty()) {
            resolved.emplace_back();
            for (int64_t d = 0; d < num_devices; ++d) resolved[0].push_back(d);
          }
          for (const auto& g : resolved) {
            const int64_t gn = static_cast<int64_t>(g.size());
            for (int64_t j = 0; j < gn; ++j) {
              if (j + 1 < gn || (wrap && gn > 1)) pairs.push_back({g[j], g[(j + 1) % gn]});
            }
          }
          std::vector<std::byte> in =
              AsBytes(dtype, Inputs(kDataMovement, dtype, device_id, count, salt));
          std::vector<std::byte> out(count * w, std::byte{0x5a});
          TESSEL_RETURN_IF_ERROR(
              comm.CollectivePermute(device_id, pairs, dtype, in.data(), out.data(), count));
          std::vector<int64_t> expected(count, 0);
          if (me.index > 0 || (wrap && n > 1)) {
            expected =
                Inputs(kDataMovement, dtype, me.members[(me.index + n - 1) % n], count, salt);
          }
          TESSEL_RETURN_IF_ERROR(
              Compare(what(wrap ? "collective-permute(cycle)" : "collective-permute(shift)"), dtype,
                      out, expected));
        }
        // broadcast from the first and the last member.
        for (int64_t root : {int64_t{0}, n - 1}) {
          ++salt;
          std::vector<std::byte> buf =
              AsBytes(dtype, Inputs(kDataMovement, dtype, device_id, count, salt));
          TESSEL_RETURN_IF_ERROR(comm.Broadcast(device_id, groups, root, dtype, buf.data(), count));
          TESSEL_RETURN_IF_ERROR(
              Compare(what(absl::StrCat("broadcast(root ", root, ")")), dtype, buf,
                      Inputs(kDataMovement, dtype, me.members[root], count, salt)));
        }
        TESSEL_RETURN_IF_ERROR(comm.Barrier(device_id, groups));
        // send/recv around the ring of all devices.
        if (options.point_to_point && num_devices > 1) {
          ++salt;
          const int64_t next = (device_id + 1) % num_devices;
          const int64_t prev = (device_id + num_devices - 1) % num_devices;
          std::vector<std::byte> in =
              AsBytes(dtype, Inputs(kDataMovement, dtype, device_id, count, salt));
          std::vector<std::byte> out(count * w);
          TESSEL_RETURN_IF_ERROR(comm.Send(device_id, next, /*tag=*/5, dtype, in.data(), count));
          TESSEL_RETURN_IF_ERROR(comm.Recv(device_id, prev, /*tag=*/5, dtype, out.data(), count));
          TESSEL_RETURN_IF_ERROR(Compare(what("send-recv"), dtype, out,
                                         Inputs(kDataMovement, dtype, prev, count, salt)));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessel::transport::testing
