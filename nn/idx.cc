#include "tessel/nn/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dim
// Refuse headers that promise more than this many items (a corrupt header must not make us
// try to hold terabytes); Fashion-MNIST's train images are 47 MB.
constexpr uint64_t kMaxItems = uint64_t{1} << 34;
// gzread takes an unsigned length and returns an int, so one call cannot report more than
// INT_MAX bytes; reading in 1 MiB chunks stays far below that, and lets ReadIdx grow its buffer
// only as data actually arrives.
constexpr size_t kChunkBytes = size_t{1} << 20;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzHandle> Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        path,
        ": no such file; install the Fashion-MNIST dataset with `bash scripts/setup.sh` "
        "(package dataset-fashion-mnist) or pass the directory that holds it"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not an IDX file"));
  }
  // Cleared first: per the zlib manual, errno tells whether gzopen failed to open the file;
  // with the mode fixed, a NULL with errno still 0 is the state allocation failing.
  errno = 0;
  gzFile_s* file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    std::string reason = errno != 0 ? std::strerror(errno) : "out of memory";
    if (errno == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", reason));
    }
    return absl::InternalError(absl::StrCat(path, ": cannot open: ", reason));
  }
  // A 64 KiB buffer instead of zlib's 8 KiB default: fewer read calls on a 47 MB file.
  gzbuffer(file, 1 << 16);
  return GzHandle(file);
}

// Reads up to `n` bytes; returns how many were read (fewer only at the end of the data).
absl::StatusOr<size_t> Read(gzFile_s* file, const std::string& path, void* out, size_t n) {
  size_t total = 0;
  while (total < n) {
    unsigned chunk = static_cast<unsigned>(std::min(n - total, kChunkBytes));
    int got = gzread(file, static_cast<char*>(out) + total, chunk);
    if (got < 0) {
      // Z_ERRNO is a file system error (errno says which); anything else is the gzip stream
      // itself, i.e. a damaged file.
      int code = Z_OK;
      const char* message = gzerror(file, &code);
      if (code == Z_ERRNO) {
        return absl::InternalError(absl::StrCat(path, ": read error: ", std::strerror(errno)));
      }
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt gzip data: ", message != nullptr ? message : "?"));
    }
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  return total;
}

// IDX integers are big-endian (MSB first) on every platform; assembled byte by byte, so the
// host's endianness and alignment never matter.
uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxContents {
  std::vector<int64_t> dims;
  std::vector<uint8_t> items;
};

// Reads a whole unsigned-byte IDX file whose magic must be `magic` (which fixes the rank).
absl::StatusOr<IdxContents> ReadIdx(const std::string& path, uint32_t magic,
                                    std::string_view what) {
  TESSEL_ASSIGN_OR_RETURN(GzHandle file, Open(path));
  // The low byte of the magic is the rank; both magics here have rank <= 3, so the magic plus
  // three dim sizes fit in 16 bytes.
  const int rank = static_cast<int>(magic & 0xff);
  unsigned char header[4 * 4];
  const size_t header_bytes = 4 * static_cast<size_t>(1 + rank);
  TESSEL_ASSIGN_OR_RETURN(size_t got, Read(file.get(), path, header, 4));
  if (got < 4) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: the file has ", got,
                                            " bytes, fewer than the 4-byte magic number"));
  }
  const uint32_t found_magic = BigEndian32(header);
  if (found_magic != magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad magic number 0x%08x, expected 0x%08x (%s); is this an IDX file of the right "
        "kind?",
        path, found_magic, magic, what));
  }
  TESSEL_ASSIGN_OR_RETURN(got, Read(file.get(), path, header + 4, header_bytes - 4));
  if (got < header_bytes - 4) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: the header needs ", header_bytes,
                                            " bytes but the file has ", 4 + got));
  }
  IdxContents contents;
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const uint32_t size = BigEndian32(header + 4 * (1 + d));
    // A zero dim would make an empty dataset, which only a damaged header produces.
    if (size == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": dim ", d, " has size 0"));
    }
    contents.dims.push_back(size);
    count *= size;
    if (count > kMaxItems) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the header promises more than ",
                                                     kMaxItems, " items; the header is corrupt"));
    }
  }
  // Grow as data arrives, so a corrupt header cannot make us allocate more than the file holds.
  while (contents.items.size() < count) {
    const size_t before = contents.items.size();
    const size_t want = std::min<uint64_t>(count - before, kChunkBytes);
    contents.items.resize(before + want);
    TESSEL_ASSIGN_OR_RETURN(got, Read(file.get(), path, contents.items.data() + before, want));
    if (got < want) {
      return absl::DataLossError(absl::StrCat(path, ": truncated: the header promises ", count,
                                              " items but the file holds ", before + got));
    }
  }
  // Trailing bytes mean header and data disagree; rather than guess which is right, it is an
  // error, not ignored.
  unsigned char extra;
  TESSEL_ASSIGN_OR_RETURN(got, Read(file.get(), path, &extra, 1));
  if (got != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unexpected data after the ", count, " items the header promises"));
  }
  return contents;
}

// The path of `name` in `dir`, or of `name` without ".gz" when only that one exists.
std::string FindFile(const std::string& dir, const std::string& name) {
  // The .gz name is the canonical download name; an unpacked copy works too, since gzopen
  // reads plain files as well. When neither exists the .gz path is returned, so the kNotFound
  // message names the file the user should fetch.
  std::filesystem::path gz = std::filesystem::path(dir) / name;
  std::error_code ec;
  if (std::filesystem::exists(gz, ec)) return gz.string();
  std::filesystem::path plain = gz;
  plain.replace_extension();
  if (std::filesystem::exists(plain, ec)) return plain.string();
  return gz.string();
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(IdxContents contents,
                          ReadIdx(path, kImagesMagic, "idx3 unsigned-byte images"));
  IdxImages images;
  images.count = contents.dims[0];
  images.rows = contents.dims[1];
  images.cols = contents.dims[2];
  images.pixels = std::move(contents.items);
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(IdxContents contents,
                          ReadIdx(path, kLabelsMagic, "idx1 unsigned-byte labels"));
  return std::move(contents.items);
}

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path, int64_t num_classes) {
  TESSEL_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path));
  TESSEL_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadIdxLabels(labels_path));
  if (static_cast<int64_t>(labels.size()) != images.count) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": holds ", labels.size(),
                                                   " labels but ", images_path, " holds ",
                                                   images.count, " images"));
  }
  // Checked once here because CrossEntropy cannot check labels in the graph (an out-of-range
  // label would silently contribute 0 to the loss; nn/functional.h).
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(labels_path, ": label ", i, " is ", labels[i],
                                                     ", outside [0, ", num_classes, ")"));
    }
  }
  Dataset dataset;
  dataset.num_examples = images.count;
  dataset.rows = images.rows;
  dataset.cols = images.cols;
  dataset.num_classes = num_classes;
  dataset.pixels = std::move(images.pixels);
  dataset.labels = std::move(labels);
  return dataset;
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  return LoadIdxDataset(FindFile(dir, prefix + "-images-idx3-ubyte.gz"),
                        FindFile(dir, prefix + "-labels-idx1-ubyte.gz"), /*num_classes=*/10);
}

}  // namespace tessel::nn
