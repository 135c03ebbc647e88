// Command-line parsing for Tessel's programs (test workers, benchmarks, examples): CLI11 with
// one convention for errors and exit codes.
//
//   CLI::App app{"what the program does", "host_probe"};
//   app.add_option("--iterations", flags.iterations, "all-reduces to run")
//       ->check(NonNegative());
//   if (int code = ParseCommandLine(app, argc, argv); code >= 0) return code;
//
// Header-only, in its own target (tessel::command_line, which brings CLI11::CLI11) so that
// tessel::core does not depend on CLI11.
#ifndef TESSEL_CORE_COMMAND_LINE_H_
#define TESSEL_CORE_COMMAND_LINE_H_

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace tessel {

// The exit status of a program given bad flags (as the `tessel` command's kExitUsage).
inline constexpr int kExitBadFlags = 2;

namespace command_line_internal {

// `text` as a finite number, or nullopt. CLI11 converts the text to the flag's type after its
// checks, so a check only decides the sign; the conversion refuses what does not fit the type.
inline std::optional<long double> FiniteNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  long double value = std::strtold(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// True when `text` is an integer literal ([+-]digits) outside int64: CLI11 2.1 converts it to
// the nearest int64 without a word, so 2^63 would silently become 2^63 - 1.
inline bool IntegerBeyondInt64(const std::string& text) {
  size_t digits = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (digits == text.size()) return false;
  for (size_t i = digits; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  errno = 0;
  (void)std::strtoll(text.c_str(), nullptr, 10);
  return errno == ERANGE;
}

inline CLI::Validator SignCheck(bool allow_zero) {
  std::string bound = allow_zero ? ">= 0" : "> 0";
  return CLI::Validator(
      [allow_zero, bound](std::string& text) -> std::string {
        std::optional<long double> value = FiniteNumber(text);
        if (!value || *value < 0 || (!allow_zero && *value == 0)) {
          return "must be a number " + bound + ", got \"" + text + "\"";
        }
        if (IntegerBeyondInt64(text)) {
          return "must be at most 9223372036854775807, got \"" + text + "\"";
        }
        return std::string();
      },
      allow_zero ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace command_line_internal

// CLI11 checks for numeric flags: the value must be a finite number > 0 (Positive) or >= 0
// (NonNegative), and an integer literal must fit int64 (CLI11 2.1 would clamp 2^63 to 2^63 - 1).
// Use them instead of CLI::PositiveNumber / CLI::NonNegativeNumber, whose message in CLI11 2.1
// reads "Value 0 not in range 0.000000 to 1797...". CLI11 puts the flag's name in front, so a
// refusal reads "--layers: must be a number > 0, got \"0\"".
inline CLI::Validator Positive() { return command_line_internal::SignCheck(false); }
inline CLI::Validator NonNegative() { return command_line_internal::SignCheck(true); }

// A CLI11 check for a path or name flag: "--trace ''" is refused ("must not be empty") rather
// than read as "not given".
inline CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("must not be empty") : std::string();
      },
      "NONEMPTY");
}

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
