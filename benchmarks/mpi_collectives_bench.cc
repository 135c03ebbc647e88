// mpi_collectives_bench: the OpenMPI baseline of collectives_bench. MPI_Allreduce (MPI_SUM) and
// MPI_Allgather of floats, nccl-tests style, printing the same table as collectives_bench so
// scripts/bench_collectives.sh can put both side by side.
//
//   mpirun -n 4 --mca btl self,tcp build/benchmarks/mpi_collectives_bench --label=mpi-tcp
//   mpirun -n 4 build/benchmarks/mpi_collectives_bench --label=mpi-shm   # default: vader (shm)
//
// Flags (benchmarks/sweep_flags.h, see --help): --min_bytes=4096 --max_bytes=67108864 --step=4
// --budget_ms=300 --label=mpi.
// Rank 0 prints one row per (collective, size) (see benchmarks/collectives_bench.cc for the
// columns). Sizes are nccl-tests' "size": the all-reduce buffer, the all-gather output (each rank
// contributes size / ranks). Bandwidths are 10^9 bytes/s: algbw = size / time; all-reduce
// busbw = algbw * 2(n-1)/n; all-gather busbw = algbw * (n-1)/n. The time of one call is the mean
// over a timed loop (iteration count from one call after 2 warm-up calls, at least 3, so that
// the loop takes about budget_ms) measured on rank 0 between two MPI_Barriers; this is the
// same protocol as collectives_bench. The last column, cpu_us, is the CPU time (user + system,
// every thread) that all ranks together spent per call during the timed loop: OpenMPI's ranks
// poll while they wait, so it shows what that costs.
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "benchmarks/sweep_flags.h"
#include "tessel/core/command_line.h"

namespace {

// CPU time (user + system, all threads) this process has used, in seconds.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Flags : tessel::benchmarks::SweepFlags {
  std::string label = "mpi";
};

int Run(const Flags& flags) {
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (rank == 0) {
    std::printf("%-12s %-12s %5s %10s %12s %10s %10s %10s\n", "# collective", "impl", "ranks",
                "bytes", "us", "algbw_gbps", "busbw_gbps", "cpu_us");
    std::fflush(stdout);
  }
  for (const bool reduce : {true, false}) {
    for (int64_t size = flags.min_bytes; size <= flags.max_bytes; size *= flags.step) {
      // all-gather: `size` is the output; each rank contributes size / ranks.
      const int64_t count = reduce ? size / 4 : size / 4 / ranks;
      if (count == 0) continue;
      std::vector<float> in(count, 1.0f);
      std::vector<float> out(reduce ? count : count * ranks);
      const int n = static_cast<int>(count);
      auto once = [&]() {
        return reduce ? MPI_Allreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
                      : MPI_Allgather(in.data(), n, MPI_FLOAT, out.data(), n, MPI_FLOAT,
                                      MPI_COMM_WORLD);
      };
      for (int i = 0; i < 2; ++i) {
        if (once() != MPI_SUCCESS) return 3;
      }
      // Iterations from one more call on rank 0, agreed through a broadcast.
      long long iterations = 0;
      const double t0 = MPI_Wtime();
      if (once() != MPI_SUCCESS) return 3;
      const double one = MPI_Wtime() - t0;
      if (rank == 0) {
        iterations = std::clamp<long long>(
            static_cast<long long>(flags.budget_ms / 1e3 / std::max(one, 1e-7)), 3, 2000);
      }
      MPI_Bcast(&iterations, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      const double cpu_start = ProcessCpuSeconds();
      for (long long i = 0; i < iterations; ++i) {
        if (once() != MPI_SUCCESS) return 3;
      }
      MPI_Barrier(MPI_COMM_WORLD);
      const double seconds = (MPI_Wtime() - start) / static_cast<double>(iterations);
      const double cpu = (ProcessCpuSeconds() - cpu_start) / static_cast<double>(iterations);
      double cpu_all = 0;
      MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      // A check that the collective did its work (every rank contributed 1.0f).
      const float expected = reduce ? static_cast<float>(ranks) : 1.0f;
      if (out.front() != expected || out.back() != expected) {
        std::fprintf(stderr, "rank %d: wrong result %g (expected %g)\n", rank, out.front(),
                     expected);
        return 4;
      }
      if (rank == 0) {
        const int64_t bytes = reduce ? count * 4 : count * 4 * ranks;
        const double algbw = static_cast<double>(bytes) / seconds / 1e9;
        const double factor = reduce ? 2.0 * (ranks - 1) / ranks : 1.0 * (ranks - 1) / ranks;
        std::printf("%-12s %-12s %5d %10lld %12.1f %10.3f %10.3f %10.1f\n",
                    reduce ? "all-reduce" : "all-gather", flags.label.c_str(), ranks,
                    static_cast<long long>(bytes), seconds * 1e6, algbw, algbw * factor,
                    cpu_all * 1e6);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Flags flags;
  CLI::App app{
      "OpenMPI's MPI_Allreduce / MPI_Allgather bus bandwidth, in collectives_bench's "
      "table (the baseline of scripts/bench_collectives.sh); run under mpirun.",
      "mpi_collectives_bench"};
  tessel::benchmarks::AddSweepFlags(app, &flags, /*min_hosts=*/0);
  app.add_option("--label", flags.label, "the impl column")->capture_default_str();
  int result = tessel::ParseCommandLine(app, argc, argv);
  result = result >= 0 ? result : Run(flags);
  if (result != 0) MPI_Abort(MPI_COMM_WORLD, result);
  MPI_Finalize();
  return result;
}
