#include "tessel/nn/text_data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {
namespace {

// strfile's index files and the package's UTF-8 symlinks duplicate or describe the text files.
bool IsTextFileName(const std::string& name) {
  return !name.empty() && name[0] != '.' && !absl::EndsWith(name, ".dat") &&
         !absl::EndsWith(name, ".u8");
}

// Said for every missing corpus, not only the default directory: a wrong --data-dir is most
// often a machine without the package.
constexpr char kMissingCorpusHint[] =
    "; the default corpus is the Debian package fortunes (scripts/setup.sh installs it), or pass "
    "--data-dir";

absl::Status AppendFile(const std::filesystem::path& path, std::vector<uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat(path.string(), ": cannot open"));
  out.insert(out.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InternalError(absl::StrCat(path.string(), ": read error"));
  return absl::OkStatus();
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

absl::StatusOr<TextCorpus> LoadTextCorpus(const std::string& dir, int64_t validation_every) {
  if (validation_every < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("text corpus: validation_every must be at least 2, got ", validation_every));
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no such directory (the text corpus)", kMissingCorpusHint));
  }
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // Symlinks are skipped: the package's *.u8 links point at files already listed.
    if (entry.is_regular_file(ec) && !entry.is_symlink(ec) && IsTextFileName(name)) {
      names.push_back(name);
    }
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  if (names.empty()) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no text files (the text corpus)", kMissingCorpusHint));
  }
  std::sort(names.begin(), names.end());
  TextCorpus corpus;
  corpus.dir = dir;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool validation = static_cast<int64_t>(i) % validation_every == validation_every - 1;
    (validation ? corpus.validation_files : corpus.train_files).push_back(names[i]);
    TESSEL_RETURN_IF_ERROR(AppendFile(std::filesystem::path(dir) / names[i],
                                      validation ? corpus.validation : corpus.train));
  }
  for (const auto& [what, bytes] :
       {std::pair("training", &corpus.train), std::pair("validation", &corpus.validation)}) {
    if (bytes->size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": the ", what, " split has ", bytes->size(), " bytes (", names.size(),
          " text files, every ", validation_every, "th to validation); need at least 2"));
    }
  }
  return corpus;
}

double UnigramEntropyBits(absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return 0;
  std::array<int64_t, 256> counts{};
  for (uint8_t b : bytes) ++counts[b];
  const double n = static_cast<double>(bytes.size());
  double bits = 0;
  for (int64_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / n;
    bits -= p * std::log2(p);
  }
  return bits;
}

uint64_t WindowHash(uint64_t seed, int64_t step, int64_t row) {
  // Chained rather than xor-ed, so (step, row) and (row, step) give unrelated values.
  uint64_t h = SplitMix64(seed);
  h = SplitMix64(h ^ static_cast<uint64_t>(step));
  return SplitMix64(h ^ static_cast<uint64_t>(row));
}

TextBatcher::TextBatcher(const std::vector<uint8_t>* data, TextBatcherOptions options)
    : data_(data), options_(options) {
  TESSEL_CHECK(data_ != nullptr);
  TESSEL_CHECK(options_.seq_len > 0 && options_.batch > 0);
  TESSEL_CHECK(static_cast<int64_t>(data_->size()) > options_.seq_len);
}

absl::Status TextBatcher::Check(const std::vector<uint8_t>& data, const TextBatcherOptions& options,
                                const std::string& what) {
  if (options.batch <= 0 || options.seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("text batches: batch (", options.batch,
                                                   ") and seq_len (", options.seq_len,
                                                   ") must be positive"));
  }
  // The batch is built as two int32 buffers of batch x seq_len tokens: a product past 2^31
  // (16 GiB of them) is refused before it can wrap or exhaust the host.
  int64_t tokens = 0;
  if (__builtin_mul_overflow(options.batch, options.seq_len, &tokens) ||
      tokens > kMaxTextBatchTokens) {
    return absl::InvalidArgumentError(absl::StrCat("text batches: batch ", options.batch,
                                                   " x seq_len ", options.seq_len, " is more than ",
                                                   kMaxTextBatchTokens, " tokens a step (2^31)"));
  }
  if (static_cast<int64_t>(data.size()) <= options.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("text batches: the ", what, " has ", data.size(),
                                                   " bytes, not more than seq_len ",
                                                   options.seq_len));
  }
  return absl::OkStatus();
}

int64_t TextBatcher::WindowStart(int64_t step, int64_t row) const {
  // A window needs seq_len + 1 bytes (the last label), so it starts in [0, n - seq_len). The
  // modulo bias is below n / 2^64: negligible.
  const uint64_t starts = data_->size() - static_cast<uint64_t>(options_.seq_len);
  return static_cast<int64_t>(WindowHash(options_.seed, step, row) % starts);
}

TextBatch TextBatcher::GetBatch(int64_t step) const {
  return GetBatchRows(step, 0, options_.batch);
}

TextBatch TextBatcher::GetBatchRows(int64_t step, int64_t row_begin, int64_t row_end) const {
  TESSEL_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= options_.batch);
  const int64_t rows = row_end - row_begin, s = options_.seq_len;
  std::vector<int32_t> tokens(rows * s), labels(rows * s);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = WindowStart(step, row_begin + r);
    for (int64_t t = 0; t < s; ++t) {
      tokens[r * s + t] = (*data_)[start + t];
      labels[r * s + t] = (*data_)[start + t + 1];
    }
  }
  return {Literal::FromVector<int32_t>({rows, s}, tokens),
          Literal::FromVector<int32_t>({rows, s}, labels)};
}

}  // namespace tessel::nn
