#include "tessel/nn/text_data.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A temp directory removed at the end of the test.
class TempCorpus {
 public:
  TempCorpus() {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessel_text_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempCorpus() { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

std::string AsString(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

TEST(TextCorpusTest, SplitsSortedFilesAndSkipsIndexFiles) {
  TempCorpus t;
  // Written out of order: the split must follow sorted names, not the listing order.
  t.Write("d", "DDDD");
  t.Write("a", "AAAA");
  t.Write("c", "CCCC");
  t.Write("b", "BBBB");
  t.Write("a.dat", "index");  // strfile index: skipped
  t.Write(".hidden", "x");    // skipped
  std::filesystem::create_symlink(std::filesystem::path(t.dir()) / "a",
                                  std::filesystem::path(t.dir()) / "a.u8");
  absl::StatusOr<TextCorpus> c = LoadTextCorpus(t.dir(), /*validation_every=*/2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->train_files, ElementsAre("a", "c"));
  EXPECT_THAT(c->validation_files, ElementsAre("b", "d"));
  EXPECT_EQ(AsString(c->train), "AAAACCCC");
  EXPECT_EQ(AsString(c->validation), "BBBBDDDD");
}

TEST(TextCorpusTest, MissingDirectoryNamesIt) {
  absl::StatusOr<TextCorpus> c = LoadTextCorpus("/nonexistent/tessel/corpus");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/tessel/corpus"));
  EXPECT_THAT(c.status().message(), HasSubstr("Debian package fortunes"));
}

TEST(TextCorpusTest, EmptyAndTooSmallSplitsAreErrors) {
  TempCorpus t;
  EXPECT_EQ(LoadTextCorpus(t.dir()).status().code(), absl::StatusCode::kNotFound);
  t.Write("only", "some text");
  // One file: the validation split (every 2nd file) is empty.
  absl::StatusOr<TextCorpus> c = LoadTextCorpus(t.dir(), 2);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("validation split has 0 bytes"));
  EXPECT_EQ(LoadTextCorpus(t.dir(), 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextCorpusTest, UnigramEntropy) {
  const std::vector<uint8_t> uniform = {'a', 'b', 'c', 'd'};
  EXPECT_DOUBLE_EQ(UnigramEntropyBits(uniform), 2.0);
  const std::vector<uint8_t> constant = {'z', 'z', 'z'};
  EXPECT_DOUBLE_EQ(UnigramEntropyBits(constant), 0.0);
  const std::vector<uint8_t> skewed = {'a', 'a', 'a', 'b'};  // p = 3/4, 1/4
  EXPECT_NEAR(UnigramEntropyBits(skewed), 0.8112781244591328, 1e-12);
  EXPECT_EQ(UnigramEntropyBits({}), 0.0);
}

TEST(TextBatcherTest, WindowsAreNextByteShiftedAndDeterministic) {
  std::vector<uint8_t> data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<uint8_t>(i % 251));
  TextBatcher batcher(&data, {.batch = 4, .seq_len = 16, .seed = 3});
  TextBatch b = batcher.GetBatch(5);
  EXPECT_EQ(b.tokens.shape().ToString(), "s32[4,16]");
  EXPECT_EQ(b.labels.shape().ToString(), "s32[4,16]");
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t start = batcher.WindowStart(5, r);
    ASSERT_GE(start, 0);
    ASSERT_LT(start + 16, 1000);
    for (int64_t t = 0; t < 16; ++t) {
      EXPECT_EQ(b.tokens.GetAsDouble(r * 16 + t), data[start + t]);
      EXPECT_EQ(b.labels.GetAsDouble(r * 16 + t), data[start + t + 1]);
    }
  }
  // The same seed and step give the same batch; another step or seed another one.
  TextBatcher again(&data, {.batch = 4, .seq_len = 16, .seed = 3});
  TextBatcher other_seed(&data, {.batch = 4, .seq_len = 16, .seed = 4});
  EXPECT_EQ(again.WindowStart(5, 2), batcher.WindowStart(5, 2));
  EXPECT_NE(batcher.WindowStart(6, 2), batcher.WindowStart(5, 2));
  EXPECT_NE(other_seed.WindowStart(5, 2), batcher.WindowStart(5, 2));
  EXPECT_NE(WindowHash(0, 1, 2), WindowHash(0, 2, 1));
}

TEST(TextBatcherTest, RowsAreTheWholeBatchRows) {
  std::vector<uint8_t> data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<uint8_t>(i * 7));
  TextBatcher batcher(&data, {.batch = 6, .seq_len = 8, .seed = 1});
  TextBatch whole = batcher.GetBatch(2);
  TextBatch part = batcher.GetBatchRows(2, 2, 5);
  EXPECT_EQ(part.tokens.shape().ToString(), "s32[3,8]");
  for (int64_t i = 0; i < 3 * 8; ++i) {
    EXPECT_EQ(part.tokens.GetAsDouble(i), whole.tokens.GetAsDouble(2 * 8 + i));
    EXPECT_EQ(part.labels.GetAsDouble(i), whole.labels.GetAsDouble(2 * 8 + i));
  }
  EXPECT_EQ(batcher.GetBatchRows(2, 3, 3).tokens.shape().ToString(), "s32[0,8]");
}

TEST(TextBatcherTest, CheckRejectsShortData) {
  std::vector<uint8_t> data(8, 'x');
  EXPECT_TRUE(TextBatcher::Check(data, {.batch = 1, .seq_len = 7}, "training split").ok());
  absl::Status s = TextBatcher::Check(data, {.batch = 1, .seq_len = 8}, "validation split");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("validation split has 8 bytes"));
  EXPECT_FALSE(TextBatcher::Check(data, {.batch = 0, .seq_len = 4}, "x").ok());
  // batch x seq_len past 2^31 tokens, or past int64 (2^59 x 32 wrapped to 0 and the batch was
  // written past an empty buffer).
  EXPECT_TRUE(TextBatcher::Check(data, {.batch = int64_t{1} << 28, .seq_len = 7}, "x").ok());
  for (int64_t batch : {int64_t{1} << 29, int64_t{1} << 59, int64_t{1} << 62}) {
    absl::Status big = TextBatcher::Check(data, {.batch = batch, .seq_len = 7}, "x");
    EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument) << batch;
    EXPECT_NE(big.message().find("is more than 2147483648 tokens a step"), std::string::npos)
        << big;
  }
}

}  // namespace
}  // namespace tessel::nn
