#include "tessel/nn/data_loader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {

namespace {

// Uniform integer in [0, bound] by rejection (unbiased, platform-independent).
uint64_t UniformAtMost(std::mt19937_64& rng, uint64_t bound) {
  if (bound == UINT64_MAX) return rng();
  // `limit` is a multiple of `range`, so the accepted draws cover every residue equally often;
  // at most `range` of the 2^64 values are rejected, so the loop almost never repeats.
  const uint64_t range = bound + 1;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;  // accept draws below this
  uint64_t draw;
  do {
    draw = rng();
  } while (draw >= limit);
  return draw % range;
}

}  // namespace

// Fisher-Yates from the back (Durstenfeld's form): position i - 1 takes a uniform pick among
// the first i, which makes every permutation equally likely.
void Shuffle(std::vector<int64_t>& order, std::mt19937_64& rng) {
  for (size_t i = order.size(); i > 1; --i) {
    const uint64_t j = UniformAtMost(rng, i - 1);
    std::swap(order[i - 1], order[j]);
  }
}

absl::StatusOr<DataLoader> DataLoader::Create(const Dataset* dataset, DataLoaderOptions options) {
  TESSEL_CHECK(dataset != nullptr);
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: batch_size must be positive, got ", options.batch_size));
  }
  // Caught at creation: num_batches() would be 0 and a training loop would silently do nothing.
  if (options.drop_last && dataset->num_examples < options.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: batch_size ", options.batch_size, " exceeds the dataset's ",
        dataset->num_examples, " examples and drop_last is set, so there would be no batch"));
  }
  // A loader is usable at once: batches come in epoch 0's order until StartEpoch is called.
  DataLoader loader(dataset, options);
  loader.StartEpoch(0);
  return loader;
}

void DataLoader::StartEpoch(int64_t epoch) {
  order_.resize(dataset_->num_examples);
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (options_.shuffle) {
    // A fresh generator per epoch from (seed + epoch), not one advancing across epochs: epoch
    // e's order is the same whether or not earlier epochs ran (resuming from a checkpoint, or
    // every host of a data-parallel job computing it independently).
    std::mt19937_64 rng(options_.seed + static_cast<uint64_t>(epoch));
    Shuffle(order_, rng);
  }
}

int64_t DataLoader::num_batches() const {
  const int64_t n = dataset_->num_examples;
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::num_examples_per_epoch() const {
  const int64_t n = dataset_->num_examples;
  return options_.drop_last ? n / options_.batch_size * options_.batch_size : n;
}

Batch DataLoader::GetBatch(int64_t index) const {
  TESSEL_CHECK(index >= 0 && index < num_batches());
  const int64_t begin = index * options_.batch_size;
  const int64_t end = std::min(begin + options_.batch_size, dataset_->num_examples);
  return GetBatchRows(index, 0, end - begin);
}

Batch DataLoader::GetBatchRows(int64_t index, int64_t row_begin, int64_t row_end) const {
  TESSEL_CHECK(index >= 0 && index < num_batches());
  const int64_t batch_begin = index * options_.batch_size;
  const int64_t batch_size =
      std::min(batch_begin + options_.batch_size, dataset_->num_examples) - batch_begin;
  TESSEL_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= batch_size);
  // Rows are counted inside the batch, so hosts that each load a slice of the same batch agree
  // on which examples it holds (one shuffled order, computed identically on every host).
  const int64_t begin = batch_begin + row_begin;
  const int64_t size = row_end - row_begin;
  const int64_t features = dataset_->num_features();
  Batch batch;
  batch.size = size;
  batch.images = Literal::Uninitialized(Shape(DType::kF32, {size, features}));
  batch.labels = Literal::Uninitialized(Shape(DType::kS32, {size}));
  absl::Span<float> images = batch.images.data<float>();
  absl::Span<int32_t> labels = batch.labels.data<int32_t>();
  // Bytes to [0, 1], as torchvision's ToTensor; no mean/std normalization.
  constexpr float kScale = 1.0f / 255.0f;
  for (int64_t row = 0; row < size; ++row) {
    const int64_t example = order_[begin + row];
    const uint8_t* pixels = dataset_->pixels.data() + example * features;
    float* out = images.data() + row * features;
    for (int64_t f = 0; f < features; ++f) out[f] = static_cast<float>(pixels[f]) * kScale;
    labels[row] = dataset_->labels[example];
  }
  return batch;
}

}  // namespace tessel::nn
