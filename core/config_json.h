// Strict parsing of JSON configuration files (topologies, model files) with errors a person
// editing the file can act on, shared so that every loader refuses the same hostile input the
// same way.
#ifndef TESSEL_CORE_CONFIG_JSON_H_
#define TESSEL_CORE_CONFIG_JSON_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessel {

// Arrays and objects nested deeper than this are refused before anything is built, so that
// nothing downstream (dump(), destructors, readers) recurses deeply on hostile input.
inline constexpr int kMaxConfigJsonDepth = 64;

// Parses `text`, the contents of the file named `source`, as strict JSON (RFC 8259: no
// comments, no trailing commas). Time and memory are linear in the size of `text`.
// Errors (kInvalidArgument, each starting "<source>: "):
//   - nesting deeper than kMaxConfigJsonDepth ("invalid JSON: nesting deeper than 64 levels at
//     byte offset N");
//   - malformed text ("invalid JSON: parse error at line L, column C: ... (byte offset N)");
//   - a key repeated in one object, which nlohmann would resolve silently by keeping the last
//     ("/slices/0/shape: duplicate key in one object", the JSON pointer of the repeat).
[[nodiscard]] absl::StatusOr<nlohmann::json> ParseConfigJson(std::string_view text,
                                                             std::string_view source);

// RFC 6901 JSON pointer of member `key` (escaped: '~' -> "~0", '/' -> "~1") or element `index`
// of the value at `pointer`.
std::string JsonPointerChild(std::string_view pointer, std::string_view key);
std::string JsonPointerChild(std::string_view pointer, size_t index);

// `value` when it is a JSON integer (not 2.0, not "2") in [min, max], else nullopt. nlohmann
// stores non-negative integers as unsigned: one above INT64_MAX is out of range here, never
// wrapped to a negative number.
std::optional<int64_t> JsonIntegerInRange(const nlohmann::json& value, int64_t min, int64_t max);

// `value` as JSON text for an error message, cut to 60 characters ("..." at the end); strings
// with invalid UTF-8 are shown with replacement characters instead of failing.
std::string JsonForMessage(const nlohmann::json& value);

}  // namespace tessel

#endif  // TESSEL_CORE_CONFIG_JSON_H_
