#include "tessel/nn/data_loader.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// `n` examples of 2x2 pixels; example i has every pixel = i and label i % 3.
Dataset MakeDataset(int64_t n) {
  Dataset d;
  d.num_examples = n;
  d.rows = 2;
  d.cols = 2;
  d.num_classes = 3;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 4; ++k) d.pixels.push_back(static_cast<uint8_t>(i));
    d.labels.push_back(static_cast<uint8_t>(i % 3));
  }
  return d;
}

TEST(DataLoaderTest, BatchesInFileOrderWithoutShuffle) {
  Dataset d = MakeDataset(10);
  absl::StatusOr<DataLoader> loader = DataLoader::Create(&d, {.batch_size = 4});
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->num_batches(), 3);  // 4 + 4 + 2: the partial batch is kept
  EXPECT_EQ(loader->num_examples_per_epoch(), 10);
  Batch first = loader->GetBatch(0);
  EXPECT_EQ(first.size, 4);
  EXPECT_EQ(first.images.shape().ToString(), "f32[4,4]");
  EXPECT_EQ(first.labels.shape().ToString(), "s32[4]");
  EXPECT_THAT(first.labels.ToDoubles(), ElementsAre(0, 1, 2, 0));
  EXPECT_FLOAT_EQ(first.images.data<float>()[4], 1.0f / 255.0f);  // example 1's first pixel
  Batch last = loader->GetBatch(2);
  EXPECT_EQ(last.size, 2);
  EXPECT_EQ(last.images.shape().ToString(), "f32[2,4]");
  EXPECT_THAT(last.labels.ToDoubles(), ElementsAre(2, 0));  // examples 8 and 9
}

TEST(DataLoaderTest, ScalesPixelsToUnitInterval) {
  Dataset d = MakeDataset(1);
  d.pixels = {0, 51, 128, 255};
  absl::StatusOr<DataLoader> loader = DataLoader::Create(&d, {.batch_size = 1});
  ASSERT_TRUE(loader.ok());
  EXPECT_THAT(loader->GetBatch(0).images.data<float>(),
              Pointwise(FloatNear(1e-7), {0.0f, 0.2f, 128.0f / 255.0f, 1.0f}));
}

TEST(DataLoaderTest, DropLastGivesFixedShapes) {
  Dataset d = MakeDataset(10);
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(&d, {.batch_size = 4, .shuffle = true, .drop_last = true});
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(loader->num_batches(), 2);
  EXPECT_EQ(loader->num_examples_per_epoch(), 8);
  for (int64_t i = 0; i < loader->num_batches(); ++i) EXPECT_EQ(loader->GetBatch(i).size, 4);
}

TEST(DataLoaderTest, ShuffleIsAPermutationFixedBySeedAndEpoch) {
  Dataset d = MakeDataset(100);
  DataLoaderOptions options{.batch_size = 10, .shuffle = true, .seed = 5};
  absl::StatusOr<DataLoader> a = DataLoader::Create(&d, options);
  absl::StatusOr<DataLoader> b = DataLoader::Create(&d, options);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int64_t> epoch0 = a->order();
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(epoch0, identity);
  EXPECT_EQ(b->order(), epoch0);  // same seed, same epoch
  a->StartEpoch(1);
  EXPECT_NE(a->order(), epoch0);  // a new order each epoch
  b->StartEpoch(1);
  EXPECT_EQ(a->order(), b->order());
  a->StartEpoch(0);
  EXPECT_EQ(a->order(), epoch0);  // epochs are reproducible
  // seed + epoch: seed 5 epoch 1 is seed 6 epoch 0.
  options.seed = 6;
  absl::StatusOr<DataLoader> c = DataLoader::Create(&d, options);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->order(), b->order());
  // The batch holds the examples of the order.
  Batch batch = a->GetBatch(1);
  for (int64_t row = 0; row < 10; ++row) {
    EXPECT_EQ(batch.labels.data<int32_t>()[row], epoch0[10 + row] % 3);
    EXPECT_FLOAT_EQ(batch.images.data<float>()[row * 4], epoch0[10 + row] / 255.0f);
  }
}

TEST(DataLoaderTest, ShuffleIsPinned) {
  // Pins the platform-independent Fisher-Yates (raw mt19937_64 draws, rejection sampling): a
  // change here changes every run's example order.
  std::vector<int64_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
  std::mt19937_64 rng(0);
  Shuffle(order, rng);
  EXPECT_THAT(order, ElementsAre(4, 5, 2, 0, 7, 1, 3, 6));
}

TEST(DataLoaderTest, RejectsBadOptions) {
  Dataset d = MakeDataset(3);
  EXPECT_THAT(DataLoader::Create(&d, {.batch_size = 0}).status().message(),
              HasSubstr("batch_size must be positive, got 0"));
  EXPECT_THAT(DataLoader::Create(&d, {.batch_size = 4, .drop_last = true}).status().message(),
              HasSubstr("no batch"));
  EXPECT_TRUE(DataLoader::Create(&d, {.batch_size = 4}).ok());
}

}  // namespace
}  // namespace tessel::nn
