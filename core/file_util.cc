#include "tessel/core/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"

namespace tessel {

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 std::string_view what) {
  auto failure = [&](int err) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot write %s %s: %s", what, path, std::strerror(err)));
  };
  // rename(2) replaces whatever has the name: a FIFO, a device (`/dev/null`, as root) or a
  // symbolic link would be swapped for a regular file. A link is followed to the file it names;
  // anything else that is not a regular file is refused.
  std::string target = path;
  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) {
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (resolved == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cannot write %s %s: it is a symbolic link whose target cannot be resolved: %s", what,
          path, std::strerror(errno)));
    }
    target = resolved;
    std::free(resolved);
  }
  if (::stat(target.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot write %s %s: it exists and is not a regular file (%s); the file is written whole "
        "and renamed into place, which would replace it",
        what, path, S_ISDIR(info.st_mode) ? "a directory" : "a FIFO, device or socket"));
  }
  std::string tmp = target + ".tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    // The error is about the folder, not the file: say so (in /proc, ENOENT read as "no such
    // file" for a file that exists).
    const int err = errno;
    const size_t slash = target.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : target.substr(0, slash + 1);
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot write %s %s: cannot create a temporary file in %s to write it "
                        "atomically: %s",
                        what, path, folder, std::strerror(err)));
  }
  tmp = name.data();
  size_t written = 0;
  int err = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    written += static_cast<size_t>(n);
  }
  // mkstemp makes the file 0600; an output file is meant to be read like any other.
  if (err == 0 && ::fchmod(fd, 0644) != 0) err = errno;
  // Without the fsync a crash of the machine soon after the rename could leave an empty file.
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), target.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return failure(err);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadInputFile(const std::string& path, std::string_view what,
                                          int64_t max_bytes) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrFormat("%s: no such file", path));
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot open for reading: %s", path, std::strerror(errno)));
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: is a directory, not %s", path, what));
  }
  // Checked before opening: opening a FIFO with no writer blocks, and a device may never end.
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: is not a regular file (a FIFO, device or socket), not %s", path, what));
  }
  if (info.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d bytes, more than the %d %s may have",
                                                      path, info.st_size, max_bytes, what));
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot open for reading: %s", path, std::strerror(errno)));
  }
  // Read to the end, not to st_size: the file may have grown since stat (still bounded).
  std::string text;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, got);
    if (static_cast<int64_t>(text.size()) > max_bytes) break;
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return absl::InvalidArgumentError(absl::StrFormat("%s: read error", path));
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: more than the %d bytes %s may have", path, max_bytes, what));
  }
  return text;
}

}  // namespace tessel
