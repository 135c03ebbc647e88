// Output files that are whole or absent: every file Tessel writes for a user (Chrome traces, HLO
// dumps) goes through one atomic writer, so a reader, a crash or kill -9 in the middle of a
// write never leaves a torn or empty file behind.
//
//   TESSEL_RETURN_IF_ERROR(WriteFileAtomically("step.json", json_text, "trace file"));
#ifndef TESSEL_CORE_FILE_UTIL_H_
#define TESSEL_CORE_FILE_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessel {

// Writes `contents` to `path` atomically: into a fresh temporary file beside it
// (`<path>.tmp.XXXXXX`, made with mkstemp, so no other process can have claimed the name),
// flushed to disk (fsync), given mode 0644, then renamed over `path` (rename(2) replaces the old
// file in one step). On failure the temporary file is removed and `path` is left as it was.
// `what` names the file in errors ("trace file", "HLO dump").
// A symbolic link is followed: the file it names is replaced, the link stays.
// Errors: kInvalidArgument "cannot write <what> <path>: <reason>" when `path` exists and is not a
// regular file (a directory, FIFO, device or socket: the rename would replace it), when it is a
// link that does not resolve, when the folder does not exist or no temporary file can be made in
// it (the message names the folder), when the disk is full, or when the rename fails.
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                               std::string_view what = "file");

// The whole of the input file `path`, as bytes. Only a regular file is read: a FIFO would block
// forever and /dev/zero never ends; and at most `max_bytes` of it. `what` names the file in
// errors, with its article ("a JSON file", "an HLO file").
// Errors: kNotFound "<path>: no such file"; kInvalidArgument "<path>: is a directory, not
// <what>", "<path>: is not a regular file (a FIFO, device or socket), not <what>", "<path>:
// N bytes, more than the M <what> may have", "<path>: cannot open for reading: <reason>",
// "<path>: read error".
[[nodiscard]] absl::StatusOr<std::string> ReadInputFile(const std::string& path,
                                                        std::string_view what, int64_t max_bytes);

}  // namespace tessel

#endif  // TESSEL_CORE_FILE_UTIL_H_
