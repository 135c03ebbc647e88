#include "tessel/nn/idx.h"

#include <zlib.h>

#include <cstdlib>
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

namespace fs = std::filesystem;

// Bytes of an unsigned-byte IDX file with the given magic, dims and items.
std::vector<uint8_t> IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& items) {
  std::vector<uint8_t> bytes;
  auto put32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back((v >> shift) & 0xff);
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  bytes.insert(bytes.end(), items.begin(), items.end());
  return bytes;
}

// Two 2x3 images and their labels.
const std::vector<uint8_t> kPixels = {0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255};
const std::vector<uint8_t> kLabels = {7, 3};

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "tessel_idx_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string WritePlain(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = (fs::path(dir_) / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }

  std::string WriteGzip(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = (fs::path(dir_) / name).string();
    gzFile file = gzopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr);
    EXPECT_EQ(gzwrite(file, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(file), Z_OK);
    return path;
  }

  std::vector<uint8_t> ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
};

TEST_F(IdxTest, ReadsPlainAndGzipImages) {
  std::vector<uint8_t> bytes = IdxBytes(0x803, {2, 2, 3}, kPixels);
  for (const std::string& path :
       {WritePlain("images-idx3-ubyte", bytes), WriteGzip("images-idx3-ubyte.gz", bytes)}) {
    absl::StatusOr<IdxImages> images = ReadIdxImages(path);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->count, 2);
    EXPECT_EQ(images->rows, 2);
    EXPECT_EQ(images->cols, 3);
    EXPECT_EQ(images->pixels, kPixels);
  }
}

TEST_F(IdxTest, ReadsPlainAndGzipLabels) {
  std::vector<uint8_t> bytes = IdxBytes(0x801, {2}, kLabels);
  for (const std::string& path : {WritePlain("labels", bytes), WriteGzip("labels.gz", bytes)}) {
    absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
    ASSERT_TRUE(labels.ok()) << labels.status();
    EXPECT_THAT(*labels, ElementsAre(7, 3));
  }
}

TEST_F(IdxTest, ReadsMoreThanOneChunk) {
  // 3 MiB of items crosses the reader's 1 MiB chunks.
  std::vector<uint8_t> items(3 * 1024 * 1024 + 5);
  for (size_t i = 0; i < items.size(); ++i) items[i] = static_cast<uint8_t>(i * 31 + i / 7);
  std::string path =
      WriteGzip("big.gz", IdxBytes(0x801, {static_cast<uint32_t>(items.size())}, items));
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, items);
}

TEST_F(IdxTest, MissingFileIsNotFoundWithSetupHint) {
  std::string path = (fs::path(dir_) / "nope.gz").string();
  absl::Status status = ReadIdxImages(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("bash scripts/setup.sh"));
}

TEST_F(IdxTest, DirectoryIsRejected) {
  EXPECT_THAT(ReadIdxLabels(dir_).status().message(), HasSubstr("is a directory"));
}

TEST_F(IdxTest, BadMagicNamesFileAndBothNumbers) {
  // A label file passed as images.
  std::string path = WriteGzip("labels.gz", IdxBytes(0x801, {2}, kLabels));
  absl::Status status = ReadIdxImages(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("bad magic number 0x00000801, expected 0x00000803"));
  // Not an IDX file at all.
  std::string text = WritePlain("text", {'h', 'e', 'l', 'l', 'o', '\n'});
  EXPECT_THAT(ReadIdxLabels(text).status().message(), HasSubstr("bad magic number 0x68656c6c"));
}

TEST_F(IdxTest, TruncatedFilesAreDataLoss) {
  std::vector<uint8_t> full = IdxBytes(0x803, {2, 2, 3}, kPixels);
  struct Case {
    size_t keep;
    const char* message;
  };
  for (const Case& c : {Case{0, "fewer than the 4-byte magic number"},
                        Case{2, "fewer than the 4-byte magic number"},
                        Case{9, "the header needs 16 bytes but the file has 9"},
                        Case{16, "promises 12 items but the file holds 0"},
                        Case{full.size() - 1, "promises 12 items but the file holds 11"}}) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + c.keep);
    for (const std::string& path : {WritePlain("cut", cut), WriteGzip("cut.gz", cut)}) {
      absl::Status status = ReadIdxImages(path).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << path << " keep " << c.keep;
      EXPECT_THAT(status.message(), HasSubstr(c.message)) << path;
      EXPECT_THAT(status.message(), HasSubstr(path));
    }
  }
}

TEST_F(IdxTest, TruncatedGzipStreamIsDataLoss) {
  // Cut the compressed stream itself (not the IDX payload before compression).
  std::vector<uint8_t> items(5000);
  for (size_t i = 0; i < items.size(); ++i) items[i] = static_cast<uint8_t>(i * 7919 % 251);
  std::string path = WriteGzip("stream.gz", IdxBytes(0x801, {5000}, items));
  std::vector<uint8_t> compressed = ReadAll(path);
  compressed.resize(compressed.size() / 2);
  std::string cut = WritePlain("stream_cut.gz", compressed);
  absl::Status status = ReadIdxLabels(cut).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
}

