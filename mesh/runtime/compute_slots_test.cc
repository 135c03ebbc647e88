// ComputeSlots: the limit holds under contention, 0 means none, and the default share and the
// TESSEL_COMPUTE_SLOTS parser give what mesh/runtime/compute_slots.h promises.
#include "tessel/mesh/runtime/compute_slots.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessel::mesh {
namespace {

// Runs `threads` threads that each take a slot `rounds` times and hold it briefly; returns the
// most holders seen at once.
int MostHoldersAtOnce(ComputeSlots& slots, int threads, int rounds) {
  std::atomic<int> holders{0};
  std::atomic<int> most{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int r = 0; r < rounds; ++r) {
        slots.Acquire();
        const int now = ++holders;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --holders;
        slots.Release();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  return most.load();
}

TEST(ComputeSlotsTest, NeverMoreHoldersThanSlots) {
  for (int limit : {1, 2, 3}) {
    ComputeSlots slots(limit);
    EXPECT_EQ(slots.slots(), limit);
    EXPECT_LE(MostHoldersAtOnce(slots, /*threads=*/8, /*rounds=*/20), limit) << limit;
  }
}

TEST(ComputeSlotsTest, ZeroIsNoLimit) {
  ComputeSlots slots(0);
  // One thread takes more slots than any limit would allow, without waiting.
  for (int i = 0; i < 16; ++i) slots.Acquire();
  for (int i = 0; i < 16; ++i) slots.Release();
  EXPECT_EQ(slots.slots(), 0);
}

// A slot given back goes to the thread that waited longest.
TEST(ComputeSlotsTest, WaitersAreServedInOrder) {
  ComputeSlots slots(1);
  slots.Acquire();
  std::vector<int> order;
  std::mutex order_mu;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      slots.Acquire();
      {
        std::lock_guard<std::mutex> lock(order_mu);
        order.push_back(i);
      }
      slots.Release();
    });
    // Waiter i has taken its ticket (it cannot get the slot) before waiter i + 1 starts.
    while (slots.waiting() < i + 1) std::this_thread::yield();
  }
  EXPECT_EQ(slots.waiting(), 4);
  slots.Release();
  for (std::thread& w : waiters) w.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(ComputeSlotsTest, ParsesTheEnvironmentValue) {
  EXPECT_EQ(ParseComputeSlots(nullptr, "TESSEL_COMPUTE_SLOTS").value(), std::nullopt);
  EXPECT_EQ(ParseComputeSlots("", "TESSEL_COMPUTE_SLOTS").value(), std::nullopt);
  EXPECT_EQ(ParseComputeSlots("0", "TESSEL_COMPUTE_SLOTS").value(), 0);
  EXPECT_EQ(ParseComputeSlots("3", "TESSEL_COMPUTE_SLOTS").value(), 3);
  // Spaces around the digits are ignored, as for every TESSEL_* setting (core/environment.h).
  EXPECT_EQ(ParseComputeSlots(" 2 ", "TESSEL_COMPUTE_SLOTS").value(), 2);
  for (const char* bad : {"-1", "two", "2x", "1.5", "0x2", "99999999999999999999"}) {
    absl::StatusOr<std::optional<int64_t>> parsed = ParseComputeSlots(bad, "TESSEL_COMPUTE_SLOTS");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              std::string("TESSEL_COMPUTE_SLOTS=\"") + bad +
                  "\": expected an integer in [0, 9223372036854775807] (0: no limit)");
  }
}

}  // namespace
}  // namespace tessel::mesh
