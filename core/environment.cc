#include "tessel/core/environment.h"

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
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

}  // namespace tessel
