// Byte-level text corpora for language models: a directory of text files split into training and
// validation BY FILE, and deterministic batches of (batch, seq_len) windows drawn from a seed.
//
//   absl::StatusOr<TextCorpus> corpus = LoadTextCorpus(kDefaultFortunesDir);
//   TextBatcher train(&corpus->train, {.batch = 32, .seq_len = 128, .seed = 0});
//   TextBatch b = train.GetBatch(step);         // tokens s32[32,128], labels s32[32,128]
//   TextBatch mine = train.GetBatchRows(step, 8, 16);   // one host's rows only
//
// Tokens are bytes (vocab 256): token = the unsigned byte value, no tokenizer.
// Split rule (deterministic, independent of the file system's listing order): the regular files
// of the directory whose names do not start with "." and do not end in ".dat" or ".u8" (the
// strfile index and the UTF-8 symlinks of the Debian `fortunes` package), sorted by name
// (byte-wise); file i (0-based) goes to validation when i % validation_every ==
// validation_every - 1, else to training. Each split is its files' bytes concatenated in that
// order.
// Windows: row r of batch `step` starts at offset SplitMix64(seed, step, r) mod (n - seq_len)
// of its split's n bytes; tokens are bytes [start, start + seq_len), labels the bytes one
// further (next-byte prediction). A row depends only on (seed, step, r, the split), so a host
// computes just its rows (torch_xla MpDeviceLoader with input_sharding) and every host, and the
// single-device run, see the same global batch.
#ifndef TESSEL_NN_TEXT_DATA_H_
#define TESSEL_NN_TEXT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/literal.h"

namespace tessel::nn {

// Where Debian's `fortunes` package (installed by scripts/setup.sh) keeps its fortune files:
// 43 files, about 2.5 MB of English.
inline constexpr char kDefaultFortunesDir[] = "/usr/share/games/fortunes";

struct TextCorpus {
  std::string dir;
  std::vector<std::string> train_files;  // base names, sorted
  std::vector<std::string> validation_files;
  std::vector<uint8_t> train;  // the training files' bytes, concatenated
  std::vector<uint8_t> validation;
};

// Reads and splits the corpus in `dir` (see the file comment for the rule).
// Errors: kNotFound if `dir` does not exist or holds no text file (the message names the
// directory and the Debian package `fortunes` that provides the default corpus);
// kInvalidArgument if validation_every < 2 or a split would be empty or shorter than 2 bytes;
// kInternal (naming the file) if a file cannot be read.
[[nodiscard]] absl::StatusOr<TextCorpus> LoadTextCorpus(const std::string& dir,
                                                        int64_t validation_every = 8);

// Shannon entropy of the byte frequencies of `bytes`, in bits per byte: -sum_c p_c log2 p_c, the
// loss of the best model that ignores context (a unigram model). 0 for empty input.
[[nodiscard]] double UnigramEntropyBits(absl::Span<const uint8_t> bytes);

// SplitMix64 (Steele, Lea & Flood 2014) of (seed, step, row): a well-mixed 64-bit value, the
// same on every platform. Exposed for tests.
[[nodiscard]] uint64_t WindowHash(uint64_t seed, int64_t step, int64_t row);

struct TextBatcherOptions {
  int64_t batch = 32;
  int64_t seq_len = 128;
  uint64_t seed = 0;
};

struct TextBatch {
  Literal tokens;  // s32[rows, seq_len], bytes 0..255
  Literal labels;  // s32[rows, seq_len]: the next byte of each token
};

// The most tokens (batch x seq_len) one batch may hold: 2^31.
inline constexpr int64_t kMaxTextBatchTokens = int64_t{1} << 31;

class TextBatcher {
 public:
  // `data` must outlive the batcher and hold more than options.seq_len bytes (TESSEL_CHECK;
  // LoadTextCorpus guarantees at least 2 bytes, CheckTextBatcher checks a given seq_len).
  TextBatcher(const std::vector<uint8_t>* data, TextBatcherOptions options);

  // Errors: kInvalidArgument if batch or seq_len is not positive, their product is more than
  // kMaxTextBatchTokens, or `data` has no more than seq_len bytes (naming `what`, e.g.
  // "validation split", and both sizes).
  [[nodiscard]] static absl::Status Check(const std::vector<uint8_t>& data,
                                          const TextBatcherOptions& options,
                                          const std::string& what);

  // The whole batch `step` (any step >= 0).
  TextBatch GetBatch(int64_t step) const;
  // Rows [row_begin, row_end) of batch `step`. Precondition: 0 <= row_begin <= row_end <= batch
  // (TESSEL_CHECK).
  TextBatch GetBatchRows(int64_t step, int64_t row_begin, int64_t row_end) const;
  // Offset of row `row`'s window in the data.
  int64_t WindowStart(int64_t step, int64_t row) const;

  const TextBatcherOptions& options() const { return options_; }

 private:
  const std::vector<uint8_t>* data_;
  TextBatcherOptions options_;
};

}  // namespace tessel::nn

#endif  // TESSEL_NN_TEXT_DATA_H_