TEST_F(IdxTest, CorruptGzipStreamIsDataLoss) {
  std::vector<uint8_t> items(5000, 42);
  std::vector<uint8_t> compressed = ReadAll(WriteGzip("c.gz", IdxBytes(0x801, {5000}, items)));
  // Garble the deflate data after the 10-byte gzip header.
  for (size_t i = 12; i < compressed.size() - 8; ++i) compressed[i] ^= 0x5a;
  absl::Status status = ReadIdxLabels(WritePlain("garbled.gz", compressed)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
}

TEST_F(IdxTest, TrailingDataAndZeroDimsAreRejected) {
  std::vector<uint8_t> bytes = IdxBytes(0x801, {2}, {7, 3, 9});
  EXPECT_THAT(ReadIdxLabels(WriteGzip("extra.gz", bytes)).status().message(),
              HasSubstr("unexpected data after the 2 items"));
  EXPECT_THAT(ReadIdxImages(WritePlain("zero", IdxBytes(0x803, {2, 0, 3}, {}))).status().message(),
              HasSubstr("dim 1 has size 0"));
}

TEST_F(IdxTest, HugeHeaderFailsWithoutAllocatingIt) {
  // 2^32-1 x 2^32-1 x 2 items: refused from the header alone.
  std::string path = WritePlain("huge", IdxBytes(0x803, {0xffffffff, 0xffffffff, 2}, {}));
  EXPECT_THAT(ReadIdxImages(path).status().message(), HasSubstr("header is corrupt"));
  // 2^31 items promised, 3 present: fails as truncated after reading what is there.
  std::string lying = WritePlain("lying", IdxBytes(0x801, {0x80000000}, {1, 2, 3}));
  EXPECT_THAT(ReadIdxLabels(lying).status().message(),
              HasSubstr("promises 2147483648 items but the file holds 3"));
}

TEST_F(IdxTest, LoadIdxDatasetChecksCountsAndLabels) {
  std::string images = WriteGzip("i.gz", IdxBytes(0x803, {2, 2, 3}, kPixels));
  absl::StatusOr<Dataset> dataset =
      LoadIdxDataset(images, WriteGzip("l.gz", IdxBytes(0x801, {2}, kLabels)), 10);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->num_examples, 2);
  EXPECT_EQ(dataset->num_features(), 6);
  EXPECT_EQ(dataset->num_classes, 10);
  EXPECT_EQ(dataset->pixels, kPixels);
  EXPECT_EQ(dataset->labels, kLabels);

  std::string three = WriteGzip("l3.gz", IdxBytes(0x801, {3}, {1, 2, 3}));
  EXPECT_THAT(LoadIdxDataset(images, three, 10).status().message(),
              HasSubstr("holds 3 labels but"));
  std::string big_label = WriteGzip("l10.gz", IdxBytes(0x801, {2}, {1, 10}));
  EXPECT_THAT(LoadIdxDataset(images, big_label, 10).status().message(),
              HasSubstr("label 1 is 10, outside [0, 10)"));
}

TEST_F(IdxTest, LoadFashionMnistFindsStandardNamesGzipOrPlain) {
  WriteGzip("train-images-idx3-ubyte.gz", IdxBytes(0x803, {2, 2, 3}, kPixels));
  WriteGzip("train-labels-idx1-ubyte.gz", IdxBytes(0x801, {2}, kLabels));
  WritePlain("t10k-images-idx3-ubyte", IdxBytes(0x803, {1, 2, 3}, {9, 8, 7, 6, 5, 4}));
  WritePlain("t10k-labels-idx1-ubyte", IdxBytes(0x801, {1}, {4}));
  absl::StatusOr<Dataset> train = LoadFashionMnist(dir_, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples, 2);
  absl::StatusOr<Dataset> test = LoadFashionMnist(dir_, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, 1);
  EXPECT_THAT(test->labels, ElementsAre(4));

  absl::Status missing = LoadFashionMnist(dir_ + "/absent", Split::kTrain).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("absent/train-images-idx3-ubyte.gz"));
}

// The real dataset, checked only where scripts/setup.sh installed it (the synthetic tests above
// cover the reader; this one adds the real files' sizes when they are present and checks
// nothing otherwise).
TEST(RealFashionMnistTest, HasStandardSizesWhenInstalled) {
  if (!fs::exists(fs::path(kDefaultFashionMnistDir) / "t10k-labels-idx1-ubyte.gz")) return;
  absl::StatusOr<Dataset> test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, 10000);
  EXPECT_EQ(test->rows, 28);
  EXPECT_EQ(test->cols, 28);
  std::vector<int> per_class(10, 0);
  for (uint8_t label : test->labels) ++per_class[label];
  for (int count : per_class) EXPECT_EQ(count, 1000);  // Fashion-MNIST's test set is balanced
}

}  // namespace
}  // namespace tessel::nn
