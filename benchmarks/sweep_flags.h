// The command-line flags shared by the collective benchmarks (collectives_bench,
// zmq_floor_bench, mpi_collectives_bench): which host counts and sizes to sweep, and how long to
// time each cell. Parsed with CLI11, `--name=value` or `--name value`.
//
//   SweepFlags flags;
//   CLI::App app{"...", "collectives_bench"};
//   AddSweepFlags(app, &flags, /*min_hosts=*/1);
//   if (int code = ParseFlags(app, argc, argv); code >= 0) return code;
#ifndef TESSEL_BENCHMARKS_SWEEP_FLAGS_H_
#define TESSEL_BENCHMARKS_SWEEP_FLAGS_H_

#include <cstdint>
#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"

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
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max_bytes", flags->max_bytes, "last size in bytes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--step", flags->step, "factor between sizes")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--budget_ms", flags->budget_ms, "time of each cell's loop, ms")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// Parses argv into `app`'s options. Returns -1 to go on, 0 after printing --help, or 2 after
// printing the error (naming the flag and value) on stderr.
inline int ParseFlags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return -1;
}

}  // namespace tessel::benchmarks

#endif  // TESSEL_BENCHMARKS_SWEEP_FLAGS_H_
