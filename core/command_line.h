// Command-line parsing for Tessel's programs (test workers, benchmarks, examples): CLI11 with
// one convention for errors and exit codes.
//
//   CLI::App app{"what the program does", "host_probe"};
//   app.add_option("--iterations", flags.iterations, "all-reduces to run")
//       ->check(CLI::NonNegativeNumber);
//   if (int code = ParseCommandLine(app, argc, argv); code >= 0) return code;
//
// Header-only, in its own target (tessel::command_line, which brings CLI11::CLI11) so that
// tessel::core does not depend on CLI11.
#ifndef TESSEL_CORE_COMMAND_LINE_H_
#define TESSEL_CORE_COMMAND_LINE_H_

#include <cstdio>

#include "CLI/CLI.hpp"

namespace tessel {

// The exit status of a program given bad flags (as the `tessel` command's kExitUsage).
inline constexpr int kExitBadFlags = 2;

// Parses `argc`/`argv` into `app`'s options. Returns -1 when the program should go on; 0 after
// printing the help for --help; kExitBadFlags after printing one line on stderr,
// "<app name>: <what is wrong, naming the flag> (see --help)", for an unknown flag, a missing
// value, a value its check refuses, a missing required flag or an unexpected positional argument.
// Flags take `--name value` or `--name=value`.
[[nodiscard]] inline int ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return kExitBadFlags;
  }
  return -1;
}

}  // namespace tessel

#endif  // TESSEL_CORE_COMMAND_LINE_H_
