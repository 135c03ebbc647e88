#include "tessel/core/config_json.h"

#include <exception>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel {
namespace {

using json = nlohmann::json;

// A byte scan, not a parse: brackets inside strings are skipped (with escapes); everything else
// is left to nlohmann, which reports malformed text with line and column.
absl::Status CheckNestingDepth(std::string_view text, std::string_view source) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxConfigJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(source), ": invalid JSON: nesting deeper than ",
                         kMaxConfigJsonDepth, " levels at byte offset ", i));
      }
    } else if (c == ']' || c == '}') {
      // An unbalanced closer is malformed JSON; the parser reports it with its position.
      if (depth > 0) --depth;
    }
  }
  return absl::OkStatus();
}

// A SAX pass that only looks for a key repeated in one object. nlohmann's callback parser
// (parse with a callback) rescans its parent container at every object end, quadratic in the
// number of objects (a 12 MB file took a minute); this pass keeps one key set per open object.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(/*is_array=*/false); }
  bool start_array(std::size_t) override { return Open(/*is_array=*/true); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  // Keys are compared after unescaping, so a key and the same key written with JSON escapes
  // count as one key, as they do for nlohmann.
  bool key(string_t& key) override {
    Frame& frame = frames_.back();
    frame.key = key;
    if (!frame.keys.insert(key).second) {
      first_duplicate_ = JsonPointerChild(frame.pointer, key);
      return false;  // stop: one repeat is enough to refuse the file
    }
    return true;
  }
  // The text was parsed before this pass, so this is not expected; stop either way.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  const std::string& first_duplicate() const { return first_duplicate_; }

 private:
  struct Frame {
    bool is_array;
    size_t next_index;
    std::string key;
    std::set<std::string> keys;
    std::string pointer;
  };

  // A scalar or container fills the next element of an enclosing array.
  std::string NextPointer() {
    if (frames_.empty()) return "";
    Frame& parent = frames_.back();
    return parent.is_array ? JsonPointerChild(parent.pointer, parent.next_index++)
                           : JsonPointerChild(parent.pointer, parent.key);
  }
  bool Value() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().next_index;
    return true;
  }
  bool Open(bool is_array) {
    std::string pointer = NextPointer();
    frames_.push_back(Frame{is_array, 0, "", {}, std::move(pointer)});
    return true;
  }
  bool Close() {
    if (!frames_.empty()) frames_.pop_back();
    return true;
  }

  std::vector<Frame> frames_;
  std::string first_duplicate_;
};

// "parse error at line 1, column 5: ..." from nlohmann's "[json.exception.parse_error.101]
// parse error at line 1, column 5: ...": the id means nothing to someone editing a config.
std::string WithoutExceptionId(std::string_view what) {
  if (!what.empty() && what.front() == '[') {
    const size_t end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

}  // namespace

std::string JsonPointerChild(std::string_view pointer, std::string_view key) {
  std::string out(pointer);
  out += '/';
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string JsonPointerChild(std::string_view pointer, size_t index) {
  return absl::StrCat(std::string(pointer), "/", index);
}

std::optional<int64_t> JsonIntegerInRange(const json& value, int64_t min, int64_t max) {
  int64_t result = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    result = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    result = value.get<int64_t>();
  } else {
    return std::nullopt;
  }
  if (result < min || result > max) return std::nullopt;
  return result;
}

std::string JsonForMessage(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxChars = 60;
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars - 3) + "...";
  return text;
}

absl::StatusOr<json> ParseConfigJson(std::string_view text, std::string_view source) {
  TESSEL_RETURN_IF_ERROR(CheckNestingDepth(text, source));
  // The adapter for nlohmann's exceptions (STYLE.md: third-party exceptions become a Status at
  // the adapter); nothing thrown escapes.
  try {
    json root = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                            /*ignore_comments=*/false);
    DuplicateKeyFinder finder;
    json::sax_parse(text.begin(), text.end(), &finder);
    if (!finder.first_duplicate().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(source), ": ", finder.first_duplicate(), ": duplicate key in one object"));
    }
    return root;
  } catch (const json::parse_error& e) {
    // nlohmann's byte index is 1-based; the message gives a 0-based offset like the depth check.
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": invalid JSON: ", WithoutExceptionId(e.what()),
                     " (byte offset ", e.byte > 0 ? e.byte - 1 : 0, ")"));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": cannot read JSON: ", WithoutExceptionId(e.what())));
  } catch (const std::exception& e) {
    // Not the file's fault (e.g. bad_alloc): kInternal, still a Status rather than a crash.
    return absl::InternalError(absl::StrCat(std::string(source), ": cannot read JSON: ", e.what()));
  }
}

}  // namespace tessel
