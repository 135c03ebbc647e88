// The command-line flags shared by the collective benchmarks (collectives_bench,
// zmq_floor_bench, mpi_collectives_bench): which host counts and sizes to sweep, and how long to
// time each cell. Parsed with CLI11 (core/command_line.h), `--name=value` or `--name value`.
//
//   SweepFlags flags;
//   CLI::App app{"...", "collectives_bench"};
//   AddSweepFlags(app, &flags, /*min_hosts=*/1);
//   if (int code = ParseCommandLine(app, argc, argv); code >= 0) return code;
#ifndef TESSEL_BENCHMARKS_SWEEP_FLAGS_H_
#define TESSEL_BENCHMARKS_SWEEP_FLAGS_H_

#include <cstdint>
#include <vector>

#include "CLI/CLI.hpp"
#include "tessel/core/command_line.h"

namespace tessel::benchmarks {

struct SweepFlags {
  std::vector<int64_t> hosts = {2, 4, 8};  // host (rank) counts, one run each
  int64_t min_bytes = 4096;                // first size (nccl-tests "size")
  int64_t max_bytes = 64 << 20;            // last size, inclusive
  int64_t step = 4;                        // size factor between rows
  int64_t budget_ms = 300;                 // about how long each cell's timed loop runs
};

// Adds --hosts (comma-separated, each >= min_hosts; not added when min_hosts is 0, for drivers
// whose rank count comes from elsewhere, e.g. mpirun), --min_bytes, --max_bytes, --step (>= 2)
// and --budget_ms (all > 0) to `app`, writing into `flags`.
inline void AddSweepFlags(CLI::App& app, SweepFlags* flags, int64_t min_hosts) {
  if (min_hosts > 0) {
    app.add_option("--hosts", flags->hosts, "host counts, comma-separated")
        ->delimiter(',')
        ->check(CLI::Range(min_hosts, int64_t{4096}))
        ->capture_default_str();
  }
  app.add_option("--min_bytes", flags->min_bytes, "first size in bytes")
      ->check(Positive())
      ->capture_default_str();
  app.add_option("--max_bytes", flags->max_bytes, "last size in bytes")
      ->check(Positive())
      ->capture_default_str();
  app.add_option("--step", flags->step, "factor between sizes")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--budget_ms", flags->budget_ms, "time of each cell's loop, ms")
      ->check(Positive())
      ->capture_default_str();
}

}  // namespace tessel::benchmarks

#endif  // TESSEL_BENCHMARKS_SWEEP_FLAGS_H_
