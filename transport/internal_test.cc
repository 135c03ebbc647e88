// Unit tests of the transport's internal pieces: wire format, replica groups, reduction
// kernels, buffer pool, mailbox matching and statistics.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/fingerprint.h"
#include "tessel/transport/collective_stats.h"
#include "tessel/transport/internal/buffer_pool.h"
#include "tessel/transport/internal/doorbell.h"
#include "tessel/transport/internal/groups.h"
#include "tessel/transport/internal/host_link.h"
#include "tessel/transport/internal/mailbox.h"
#include "tessel/transport/internal/reduce.h"
#include "tessel/transport/internal/shared_memory.h"
#include "tessel/transport/internal/wire.h"

namespace tessel::transport::internal {
namespace {

using ::testing::HasSubstr;

TEST(WireTest, HeaderRoundTrips) {
  WireHeader h;
  h.type = MessageType::kData;
  h.channel = Channel::kPointToPoint;
  h.sequence = 0x0102030405060708ULL;
  h.src = 7;
  h.dst = -3;
  h.src_host = 2;
  h.phase = 4;
  h.step = 99;
  h.segment = 12345;
  h.signature.kind = CollectiveKind::kReduceScatter;
  h.signature.dtype = DType::kBF16;
  h.signature.reduce_kind = static_cast<uint8_t>(ReduceKind::kMaximum);
  h.signature.element_count = 1 << 30;
  h.signature.group_id = 0xdeadbeefcafef00dULL;
  h.payload_bytes = 77;
  std::array<std::byte, kWireHeaderBytes> bytes;
  EncodeHeader(h, bytes.data());
  absl::StatusOr<WireHeader> back = DecodeHeader(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->sequence, h.sequence);
  EXPECT_EQ(back->src, 7);
  EXPECT_EQ(back->dst, -3);
  EXPECT_EQ(back->src_host, 2);
  EXPECT_EQ(back->phase, 4);
  EXPECT_EQ(back->step, 99u);
  EXPECT_EQ(back->segment, 12345u);
  EXPECT_EQ(back->signature, h.signature);
  EXPECT_EQ(back->payload_bytes, 77u);
  EXPECT_EQ(back->channel, Channel::kPointToPoint);
  EXPECT_EQ(h.signature.ToString(),
            "reduce-scatter(maximum, bf16, 1073741824 elements, groups #deadbeefcafef00d)");
}

TEST(WireTest, OtherProtocolVersionIsRefused) {
  WireHeader h;
  std::array<std::byte, kWireHeaderBytes> bytes;
  EncodeHeader(h, bytes.data());
  const uint16_t other = kProtocolVersion + 1;
  std::memcpy(bytes.data() + 4, &other, 2);
  absl::StatusOr<WireHeader> back = DecodeHeader(bytes.data(), bytes.size());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(back.status().message()),
      HasSubstr(absl::StrCat("peer speaks tessel transport protocol version ", kProtocolVersion + 1,
                             ", this host speaks version ", kProtocolVersion)));
}

TEST(WireTest, GarbageIsRejected) {
  std::array<std::byte, kWireHeaderBytes> bytes{};
  EXPECT_EQ(DecodeHeader(bytes.data(), bytes.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHeader(bytes.data(), 3).status().code(), absl::StatusCode::kInvalidArgument);
  WireHeader h;
  EncodeHeader(h, bytes.data());
  EXPECT_EQ(DecodeHeader(bytes.data(), 40).status().code(), absl::StatusCode::kInvalidArgument);
  bytes[48] = std::byte{200};  // collective kind
  EXPECT_EQ(DecodeHeader(bytes.data(), bytes.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GroupsTest, ResolvesTheCallersGroup) {
  absl::StatusOr<GroupView> g = ResolveGroup({{0, 2}, {3, 1}}, 4, 1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->members, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(g->index, 1);
  absl::StatusOr<GroupView> all = ResolveGroup({}, 3, 2);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->members, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_NE(GroupsFingerprint({{0, 1}, {2, 3}}, 4), GroupsFingerprint({{0, 2}, {1, 3}}, 4));
  EXPECT_EQ(GroupsFingerprint({}, 4), GroupsFingerprint({}, 4));
  EXPECT_EQ(GroupsToString({{0, 1}, {2, 3}}), "{{0,1},{2,3}}");
  EXPECT_EQ(PairsToString({{0, 1}, {1, 0}}), "{{0,1},{1,0}}");
}

// What hosts compare across processes (protocol version 4): FNV-1a with the standard offset
// basis over counts and ids as 8 little-endian bytes each.
TEST(GroupsTest, FingerprintsAreFnv1aOfCountsAndIds) {
  EXPECT_EQ(GroupsFingerprint({{1, 0}}, 2), Fingerprint().Int(1).Int(2).Int(1).Int(0).value());
  EXPECT_EQ(GroupsFingerprint({}, 2), Fingerprint().Int(1).Int(2).Int(0).Int(1).value());
  EXPECT_EQ(PairsFingerprint({{0, 1}}),
            Fingerprint().U64(0x7065726d75746500ULL).Int(1).Int(0).Int(1).value());
  const DeviceMap m = DeviceMap::Uniform(2, 1, 1);
  EXPECT_EQ(m.Fingerprint(), Fingerprint().Int(2).Int(0).Int(1).Int(0).Int(1).value());
}

TEST(GroupsTest, RejectsBadGroups) {
  EXPECT_THAT(std::string(ResolveGroup({{0, 1}, {2, 5}}, 4, 0).status().message()),
              HasSubstr("device id 5 is outside the job's 4 devices"));
  EXPECT_THAT(std::string(ResolveGroup({{0, 1}, {}}, 4, 0).status().message()),
              HasSubstr("group 1 is empty"));
  EXPECT_THAT(std::string(ResolveGroup({{0, 1}}, 4, 3).status().message()),
              HasSubstr("device 3 is not in replica_groups={{0,1}}"));
}

TEST(GroupsTest, SplitsBySlice) {
  DeviceMap map = DeviceMap::Uniform(4, 2, 2);  // slices {0..3}, {4..7}
  std::vector<std::vector<int64_t>> slices;
  int64_t my_slice = -1, my_local = -1;
  GroupView all = ResolveGroup({}, 8, 5).value();
  ASSERT_TRUE(SplitBySlice(all, map, &slices, &my_slice, &my_local));
  EXPECT_EQ(slices, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(my_slice, 1);
  EXPECT_EQ(my_local, 1);
  // One member per slice: flat.
  EXPECT_FALSE(
      SplitBySlice(ResolveGroup({{0, 4}}, 8, 0).value(), map, &slices, &my_slice, &my_local));
  // Unequal counts: flat.
  EXPECT_FALSE(SplitBySlice(ResolveGroup({{0, 1, 2, 4, 5}}, 8, 0).value(), map, &slices, &my_slice,
                            &my_local));
  // One slice: flat.
  EXPECT_FALSE(
      SplitBySlice(ResolveGroup({{0, 1, 2, 3}}, 8, 0).value(), map, &slices, &my_slice, &my_local));
}

TEST(ReduceTest, CombinesEveryKind) {
  std::vector<float> a = {1, -2, 3, NAN}, b = {4, 5, -6, 1}, out(4);
  Combine(ReduceKind::kAdd, DType::kF32, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(out[0], 5);
  EXPECT_EQ(out[2], -3);
  Combine(ReduceKind::kMaximum, DType::kF32, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(out[1], 5);
  EXPECT_TRUE(std::isnan(out[3]));
  Combine(ReduceKind::kMinimum, DType::kF32, b.data(), a.data(), out.data(), 4);
  EXPECT_EQ(out[2], -6);
  EXPECT_TRUE(std::isnan(out[3]));
  Combine(ReduceKind::kMultiply, DType::kF32, a.data(), b.data(), out.data(), 3);
  EXPECT_EQ(out[1], -10);

  std::vector<int32_t> i = {std::numeric_limits<int32_t>::max(), 6}, j = {1, 3}, k(2);
  Combine(ReduceKind::kAdd, DType::kS32, i.data(), j.data(), k.data(), 2);
  EXPECT_EQ(k[0], std::numeric_limits<int32_t>::min());  // wraps
  Combine(ReduceKind::kAnd, DType::kS32, i.data(), j.data(), k.data(), 2);
  EXPECT_EQ(k[1], 2);
  Combine(ReduceKind::kOr, DType::kS32, i.data(), j.data(), k.data(), 2);
  EXPECT_EQ(k[1], 7);

  std::vector<uint8_t> p = {0, 1, 1, 0}, q = {0, 0, 1, 1}, r(4);  // pred
  Combine(ReduceKind::kAdd, DType::kPred, p.data(), q.data(), r.data(), 4);
  EXPECT_EQ(r, (std::vector<uint8_t>{0, 1, 1, 1}));
  Combine(ReduceKind::kMultiply, DType::kPred, p.data(), q.data(), r.data(), 4);
  EXPECT_EQ(r, (std::vector<uint8_t>{0, 0, 1, 0}));
  Combine(ReduceKind::kMinimum, DType::kPred, p.data(), q.data(), r.data(), 4);
  EXPECT_EQ(r, (std::vector<uint8_t>{0, 0, 1, 0}));

  std::vector<bf16> x = {bf16(1.0f), bf16(256.0f)}, y = {bf16(0.5f), bf16(1.0f)}, z(2);
  Combine(ReduceKind::kAdd, DType::kBF16, x.data(), y.data(), z.data(), 2);
  EXPECT_EQ(static_cast<float>(z[0]), 1.5f);
  EXPECT_EQ(static_cast<float>(z[1]), 256.0f);  // 257 rounds to bf16's 256

  EXPECT_FALSE(CheckReduction(ReduceKind::kOr, DType::kBF16).ok());
  EXPECT_TRUE(CheckReduction(ReduceKind::kOr, DType::kPred).ok());
}

TEST(ReduceTest, HandlesUnalignedAndAliasedBuffers) {
  const int64_t n = 5000;
  std::vector<std::byte> raw_a(n * 8 + 3), raw_b(n * 8 + 1);
  std::vector<double> expected(n);
  for (int64_t i = 0; i < n; ++i) {
    const double a = i * 0.5, b = i * 0.25;
    std::memcpy(raw_a.data() + 3 + i * 8, &a, 8);
    std::memcpy(raw_b.data() + 1 + i * 8, &b, 8);
    expected[i] = a + b;
  }
  // out aliases the unaligned lhs.
  Combine(ReduceKind::kAdd, DType::kF64, raw_a.data() + 3, raw_b.data() + 1, raw_a.data() + 3, n);
  for (int64_t i = 0; i < n; ++i) {
    double got;
    std::memcpy(&got, raw_a.data() + 3 + i * 8, 8);
    ASSERT_EQ(got, expected[i]) << i;
  }
}

TEST(BufferPoolTest, ReusesReturnedBuffers) {
  BufferPool pool(1 << 20);
  std::unique_ptr<PooledBuffer> a = pool.Acquire(5000);
  EXPECT_EQ(a->size(), 5000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
  const std::byte* first = a->data();
  a.reset();
  std::unique_ptr<PooledBuffer> b = pool.Acquire(8000);  // same 8 KiB class
  EXPECT_EQ(b->data(), first);
  std::unique_ptr<PooledBuffer> big = pool.Acquire(4 << 20);  // above the cap: freed on return
  big.reset();
}

Message MakeMessage(int64_t src, int64_t dst, uint64_t sequence, CallSignature sig) {
  Message m;
  m.header.channel = Channel::kCollective;
  m.header.src = src;
  m.header.dst = dst;
  m.header.src_host = 1;
  m.header.sequence = sequence;
  m.header.signature = sig;
  return m;
}

TEST(MailboxTest, MatchesByKeyAndDetectsEarlyMismatch) {
  Mailbox box(0, {0});
  CallSignature ar;
  ar.kind = CollectiveKind::kAllReduce;
  ar.dtype = DType::kF32;
  ar.element_count = 4;
  CallSignature ag = ar;
  ag.kind = CollectiveKind::kAllGather;
  box.Deliver(MakeMessage(1, 0, 0, ar));
  ASSERT_TRUE(box.BeginCall(0, 0, ar).ok());
  absl::StatusOr<Message> m =
      box.Take(MailKey{Channel::kCollective, 0, 1, 0, 0, 0, 0}, 1, absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(m.ok()) << m.status();
  box.EndCall(0);
  // Nothing else arrives: deadline.
  ASSERT_TRUE(box.BeginCall(0, 1, ar).ok());
  EXPECT_EQ(box.Take(MailKey{Channel::kCollective, 0, 1, 1, 0, 0, 0}, 1,
                     absl::Now() + absl::Milliseconds(20))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  box.EndCall(0);
  // A peer ahead of us with another collective: reported when we reach that call.
  box.Deliver(MakeMessage(1, 0, 2, ag));
  absl::Status s = box.BeginCall(0, 2, ar);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("collective mismatch at call #2"));
  EXPECT_FALSE(box.failure().ok());
}

// A payload whose bytes are still being written (a shared-memory slot whose header overtook
// them): Take hands it out only once it is ready, and gives up on a failure or the deadline.
class LatePayload : public Payload {
 public:
  explicit LatePayload(std::atomic<bool>* ready) : ready_(ready) {}
  const std::byte* data() const override { return bytes_; }
  size_t size() const override { return sizeof(bytes_); }
  absl::StatusOr<bool> ready() const override { return ready_->load(); }

 private:
  std::atomic<bool>* ready_;
  std::byte bytes_[8] = {};
};

// Delivers a message from device 1 to device 0 whose payload is ready once `ready` is true.
void DeliverLate(Mailbox& box, std::atomic<bool>* ready) {
  Message m = MakeMessage(1, 0, 0, CallSignature{});
  m.payload = std::make_unique<LatePayload>(ready);
  box.Deliver(std::move(m));
}

TEST(MailboxTest, TakeWaitsUntilThePayloadIsReady) {
  const MailKey key{Channel::kCollective, 0, 1, 0, 0, 0, 0};
  {
    Mailbox box(0, {0});
    std::atomic<bool> ready{false};
    DeliverLate(box, &ready);
    std::thread writer([&] {
      absl::SleepFor(absl::Milliseconds(30));
      ready = true;
    });
    const absl::Time start = absl::Now();
    absl::StatusOr<Message> got = box.Take(key, 1, start + absl::Seconds(30));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(ready.load());
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(25));
    writer.join();
  }
  {
    Mailbox box(0, {0});
    std::atomic<bool> ready{false};
    DeliverLate(box, &ready);
    EXPECT_EQ(box.Take(key, 1, absl::Now() + absl::Milliseconds(30)).status().code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  {
    Mailbox box(0, {0});
    std::atomic<bool> ready{false};
    DeliverLate(box, &ready);
    std::thread failer([&] {
      absl::SleepFor(absl::Milliseconds(30));
      box.Fail(absl::UnavailableError("lost host 1"), false);
    });
    absl::StatusOr<Message> got = box.Take(key, 1, absl::Now() + absl::Seconds(30));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("lost host 1"));
    failer.join();
  }
}

// A payload whose bytes can never come (ShmPayload over a corrupt segment).
class CorruptPayload : public Payload {
 public:
  const std::byte* data() const override { return nullptr; }
  size_t size() const override { return 0; }
  absl::StatusOr<bool> ready() const override {
    return absl::DataLossError("shared memory segment S is corrupt: slot 0 of host 1 ...");
  }
};

// Take fails the whole job with the payload's error (broadcast to the other hosts, naming this
// host) instead of waiting for the deadline or returning a message without its bytes.
TEST(MailboxTest, TakeFailsTheJobWhenThePayloadCanNeverBeReady) {
  Mailbox box(0, {0});
  std::vector<absl::Status> broadcast;
  box.set_abort_callback([&](const absl::Status& s) { broadcast.push_back(s); });
  Message m = MakeMessage(1, 0, 0, CallSignature{});
  m.payload = std::make_unique<CorruptPayload>();
  box.Deliver(std::move(m));
  const absl::Time start = absl::Now();
  absl::StatusOr<Message> got =
      box.Take(MailKey{Channel::kCollective, 0, 1, 0, 0, 0, 0}, 1, start + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(got.status().message()),
              ::testing::StartsWith("host 0: shared memory segment S is corrupt"));
  EXPECT_EQ(box.failure(), got.status());
  ASSERT_EQ(broadcast.size(), 1u);
  EXPECT_EQ(broadcast[0], got.status());
}

TEST(MailboxTest, WaitForADepartedHostFailsAtOnce) {
  Mailbox box(0, {0});
  std::thread waiter([&] {
    absl::StatusOr<Message> m = box.Take(MailKey{Channel::kCollective, 0, 1, 0, 0, 0, 0}, 1,
                                         absl::Now() + absl::Seconds(30));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("host 1 left the job"));
  });
  absl::SleepFor(absl::Milliseconds(20));
  box.MarkDeparted(1);
  waiter.join();
}

TEST(MailboxTest, FailWakesWaitersAndCallsTheAbortCallbackOnce) {
  Mailbox box(0, {0});
  int aborts = 0;
  box.set_abort_callback([&](const absl::Status&) { ++aborts; });
  std::thread waiter([&] {
    absl::StatusOr<Message> m = box.Take(MailKey{Channel::kCollective, 0, 1, 0, 0, 0, 0}, 1,
                                         absl::Now() + absl::Seconds(30));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  });
  absl::SleepFor(absl::Milliseconds(20));
  box.Fail(absl::UnavailableError("lost host 1"), true);
  box.Fail(absl::InternalError("second"), true);
  waiter.join();
  EXPECT_EQ(aborts, 1);
  EXPECT_EQ(box.failure().message(), "lost host 1");
}

// The same waits with a spin phase longer than every wait in the test: a waiter still spinning
// must see each kind of wake-up (a message, a departure, a failure) and the deadline.
TEST(MailboxTest, SpinningTakeSeesMessagesDeparturesFailuresAndDeadlines) {
  const absl::Duration spin = absl::Seconds(20);
  const MailKey key{Channel::kCollective, 0, 1, 0, 0, 0, 0};
  CallSignature ar;
  ar.kind = CollectiveKind::kAllReduce;
  ar.dtype = DType::kF32;
  ar.element_count = 4;
  {
    Mailbox box(0, {0}, spin);
    ASSERT_TRUE(box.BeginCall(0, 0, ar).ok());
    std::thread sender([&] {
      absl::SleepFor(absl::Milliseconds(20));
      box.Deliver(MakeMessage(7, 0, 0, ar));  // another key first: the waiter keeps waiting
      absl::SleepFor(absl::Milliseconds(20));
      box.Deliver(MakeMessage(1, 0, 0, ar));
    });
    const absl::Time start = absl::Now();
    absl::StatusOr<Message> m = box.Take(key, 1, start + absl::Seconds(30));
    sender.join();
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->header.src, 1);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }
  {
    Mailbox box(0, {0}, spin);
    std::thread departer([&] {
      absl::SleepFor(absl::Milliseconds(20));
      box.MarkDeparted(1);
    });
    EXPECT_EQ(box.Take(key, 1, absl::Now() + absl::Seconds(30)).status().code(),
              absl::StatusCode::kUnavailable);
    departer.join();
  }
  {
    Mailbox box(0, {0}, spin);
    std::thread failer([&] {
      absl::SleepFor(absl::Milliseconds(20));
      box.Fail(absl::UnavailableError("lost host 1"), false);
    });
    absl::StatusOr<Message> m = box.Take(key, 1, absl::Now() + absl::Seconds(30));
    EXPECT_EQ(m.status().message(), "lost host 1");
    failer.join();
  }
  {
    // The spin never outlasts the deadline.
    Mailbox box(0, {0}, spin);
    const absl::Time start = absl::Now();
    EXPECT_EQ(box.Take(key, 1, start + absl::Milliseconds(50)).status().code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }
}

// Bells outside the mailbox, as a shared-memory segment's: a "sender" queues a message where
// only the poller finds it and rings the destination's bell; the waiting thread must wake on
// that bell and take the message through its own poller, asleep or spinning. Fail rings those
// bells too.
TEST(MailboxTest, AWaitingTakeWakesOnItsBellsAndRunsThePoller) {
  const MailKey key{Channel::kCollective, 0, 1, 0, 0, 0, 0};
  for (const absl::Duration spin : {absl::ZeroDuration(), absl::Seconds(20)}) {
    auto bells = std::make_shared<std::array<Doorbell, kDoorbells>>();
    Mailbox box(0, {0}, spin);
    box.UseDoorbells(bells->data(), bells);
    std::atomic<bool> queued{false};
    std::atomic<int> waiter_polls{0};
    const std::thread::id waiter = std::this_thread::get_id();
    box.set_poller([&] {
      if (std::this_thread::get_id() == waiter) ++waiter_polls;
      if (queued.exchange(false)) box.Deliver(MakeMessage(1, 0, 0, CallSignature{}));
    });
    std::thread sender([&] {
      absl::SleepFor(absl::Milliseconds(20));
      queued = true;
      RingDoorbell((*bells)[DoorbellIndex(0)]);
    });
    const absl::Time start = absl::Now();
    absl::StatusOr<Message> got = box.Take(key, 1, start + absl::Seconds(30));
    sender.join();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->header.src, 1);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    EXPECT_GE(waiter_polls.load(), 2);  // before the ring, and after it

    std::thread failer([&] {
      absl::SleepFor(absl::Milliseconds(20));
      box.Fail(absl::UnavailableError("lost host 1"), false);
    });
    const absl::Time again = absl::Now();
    EXPECT_EQ(box.Take(key, 1, again + absl::Seconds(30)).status().code(),
              absl::StatusCode::kUnavailable);
    EXPECT_LT(absl::Now() - again, absl::Seconds(10));
    failer.join();
  }
}

TEST(DoorbellTest, SleepEndsAtARingAtOnceIfTheSequenceMovedAndAtTheDeadline) {
  Doorbell bell;
  const uint32_t seen = bell.sequence.load();
  RingDoorbell(bell);  // nobody asleep: no system call, but the sequence moves
  EXPECT_NE(bell.sequence.load(), seen);
  absl::Time start = absl::Now();
  SleepOnDoorbell(bell, seen, start + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  start = absl::Now();
  SleepOnDoorbell(bell, bell.sequence.load(), start + absl::Milliseconds(30));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(25));

  const uint32_t before = bell.sequence.load();
  std::thread ringer([&] {
    while (bell.sleepers.load() == 0) sched_yield();  // ring while the other thread sleeps
    RingDoorbell(bell);
  });
  start = absl::Now();
  SleepOnDoorbell(bell, before, start + absl::Seconds(30));
  ringer.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(bell.sleepers.load(), 0u);
}

// The futex is shared: a process that opened the segment (its own mapping, through
// /proc/<pid>/fd) wakes a thread of the creator asleep on a bell in it.
TEST(DoorbellTest, ARingFromAnotherProcessWakesASleeperInTheSegment) {
  absl::StatusOr<std::shared_ptr<ShmSegment>> segment = ShmSegment::Create({2, 1, 4096});
  ASSERT_TRUE(segment.ok()) << segment.status();
  Doorbell& bell = (*segment)->doorbells()[DoorbellIndex(5)];
  const uint32_t seen = bell.sequence.load();
  const std::string descriptor = (*segment)->descriptor();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::shared_ptr<ShmSegment>> opened = ShmSegment::Open(descriptor);
    if (!opened.ok()) _exit(2);
    Doorbell& remote = (*opened)->doorbells()[DoorbellIndex(5)];
    for (int i = 0; i < 20000 && remote.sleepers.load() == 0; ++i) usleep(500);
    RingDoorbell(remote);
    _exit(0);
  }
  const absl::Time start = absl::Now();
  while (bell.sequence.load() == seen && absl::Now() - start < absl::Seconds(20)) {
    SleepOnDoorbell(bell, seen, start + absl::Seconds(30));
  }
  EXPECT_NE(bell.sequence.load(), seen);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(SendTrackerTest, SpinningWaitSeesReleasesAndHonoursTheDeadline) {
  SendTracker tracker;
  tracker.Acquire();
  tracker.Acquire();
  std::thread io([&] {
    absl::SleepFor(absl::Milliseconds(20));
    tracker.Release();
    absl::SleepFor(absl::Milliseconds(20));
    tracker.Release();
  });
  const absl::Time start = absl::Now();
  EXPECT_TRUE(tracker.WaitAllReleased(start + absl::Seconds(30), absl::Seconds(20)));
  io.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(tracker.outstanding(), 0);
  tracker.Acquire();
  const absl::Time again = absl::Now();
  EXPECT_FALSE(tracker.WaitAllReleased(again + absl::Milliseconds(50), absl::Seconds(20)));
  EXPECT_LT(absl::Now() - again, absl::Seconds(10));
  tracker.Release();
}

TEST(EffectiveSpinWaitTest, SpinsOnlyWithoutOversubscriptionUnlessSet) {
  CommunicatorOptions options;
  EXPECT_EQ(EffectiveSpinWait(options, 2, 2), kDefaultSpinWait);
  EXPECT_EQ(EffectiveSpinWait(options, 3, 2), absl::ZeroDuration());
  options.spin_wait = absl::Microseconds(50);
  EXPECT_EQ(EffectiveSpinWait(options, 64, 2), absl::Microseconds(50));
  options.spin_wait = absl::ZeroDuration();
  EXPECT_EQ(EffectiveSpinWait(options, 1, 2), absl::ZeroDuration());
}

TEST(CollectiveStatsTest, RecordsAndSums) {
  CollectiveStats a;
  a.Record(CollectiveKind::kAllReduce, LinkClass::kDcn, 1000);
  a.Record(CollectiveKind::kAllGather, LinkClass::kIci, 10);
  a.Record(CollectiveKind::kAllGather, LinkClass::kLocal, 5);
  CollectiveStats b = a;
  b += a;
  EXPECT_EQ(b.dcn.bytes, 2000);
  EXPECT_EQ(b.Kind(CollectiveKind::kAllGather).ici.messages, 2);
  EXPECT_EQ(b.Link(LinkClass::kLocal).bytes, 10);
  EXPECT_THAT(a.ToString(), HasSubstr("DCN: 0.001 MB in 1 messages"));
  EXPECT_EQ(CollectiveKindName(CollectiveKind::kCollectivePermute), "collective-permute");
}

TEST(DeviceMapTest, ValidatesAndBuildsUniformMaps) {
  DeviceMap m = DeviceMap::Uniform(4, 2, 2);
  EXPECT_EQ(m.host_of_device, (std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(m.slice_of_device, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_TRUE(m.Validate(4).ok());
  EXPECT_THAT(std::string(m.Validate(5).message()), HasSubstr("host 4 owns no device"));
  EXPECT_THAT(std::string(m.Validate(3).message()), HasSubstr("host_of_device[6] = 3"));
  DeviceMap split = m;
  split.slice_of_device[1] = 1;
  EXPECT_THAT(std::string(split.Validate(4).message()), HasSubstr("host 0 has devices in slices"));
  EXPECT_NE(split.Fingerprint(), m.Fingerprint());
}

// A segment opened through its descriptor (here by the same process, through /proc/<pid>/fd)
// is the same memory: what a sender writes and publishes, the receiver sees.
TEST(ShmSegmentTest, OpenedSegmentSharesSlotsWithItsCreator) {
  const ShmLayout layout{/*num_hosts=*/3, /*slots=*/2, /*slot_bytes=*/8192};
  absl::StatusOr<std::shared_ptr<ShmSegment>> receiver = ShmSegment::Create(layout);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  absl::StatusOr<std::shared_ptr<ShmSegment>> sender = ShmSegment::Open((*receiver)->descriptor());
  ASSERT_TRUE(sender.ok()) << sender.status();
  EXPECT_EQ((*sender)->layout(), layout);

  const int32_t slot = (*sender)->Claim(/*src=*/2);
  ASSERT_GE(slot, 0);
  EXPECT_TRUE((*receiver)->CheckClaimed(2, slot).ok());
  absl::StatusOr<bool> full = (*receiver)->IsFull(2, slot);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_FALSE(*full);  // claimed, not yet published
  std::vector<std::byte> bytes(8192);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 1);
  std::memcpy((*sender)->slot_data(2, slot), bytes.data(), bytes.size());
  (*sender)->Publish(2, slot);
  full = (*receiver)->IsFull(2, slot);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(*full);
  EXPECT_TRUE((*receiver)->CheckClaimed(2, slot).ok());
  EXPECT_EQ(std::memcmp((*receiver)->slot_data(2, slot), bytes.data(), bytes.size()), 0);
  // Other sources' slots are separate memory.
  EXPECT_NE((*receiver)->slot_data(1, slot), (*receiver)->slot_data(2, slot));
  EXPECT_EQ((*receiver)->CheckClaimed(1, slot).code(), absl::StatusCode::kDataLoss);

  // Every slot busy: Claim says so instead of waiting; a consumed payload frees its slot.
  const int32_t other = (*sender)->Claim(2);
  ASSERT_GE(other, 0);
  EXPECT_NE(other, slot);
  EXPECT_EQ((*sender)->Claim(2), -1);
  {
    ShmPayload payload(*receiver, 2, slot, 100);
    EXPECT_EQ(payload.size(), 100u);
    EXPECT_EQ(payload.data()[99], bytes[99]);
    EXPECT_EQ((*sender)->Claim(2), -1);
  }
  EXPECT_EQ((*sender)->Claim(2), slot);
  EXPECT_GE((*sender)->Claim(1), 0);  // source 1's slots are untouched
}

TEST(ShmSegmentTest, BadLayoutsAndDescriptorsAreRefused) {
  EXPECT_EQ(ShmSegment::Create({1, 0, 4096}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create({1, 1, 5000}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create({0, 1, 4096}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<ShmSegment>> made = ShmSegment::Create({2, 1, 4096});
  ASSERT_TRUE(made.ok()) << made.status();
  const std::string good = (*made)->descriptor();
  EXPECT_THAT(good, ::testing::StartsWith("shm2 "));

  absl::StatusOr<std::shared_ptr<ShmSegment>> garbage = ShmSegment::Open("shm2 12 x");
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(garbage.status().message()), HasSubstr("\"shm2 12 x\""));

  // Same pid and fd, another nonce: not this segment.
  std::vector<std::string> f = absl::StrSplit(good, ' ');
  f[3] = f[3] == "0000000000000001" ? "0000000000000002" : "0000000000000001";
  absl::StatusOr<std::shared_ptr<ShmSegment>> other_nonce = ShmSegment::Open(absl::StrJoin(f, " "));
  EXPECT_EQ(other_nonce.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(other_nonce.status().message()), HasSubstr("is not the segment"));

  // An fd that is not open in that process.
  f = absl::StrSplit(good, ' ');
  f[2] = "999999";
  absl::StatusOr<std::shared_ptr<ShmSegment>> no_fd = ShmSegment::Open(absl::StrJoin(f, " "));
  EXPECT_EQ(no_fd.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(no_fd.status().message()), HasSubstr("/fd/999999"));
}

// Header queue entries pushed by a sender come out in order, checked, and an empty queue says
// so; more than kShmQueueEntries waiting makes PushHeader refuse.
TEST(ShmSegmentTest, HeaderQueuePassesEntriesInOrder) {
  absl::StatusOr<std::shared_ptr<ShmSegment>> receiver = ShmSegment::Create({2, 1, 4096});
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  absl::StatusOr<std::shared_ptr<ShmSegment>> sender = ShmSegment::Open((*receiver)->descriptor());
  ASSERT_TRUE(sender.ok()) << sender.status();
  std::array<std::byte, kShmQueueEntryBytes> entry{};
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < kShmQueueEntries; ++i) {
      entry.fill(static_cast<std::byte>(i + round));
      ASSERT_TRUE((*sender)->PushHeader(1, entry.data()));
    }
    EXPECT_FALSE((*sender)->PushHeader(1, entry.data()));  // full
    for (uint64_t i = 0; i < kShmQueueEntries; ++i) {
      absl::StatusOr<bool> popped = (*receiver)->PopHeader(1, entry.data());
      ASSERT_TRUE(popped.ok()) << popped.status();
      ASSERT_TRUE(*popped);
      EXPECT_EQ(entry[0], static_cast<std::byte>(i + round));
      EXPECT_EQ(entry[kShmQueueEntryPayloadBytes - 1], static_cast<std::byte>(i + round));
    }
    absl::StatusOr<bool> empty = (*receiver)->PopHeader(1, entry.data());
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_FALSE(*empty);
  }
}

// Issue 22, item 6: a same-user process that scribbles a header queue (its counters or its
// entries) is reported as a corrupt segment, naming it, not as a protocol error of the host that
// owns the queue.
TEST(ShmSegmentTest, ScribbledHeaderQueueIsReportedAsCorruptSegment) {
  struct Case {
    const char* what;
    size_t offset;      // into the queue's bytes: 0 head, 64 tail, 128 the first entry
    uint64_t value;     // written there
    const char* error;  // expected in the message
  };
  const Case cases[] = {
      {"head moved", 0, 5, "says 5 entries were taken, this host took 1"},
      {"tail far ahead", 64, 1000000, "claims 999999 waiting entries"},
      {"tail behind the head", 64, 0, "claims 18446744073709551615 waiting entries"},
      {"entry bytes", 128 + kShmQueueEntryBytes + 8, 0x0123456789abcdef,
       "entry 1 of the header queue of host 1 fails its checksum"},
      {"entry checksum", 128 + kShmQueueEntryBytes + kShmQueueEntryPayloadBytes, 7,
       "entry 1 of the header queue of host 1 fails its checksum"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::StatusOr<std::shared_ptr<ShmSegment>> receiver = ShmSegment::Create({2, 1, 4096});
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    absl::StatusOr<std::shared_ptr<ShmSegment>> sender =
        ShmSegment::Open((*receiver)->descriptor());
    ASSERT_TRUE(sender.ok()) << sender.status();
    std::array<std::byte, kShmQueueEntryBytes> entry{};
    ASSERT_TRUE((*sender)->PushHeader(1, entry.data()));
    ASSERT_TRUE((*sender)->PushHeader(1, entry.data()));
    absl::StatusOr<bool> first = (*receiver)->PopHeader(1, entry.data());
    ASSERT_TRUE(first.ok() && *first) << first.status();

    // The scribbler writes through its own mapping of the memory, as another process would.
    absl::Span<std::byte> queue = (*sender)->queue_bytes_for_testing(1);
    std::memcpy(queue.data() + c.offset, &c.value, sizeof(c.value));
    absl::StatusOr<bool> popped = (*receiver)->PopHeader(1, entry.data());
    EXPECT_EQ(popped.status().code(), absl::StatusCode::kDataLoss);
    const std::string message(popped.status().message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("shared memory segment ", (*receiver)->name(),
                                                " is corrupt")));
    EXPECT_THAT(message, HasSubstr(c.error));
    EXPECT_THAT(message, HasSubstr("(written by a process outside the job?)"));
    EXPECT_THAT((*receiver)->name(), ::testing::StartsWith("/proc/"));
  }
}

// A same-user process that scribbles the state word of a slot whose header arrived: free (0)
// or a value no host writes is reported as a corrupt segment, naming it, slot and host, not as a
// protocol error of the sender; 1 (being written) and 2 (full) are what senders write.
TEST(ShmSegmentTest, ScribbledSlotStateIsReportedAsCorruptSegment) {
  struct Case {
    uint32_t value;     // written into the state word of claimed slot 1 of host 1
    const char* error;  // expected in the message, after "is corrupt: "
  };
  const Case cases[] = {
      {0, "slot 1 of host 1 is free although its header arrived"},
      {3, "slot 1 of host 1 has state word 3, which no host writes"},
      {0xdeadbeef, "slot 1 of host 1 has state word 3735928559, which no host writes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value);
    absl::StatusOr<std::shared_ptr<ShmSegment>> receiver = ShmSegment::Create({2, 2, 4096});
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    absl::StatusOr<std::shared_ptr<ShmSegment>> sender =
        ShmSegment::Open((*receiver)->descriptor());
    ASSERT_TRUE(sender.ok()) << sender.status();
    ASSERT_EQ((*sender)->Claim(1), 0);
    ASSERT_EQ((*sender)->Claim(1), 1);
    absl::Span<std::byte> states = (*sender)->slot_states_for_testing(1);
    ASSERT_EQ(states.size(), 2u * 64u);
    std::memcpy(states.data() + 64, &c.value, sizeof(c.value));

    const std::string corrupt =
        absl::StrCat("shared memory segment ", (*receiver)->name(), " is corrupt: ", c.error);
    for (const absl::Status& status :
         {(*receiver)->CheckClaimed(1, 1), (*receiver)->IsFull(1, 1).status(),
          ShmPayload(*receiver, 1, 1, 100).ready().status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(std::string(status.message()), HasSubstr(corrupt));
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr("(written by a process outside the job?)"));
    }
    // Slot 0 of the same host is untouched: claimed, then published.
    EXPECT_TRUE((*receiver)->CheckClaimed(1, 0).ok());
    (*sender)->Publish(1, 0);
    absl::StatusOr<bool> full = (*receiver)->IsFull(1, 0);
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(*full);
  }
}

// An entry left over from an earlier lap of the ring (a scribbled tail claims it is new) fails
// its checksum too: the checksum covers the entry's position, not only its bytes.
TEST(ShmSegmentTest, StaleHeaderQueueEntryFailsItsChecksum) {
  absl::StatusOr<std::shared_ptr<ShmSegment>> receiver = ShmSegment::Create({2, 1, 4096});
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  std::array<std::byte, kShmQueueEntryBytes> entry{};
  for (uint64_t i = 0; i < kShmQueueEntries; ++i) {
    ASSERT_TRUE((*receiver)->PushHeader(0, entry.data()));
    absl::StatusOr<bool> popped = (*receiver)->PopHeader(0, entry.data());
    ASSERT_TRUE(popped.ok() && *popped) << popped.status();
  }
  // Position 64 lives where position 0 did, whose valid entry is still there.
  const uint64_t tail = kShmQueueEntries + 1;
  std::memcpy((*receiver)->queue_bytes_for_testing(0).data() + 64, &tail, sizeof(tail));
  absl::StatusOr<bool> popped = (*receiver)->PopHeader(0, entry.data());
  EXPECT_EQ(popped.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(popped.status().message()),
              HasSubstr("entry 64 of the header queue of host 0 fails its checksum"));
}

}  // namespace
}  // namespace tessel::transport::internal
