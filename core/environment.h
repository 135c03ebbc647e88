// Environment variables with strict parsing: a value that is not one of the documented forms is
// an error naming the variable and the value, never silently ignored (TESSEL_CURVE=true must not
// run unencrypted because only "1" was recognised).
//
//   TESSEL_ASSIGN_OR_RETURN(std::optional<bool> curve, GetBoolEnv("TESSEL_CURVE"));
//   if (curve.has_value()) options.curve = *curve;
#ifndef TESSEL_CORE_ENVIRONMENT_H_
#define TESSEL_CORE_ENVIRONMENT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessel {

// Parses a boolean setting: 1, true, yes, on give true; 0, false, no, off give false; case is
// ignored, and so are spaces around the word. `where` names the source in the error, e.g.
// "TESSEL_CURVE". Errors: kInvalidArgument for anything else (the empty string included),
// naming `where` and the value and listing the accepted forms.
[[nodiscard]] absl::StatusOr<bool> ParseBool(std::string_view text, std::string_view where);

// The boolean environment variable `name`: nullopt when it is unset, else ParseBool of its value.
// Errors: those of ParseBool.
[[nodiscard]] absl::StatusOr<std::optional<bool>> GetBoolEnv(const char* name);

// Parses a decimal integer setting: an optional sign and digits, spaces around them ignored (as
// ParseBool), nothing else (no "0x", no "1e3", no "12abc"), in [min, max]. `where` names the
// source in the error, e.g. "TESSEL_COMPUTE_SLOTS"; `note`, when not empty, is added to it in
// parentheses (e.g. "0: no limit"). Errors: kInvalidArgument
// `TESSEL_COMPUTE_SLOTS="abc": expected an integer in [0, 9223372036854775807] (0: no limit)`,
// for digits past int64 too (never a wrapped value).
[[nodiscard]] absl::StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view where,
                                                 int64_t min, int64_t max,
                                                 std::string_view note = {});

}  // namespace tessel

#endif  // TESSEL_CORE_ENVIRONMENT_H_
