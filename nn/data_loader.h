// Batches of a Dataset (nn/idx.h) as literals ready for Tensor::FromLiteral, with seeded
// shuffling.
//
//   absl::StatusOr<DataLoader> loader =
//       DataLoader::Create(&train, {.batch_size = 128, .shuffle = true, .seed = 0});
//   for (int64_t epoch = 0; epoch < 5; ++epoch) {
//     loader->StartEpoch(epoch);
//     for (int64_t i = 0; i < loader->num_batches(); ++i) {
//       Batch batch = loader->GetBatch(i);   // images f32[128,784] in [0,1], labels s32[128]
//     }
//   }
//
// Shuffling: at StartEpoch(e) the example order is a Fisher-Yates shuffle driven by
// std::mt19937_64(seed + e), with bounded draws by rejection from its raw 64-bit output (not
// std::uniform_int_distribution, whose algorithm differs between standard libraries), so an
// epoch's order depends only on (seed, e, dataset size) on every platform.
// Partial batches: with drop_last (training) the final num_examples % batch_size examples of an
// epoch's order are skipped, so every batch has the same shape and the step graph compiles once;
// without it (evaluation) the last batch is smaller (one more cached graph shape).
#ifndef TESSEL_NN_DATA_LOADER_H_
#define TESSEL_NN_DATA_LOADER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/literal.h"
#include "tessel/nn/idx.h"

namespace tessel::nn {

struct DataLoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
};

struct Batch {
  Literal images;  // f32[size, num_features]: pixels / 255, in [0, 1]
  Literal labels;  // s32[size]
  int64_t size = 0;
};

// Fisher-Yates shuffle of `order` driven by `rng` (the loader's shuffle, exposed for tests).
void Shuffle(std::vector<int64_t>& order, std::mt19937_64& rng);

class DataLoader {
 public:
  // `dataset` must outlive the loader. The order starts as StartEpoch(0) made it.
  // Errors: kInvalidArgument if batch_size <= 0, or drop_last is set and the dataset has fewer
  // than batch_size examples (no batch at all).
  [[nodiscard]] static absl::StatusOr<DataLoader> Create(const Dataset* dataset,
                                                         DataLoaderOptions options);

  // Sets the example order for epoch `epoch` (shuffled with seed + epoch when shuffle is on,
  // file order otherwise).
  void StartEpoch(int64_t epoch);

  // Number of batches per epoch: floor(n / B) with drop_last, ceil(n / B) without.
  int64_t num_batches() const;
  // Examples covered by one epoch (n, or n rounded down to a multiple of B with drop_last).
  int64_t num_examples_per_epoch() const;
  // Batch `index` of the current epoch. Precondition: 0 <= index < num_batches() (TESSEL_CHECK).
  Batch GetBatch(int64_t index) const;
  // Rows [row_begin, row_end) of batch `index` only: what one host of a data-parallel job loads
  // for its devices (torch_xla MpDeviceLoader with input_sharding). Precondition: valid index
  // and 0 <= row_begin <= row_end <= the batch's size (TESSEL_CHECK).
  Batch GetBatchRows(int64_t index, int64_t row_begin, int64_t row_end) const;

  const std::vector<int64_t>& order() const { return order_; }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  DataLoader(const Dataset* dataset, DataLoaderOptions options)
      : dataset_(dataset), options_(options) {}

  const Dataset* dataset_;
  DataLoaderOptions options_;
  std::vector<int64_t> order_;
};

}  // namespace tessel::nn

#endif  // TESSEL_NN_DATA_LOADER_H_
