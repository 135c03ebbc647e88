#include "tessel/core/internal/sdy_sharding.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel::internal {

namespace {

// A mesh's device count bound: the HloSharding text it becomes allows no more tiles
// (spmd/sharding.cc), and the bound keeps the product of axis sizes from wrapping.
constexpr int64_t kMaxSdyMeshDevices = int64_t{1} << 24;

std::string Unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) ++i;
    out.push_back(text[i]);
  }
  return out;
}

// A cursor over unescaped sdy text; every error names the text it was reading.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Consume(std::string_view s) {
    SkipSpace();
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  absl::Status Expect(std::string_view s) {
    if (Consume(s)) return absl::OkStatus();
    return Error(absl::StrCat("expected \"", std::string(s), "\""));
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ >= text_.size();
  }
  char PeekChar() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  absl::StatusOr<std::string> Quoted() {
    if (absl::Status s = Expect("\""); !s.ok()) return s;
    size_t close = text_.find('"', pos_);
    if (close == std::string_view::npos) return Error("unterminated string");
    std::string out(text_.substr(pos_, close - pos_));
    pos_ = close + 1;
    return out;
  }
  absl::StatusOr<int64_t> Int() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(std::string(text_.substr(start, pos_ - start)), &value)) {
      return Error("expected an integer");
    }
    return value;
  }
  // An identifier: letters, digits, '_', '.', '$'.
  std::string Word() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (absl::ascii_isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
            text_[pos_] == '.' || text_[pos_] == '$')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  absl::Status Error(std::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("sdy attribute \"", std::string(text_),
                                                   "\": ", std::string(why), " at offset ", pos_));
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

