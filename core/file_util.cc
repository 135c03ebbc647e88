#include "tessel/core/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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
  std::string tmp = path + ".tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) return failure(errno);
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
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return failure(err);
  }
  return absl::OkStatus();
}

}  // namespace tessel
