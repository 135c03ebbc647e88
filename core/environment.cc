#include "tessel/core/environment.h"

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessel {

absl::StatusOr<bool> ParseBool(std::string_view text, std::string_view where) {
  const std::string word = absl::AsciiStrToLower(
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())));
  if (word == "1" || word == "true" || word == "yes" || word == "on") return true;
  if (word == "0" || word == "false" || word == "no" || word == "off") return false;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(where), "=\"", std::string(text),
                   "\": expected a boolean (1, 0, true, false, yes, no, on or off, in any case)"));
}

absl::StatusOr<std::optional<bool>> GetBoolEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::optional<bool>();
  absl::StatusOr<bool> parsed = ParseBool(value, name);
  if (!parsed.ok()) return parsed.status();
  return std::optional<bool>(*parsed);
}

absl::StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view where, int64_t min,
                                   int64_t max, std::string_view note) {
  const absl::string_view word =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  const size_t sign = !word.empty() && (word[0] == '-' || word[0] == '+') ? 1 : 0;
  const bool digits =
      word.size() > sign && word.find_first_not_of("0123456789", sign) == absl::string_view::npos;
  int64_t value = 0;
  // Once the form is checked, SimpleAtoi refuses only what overflows int64.
  if (!digits || !absl::SimpleAtoi(word, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(where), "=\"", std::string(text), "\": expected an integer in [", min, ", ",
        max, "]", note.empty() ? "" : absl::StrCat(" (", std::string(note), ")")));
  }
  return value;
}

}  // namespace tessel