std::string AxesList(const SdyMesh& mesh) {
  std::vector<std::string> parts;
  for (const auto& [name, size] : mesh) parts.push_back(absl::StrCat("\"", name, "\"=", size));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// The HloSharding of one tensor whose dims use `dim_axes` (mesh axis indices, major to minor).
std::string ToHloSharding(const SdyMesh& mesh, const std::vector<std::vector<int64_t>>& dim_axes) {
  std::vector<int64_t> perm, tile_dims;
  std::vector<bool> used(mesh.size(), false);
  bool tiled = false;
  for (const std::vector<int64_t>& axes : dim_axes) {
    int64_t tiles = 1;
    for (int64_t a : axes) {
      perm.push_back(a);
      used[a] = true;
      tiles *= mesh[a].second;
    }
    tiled |= tiles > 1;
    tile_dims.push_back(tiles);
  }
  int64_t replicas = 1;
  for (size_t a = 0; a < mesh.size(); ++a) {
    if (used[a]) continue;
    perm.push_back(static_cast<int64_t>(a));
    replicas *= mesh[a].second;
  }
  if (!tiled) return "{replicated}";
  if (replicas > 1) tile_dims.push_back(replicas);
  std::vector<int64_t> mesh_dims;
  for (const auto& axis : mesh) mesh_dims.push_back(axis.second);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  // XLA writes an untransposed iota as the flat device count: <=[8], not <=[2,4].
  if (identity) {
    int64_t total = 1;
    for (const auto& axis : mesh) total *= axis.second;
    mesh_dims = {total};
  }
  std::string out = absl::StrCat("{devices=[", absl::StrJoin(tile_dims, ","), "]<=[",
                                 absl::StrJoin(mesh_dims, ","), "]");
  if (!identity) absl::StrAppend(&out, "T(", absl::StrJoin(perm, ","), ")");
  if (replicas > 1) absl::StrAppend(&out, " last_tile_dim_replicate");
  return absl::StrCat(out, "}");
}

// One `<@mesh, [{"a"}, {}, ...]>` at the reader's position.
absl::StatusOr<std::string> ReadTensorSharding(Reader& r, const SdyMeshes& meshes) {
  if (absl::Status s = r.Expect("<"); !s.ok()) return s;
  if (absl::Status s = r.Expect("@"); !s.ok()) return s;
  std::string mesh_name = r.Word();
  auto it = meshes.find(mesh_name);
  if (it == meshes.end()) {
    return r.Error(absl::StrCat("unknown mesh @", mesh_name,
                                " (the module's xla.sdy.meshes does not define it)"));
  }
  const SdyMesh& mesh = it->second;
  if (absl::Status s = r.Expect(","); !s.ok()) return s;
  if (absl::Status s = r.Expect("["); !s.ok()) return s;
  std::vector<std::vector<int64_t>> dim_axes;
  while (!r.Consume("]")) {
    if (!dim_axes.empty()) {
      if (absl::Status s = r.Expect(","); !s.ok()) return s;
    }
    if (absl::Status s = r.Expect("{"); !s.ok()) return s;
    std::vector<int64_t> axes;
    while (!r.Consume("}")) {
      if (!axes.empty()) {
        if (absl::Status s = r.Expect(","); !s.ok()) return s;
      }
      if (r.Consume("?")) {
        return absl::UnimplementedError("sdy open dimension \"?\" is not supported");
      }
      absl::StatusOr<std::string> axis = r.Quoted();
      if (!axis.ok()) return axis.status();
      if (r.PeekChar() == ':') {
        return absl::UnimplementedError(
            absl::StrCat("sdy sub-axis of \"", *axis, "\" is not supported"));
      }
      auto found =
          std::find_if(mesh.begin(), mesh.end(), [&](const auto& a) { return a.first == *axis; });
      if (found == mesh.end()) {
        return r.Error(absl::StrCat("unknown mesh axis \"", *axis, "\"; mesh @", mesh_name,
                                    " has axes ", AxesList(mesh)));
      }
      int64_t index = found - mesh.begin();
      if (std::find(axes.begin(), axes.end(), index) != axes.end()) {
        return r.Error(absl::StrCat("mesh axis \"", *axis, "\" appears twice in one dim"));
      }
      for (const std::vector<int64_t>& other : dim_axes) {
        if (std::find(other.begin(), other.end(), index) != other.end()) {
          return r.Error(absl::StrCat("mesh axis \"", *axis, "\" is used by two dims"));
        }
      }
      axes.push_back(index);
    }
    if (r.PeekChar() == '?') {
      return absl::UnimplementedError("sdy open dimension \"?\" is not supported");
    }
    dim_axes.push_back(std::move(axes));
  }
  if (r.Consume(",")) {
    return absl::UnimplementedError(
        "sdy replicated= / unreduced= axis lists on a sharding are not supported");
  }
  if (absl::Status s = r.Expect(">"); !s.ok()) return s;
  return ToHloSharding(mesh, dim_axes);
}

}  // namespace

absl::StatusOr<SdyMeshes> ParseSdyMeshes(std::string_view text) {
  const std::string unescaped = Unescape(text);
  Reader r(unescaped);
  SdyMeshes meshes;
  r.Consume("{");
  while (!r.AtEnd() && !r.Consume("}")) {
    if (!meshes.empty()) {
      if (absl::Status s = r.Expect(","); !s.ok()) return s;
    }
    std::string name = r.Word();
    if (name.empty()) return r.Error("expected a mesh name");
    if (absl::Status s = r.Expect("="); !s.ok()) return s;
    if (absl::Status s = r.Expect("#sdy.mesh<"); !s.ok()) return s;
    if (absl::Status s = r.Expect("["); !s.ok()) return s;
    if (meshes.contains(name)) return r.Error(absl::StrCat("mesh ", name, " is defined twice"));
    SdyMesh mesh;
    int64_t devices = 1;
    while (!r.Consume("]")) {
      if (!mesh.empty()) {
        if (absl::Status s = r.Expect(","); !s.ok()) return s;
      }
      absl::StatusOr<std::string> axis = r.Quoted();
      if (!axis.ok()) return axis.status();
      if (absl::Status s = r.Expect("="); !s.ok()) return s;
      absl::StatusOr<int64_t> size = r.Int();
      if (!size.ok()) return size.status();
      if (*size < 1) return r.Error(absl::StrCat("axis \"", *axis, "\" has size ", *size));
      if (std::any_of(mesh.begin(), mesh.end(), [&](const auto& a) { return a.first == *axis; })) {
        return r.Error(absl::StrCat("mesh ", name, " names axis \"", *axis, "\" twice"));
      }
      // The device count is the product of the sizes; refuse it before it wraps.
      if (*size > kMaxSdyMeshDevices / devices) {
        return r.Error(absl::StrCat("mesh ", name, " has more than ", kMaxSdyMeshDevices,
                                    " devices (axis \"", *axis, "\" of size ", *size, ")"));
      }
      devices *= *size;
      mesh.emplace_back(*axis, *size);
    }
    if (r.Consume(",")) {
      return absl::UnimplementedError(
          absl::StrCat("sdy mesh ", name, " with explicit device_ids is not supported"));
    }
    if (absl::Status s = r.Expect(">"); !s.ok()) return s;
    meshes[name] = std::move(mesh);
  }
  return meshes;
}

