// CommunicatorCollectives against core's reference InProcessCollectives: every collective over
// dims 0, 1 and 2 of an s32[4,6,8] operand on 4 devices of 2 hosts (in-process transport), with
// rows and columns of a 2x2 mesh as replica groups. Integer data, so results must be equal.
#include "tessel/mesh/runtime/collective_adapter.h"

#include <functional>
#include <thread>

#include "gtest/gtest.h"
#include "tessel/core/collectives.h"
#include "tessel/transport/inproc_transport.h"

namespace tessel::mesh {
namespace {

constexpr int64_t kDevices = 4;

Literal Operand(int64_t device, std::vector<int64_t> dims) {
  Literal value(Shape(DType::kS32, dims));
  auto data = value.data<int32_t>();
  for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) {
    data[i] = static_cast<int32_t>(device * 1000 + i * 7 % 97);
  }
  return value;
}

using Op = std::function<absl::StatusOr<Literal>(CollectiveBackend&, int64_t, const Literal&)>;

// Runs `op` on every device with both backends; expects equal results.
void ExpectSameAsReference(const Op& op, std::vector<int64_t> dims) {
  auto job = transport::InProcTransport::Create(
                 2, transport::DeviceMap::Uniform(/*num_hosts=*/2, /*devices_per_host=*/2,
                                                  /*hosts_per_slice=*/1))
                 .value();
  std::vector<std::unique_ptr<CommunicatorCollectives>> adapters;
  for (int64_t h = 0; h < 2; ++h) {
    adapters.push_back(std::make_unique<CommunicatorCollectives>(&job->host(h)));
  }
  InProcessCollectives reference(kDevices);
  std::vector<absl::StatusOr<Literal>> got(kDevices, absl::UnknownError("")),
      want(kDevices, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < kDevices; ++d) {
    threads.emplace_back([&, d] {
      Literal input = Operand(d, dims);
      got[d] = op(*adapters[d / 2], d, input);
      want[d] = op(reference, d, input);
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t d = 0; d < kDevices; ++d) {
    ASSERT_TRUE(got[d].ok()) << got[d].status();
    ASSERT_TRUE(want[d].ok()) << want[d].status();
    EXPECT_EQ(got[d]->shape(), want[d]->shape()) << "device " << d;
    EXPECT_TRUE(AllClose(*got[d], *want[d], 0, 0)) << "device " << d;
  }
}

const ReplicaGroups kRows = {{0, 1}, {2, 3}};
const ReplicaGroups kColumns = {{0, 2}, {1, 3}};

TEST(CollectiveAdapterTest, MoveDimRoundTrip) {
  Literal value = Operand(1, {3, 4, 5});
  for (int64_t dim = 0; dim < 3; ++dim) {
    Literal front = MoveDimToFront(value, dim);
    EXPECT_EQ(front.shape().dim(0), value.shape().dim(dim));
    EXPECT_TRUE(AllClose(MoveFrontDimTo(front, value.shape(), dim), value, 0, 0));
  }
  // [3,4,5] dim 1 to front: element (a, k, b) lands at (k, a, b).
  Literal front = MoveDimToFront(value, 1);
  EXPECT_EQ(front.data<int32_t>()[(2 * 3 + 1) * 5 + 4], value.data<int32_t>()[(1 * 4 + 2) * 5 + 4]);
}

TEST(CollectiveAdapterTest, AllReduceMatchesReference) {
  for (const ReplicaGroups& groups : {kRows, kColumns, ReplicaGroups{}}) {
    ExpectSameAsReference(
        [&](CollectiveBackend& b, int64_t d, const Literal& x) {
          return b.AllReduce(d, x, groups, ReduceKind::kAdd);
        },
        {4, 6, 8});
  }
}

TEST(CollectiveAdapterTest, AllGatherEveryDim) {
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (const ReplicaGroups& groups : {kRows, kColumns}) {
      ExpectSameAsReference([&](CollectiveBackend& b, int64_t d,
                                const Literal& x) { return b.AllGather(d, x, groups, dim); },
                            {4, 6, 8});
    }
  }
}

TEST(CollectiveAdapterTest, ReduceScatterEveryDim) {
  for (int64_t dim = 0; dim < 3; ++dim) {
    ExpectSameAsReference(
        [&](CollectiveBackend& b, int64_t d, const Literal& x) {
          return b.ReduceScatter(d, x, kColumns, dim, ReduceKind::kMaximum);
        },
        {4, 6, 8});
  }
}

TEST(CollectiveAdapterTest, AllToAllEveryDim) {
  for (int64_t dim = 0; dim < 3; ++dim) {
    ExpectSameAsReference(
        [&](CollectiveBackend& b, int64_t d, const Literal& x) {
          return b.AllToAll(d, x, ReplicaGroups{{0, 1, 2, 3}}, dim);
        },
        {4, 8, 12});
  }
}

TEST(CollectiveAdapterTest, CollectivePermute) {
  ExpectSameAsReference(
      [&](CollectiveBackend& b, int64_t d, const Literal& x) {
        return b.CollectivePermute(d, x, {{0, 1}, {1, 2}, {2, 3}});
      },
      {4, 6});
}

// A dim preceded only by size-1 dims is run on the operand's own buffer (no copy to move it to
// the front): the results must not change.
TEST(CollectiveAdapterTest, DimAfterSizeOneDimsMatchesReference) {
  ExpectSameAsReference([&](CollectiveBackend& b, int64_t d,
                            const Literal& x) { return b.AllGather(d, x, kRows, 1); },
                        {1, 4, 6});
  ExpectSameAsReference(
      [&](CollectiveBackend& b, int64_t d, const Literal& x) {
        return b.ReduceScatter(d, x, kColumns, 1, ReduceKind::kAdd);
      },
      {1, 4, 6});
  ExpectSameAsReference(
      [&](CollectiveBackend& b, int64_t d, const Literal& x) {
        return b.AllToAll(d, x, ReplicaGroups{{0, 1, 2, 3}}, 2);
      },
      {1, 1, 8, 3});
  // Empty operands take the same path.
  ExpectSameAsReference([&](CollectiveBackend& b, int64_t d,
                            const Literal& x) { return b.AllGather(d, x, kRows, 1); },
                        {2, 0, 3});
}

TEST(CollectiveAdapterTest, IndivisibleReduceScatterIsAnError) {
  auto job = transport::InProcTransport::Create(1, transport::DeviceMap::Uniform(1, 2)).value();
  CommunicatorCollectives adapter(&job->host(0));
  absl::StatusOr<Literal> r =
      adapter.ReduceScatter(0, Operand(0, {3, 2}), {{0, 1}}, 0, ReduceKind::kAdd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not divisible"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace tessel::mesh
