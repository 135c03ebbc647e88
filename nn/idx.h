// Reader for the IDX file format of MNIST and Fashion-MNIST, plain or gzip-compressed.
//
//   absl::StatusOr<Dataset> train = LoadFashionMnist("/usr/share/datasets/fashion-mnist",
//                                                    Split::kTrain);
//   train->num_examples == 60000;  train->num_features() == 784;
//
// The format (big-endian): a 4-byte magic number 0x000008DD, where 08 says the items are
// unsigned bytes and DD is the number of dims; then DD 4-byte dim sizes; then the items,
// row-major. Images are idx3 (magic 0x00000803, dims [n, rows, cols]); labels are idx1 (magic
// 0x00000801, dims [n]). Files are opened with zlib's gzopen, which reads gzip files and plain
// files alike. Source: Y. LeCun, "The MNIST database" (file format section); Xiao, Rasul &
// Vollgraf 2017, "Fashion-MNIST".
//
// Errors (each message names the file):
//   kNotFound          the file does not exist (with a hint to run `bash scripts/setup.sh`,
//                      which installs the dataset package)
//   kInvalidArgument   wrong magic number, a zero dim, trailing data after the items, image and
//                      label counts that differ, a label >= num_classes
//   kDataLoss          the file ends before its header or items are complete (truncated), or
//                      the gzip stream is corrupt
//   kPermissionDenied / kInternal  the file cannot be opened or read for another reason
#ifndef TESSEL_NN_IDX_H_
#define TESSEL_NN_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessel::nn {

// Where scripts/setup.sh installs Fashion-MNIST (Debian package dataset-fashion-mnist).
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// An idx3 file: `count` images of rows x cols unsigned-byte pixels, row-major
// (pixels.size() == count * rows * cols).
struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;
};

// Reads an idx3 unsigned-byte image file (magic 0x00000803), plain or gzipped.
// Errors: see the file comment.
[[nodiscard]] absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);

// Reads an idx1 unsigned-byte label file (magic 0x00000801), plain or gzipped: one byte per item.
// Errors: see the file comment.
[[nodiscard]] absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

// Images with their labels, in file order.
struct Dataset {
  int64_t num_examples = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t num_classes = 0;
  std::vector<uint8_t> pixels;  // [num_examples, rows * cols], row-major, 0..255
  std::vector<uint8_t> labels;  // [num_examples], each in [0, num_classes)

  int64_t num_features() const { return rows * cols; }
};

// Reads an image file and its label file into a Dataset and checks that they agree.
// Errors: those of the readers; kInvalidArgument if the counts differ or a label is
// >= num_classes (naming the label file, the example index and the label).
[[nodiscard]] absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                                     const std::string& labels_path,
                                                     int64_t num_classes);

enum class Split { kTrain, kTest };

// Loads Fashion-MNIST from `dir`: train-{images-idx3,labels-idx1}-ubyte.gz (60000 examples) or
// t10k-{images-idx3,labels-idx1}-ubyte.gz (10000), 28x28 images, 10 classes. Each file is also
// accepted without the .gz suffix when only the plain file exists.
// Errors: as LoadIdxDataset; kNotFound names the missing path.
[[nodiscard]] absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split);

}  // namespace tessel::nn

#endif  // TESSEL_NN_IDX_H_