absl::StatusOr<std::string> FindFrontendAttribute(std::string_view attributes,
                                                  std::string_view key) {
  const std::string needle = absl::StrCat(std::string(key), "=");
  size_t at = 0;
  while (true) {
    at = attributes.find(needle, at);
    if (at == std::string_view::npos) {
      return absl::NotFoundError(absl::StrCat("no frontend attribute ", std::string(key)));
    }
    // A whole key: preceded by '{', ',' or a space.
    if (at == 0 || attributes[at - 1] == '{' || attributes[at - 1] == ',' ||
        attributes[at - 1] == ' ') {
      break;
    }
    at += needle.size();
  }
  size_t start = at + needle.size();
  if (start < attributes.size() && attributes[start] == '"') {
    size_t j = start + 1;
    while (j < attributes.size() && attributes[j] != '"') {
      if (attributes[j] == '\\') ++j;
      ++j;
    }
    if (j >= attributes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("unterminated value of ", std::string(key)));
    }
    return Unescape(attributes.substr(start + 1, j - start - 1));
  }
  int depth = 0;
  size_t j = start;
  for (; j < attributes.size(); ++j) {
    char c = attributes[j];
    if (c == '{' || c == '<' || c == '[') ++depth;
    if (c == '}' || c == '>' || c == ']') {
      if (depth == 0) break;
      --depth;
    }
    if (c == ',' && depth == 0) break;
  }
  return Unescape(attributes.substr(start, j - start));
}

absl::StatusOr<std::vector<std::string>> SdyShardingsToHlo(std::string_view text,
                                                           const SdyMeshes& meshes) {
  Reader r(text);
  std::vector<std::string> out;
  if (r.Consume("#sdy.sharding_per_value<")) {
    if (absl::Status s = r.Expect("["); !s.ok()) return s;
    while (!r.Consume("]")) {
      if (!out.empty()) {
        if (absl::Status s = r.Expect(","); !s.ok()) return s;
      }
      absl::StatusOr<std::string> one = ReadTensorSharding(r, meshes);
      if (!one.ok()) return one.status();
      out.push_back(*std::move(one));
    }
  } else if (r.Consume("#sdy.sharding")) {
    absl::StatusOr<std::string> one = ReadTensorSharding(r, meshes);
    if (!one.ok()) return one.status();
    out.push_back(*std::move(one));
    return out;
  } else {
    return r.Error("expected #sdy.sharding_per_value<...> or #sdy.sharding<...>");
  }
  if (absl::Status s = r.Expect(">"); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseSdyManualAxes(std::string_view text) {
  Reader r(text);
  if (absl::Status s = r.Expect("#sdy<manual_axes{"); !s.ok()) return s;
  std::vector<std::string> axes;
  while (!r.Consume("}")) {
    if (!axes.empty()) {
      if (absl::Status s = r.Expect(","); !s.ok()) return s;
    }
    absl::StatusOr<std::string> axis = r.Quoted();
    if (!axis.ok()) return axis.status();
    axes.push_back(*std::move(axis));
  }
  if (absl::Status s = r.Expect(">"); !s.ok()) return s;
  return axes;
}

}  // namespace tessel::internal
