#include "tessel/core/file_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tsl-file-util-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(FileUtilTest, ReplacesTheFileWholeAndLeavesNoTemporaryFile) {
  const std::string path = dir_ + "/out.hlo";
  { std::ofstream(path) << "an older, longer file that must not survive in part"; }
  ASSERT_TRUE(WriteFileAtomically(path, "HloModule m\n", "HLO dump").ok());
  EXPECT_EQ(Slurp(path), "HloModule m\n");
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
  ASSERT_TRUE(WriteFileAtomically(path, "", "HLO dump").ok());
  EXPECT_EQ(Slurp(path), "");
}

TEST_F(FileUtilTest, NamesTheFileAndReasonWhenItCannotWrite) {
  absl::Status s = WriteFileAtomically(dir_ + "/no-such-folder/trace.json", "{}", "trace file");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr(
                  absl::StrCat("cannot write trace file ", dir_,
                               "/no-such-folder/trace.json: cannot create a temporary file in ",
                               dir_, "/no-such-folder/ to write it atomically: No such file")));
}

// rename(2) would have swapped a FIFO (or, as root, /dev/null) for a regular file, and a
// symbolic link for a file beside its target.
TEST_F(FileUtilTest, RefusesToReplaceWhatIsNotARegularFileAndFollowsLinks) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  absl::Status s = WriteFileAtomically(fifo, "{}", "trace file");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("it exists and is not a regular file (a FIFO, device or "
                                   "socket)"));
  struct stat info;
  ASSERT_EQ(stat(fifo.c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode));
  s = WriteFileAtomically(dir_, "{}", "trace file");
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("(a directory)"));

  const std::string target = dir_ + "/target.json", link = dir_ + "/link.json";
  { std::ofstream(target) << "old"; }
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(link, "new", "trace file").ok());
  ASSERT_EQ(lstat(link.c_str(), &info), 0);
  EXPECT_TRUE(S_ISLNK(info.st_mode));
  EXPECT_EQ(Slurp(target), "new");

  const std::string dangling = dir_ + "/dangling.json";
  ASSERT_EQ(symlink((dir_ + "/missing/x.json").c_str(), dangling.c_str()), 0);
  s = WriteFileAtomically(dangling, "{}", "trace file");
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("is a symbolic link whose target cannot be resolved"));
}

// kill -9 in the middle of rewrites: the file is always one whole version, never a mix, a
// prefix or empty (the issue saw torn or empty traces in 6 of 30 such runs before).
TEST_F(FileUtilTest, KillDuringWritesNeverLeavesATornFile) {
  const std::string path = dir_ + "/trace.json";
  const std::string a(4 << 20, 'a');
  const std::string b(4 << 20, 'b');
  ASSERT_TRUE(WriteFileAtomically(path, a).ok());
  for (int run = 0; run < 10; ++run) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int i = 0;; ++i) (void)WriteFileAtomically(path, i % 2 ? a : b);
    }
    absl::SleepFor(absl::Milliseconds(5 + 7 * run));
    ASSERT_EQ(kill(child, SIGKILL), 0);
    waitpid(child, nullptr, 0);
    const std::string now = Slurp(path);
    EXPECT_TRUE(now == a || now == b) << "run " << run << ": " << now.size() << " bytes";
  }
}

// Input files: a regular file is read whole; a FIFO (opening it would wait for a writer),
// /dev/zero (never ends), a directory and a file over the bound are refused by name, quickly.
TEST_F(FileUtilTest, ReadsRegularFilesOnlyAndBoundsTheirSize) {
  const std::string path = dir_ + "/in.json";
  { std::ofstream(path) << "{\"a\": 1}"; }
  absl::StatusOr<std::string> text = ReadInputFile(path, "a JSON file", 1024);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");
  EXPECT_THAT(ReadInputFile(path, "a JSON file", 4).status().message(),
              ::testing::HasSubstr("in.json: 8 bytes, more than the 4 a JSON file may have"));
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadInputFile(fifo, "a JSON file", 1024).status().message(),
            fifo + ": is not a regular file (a FIFO, device or socket), not a JSON file");
  EXPECT_EQ(ReadInputFile("/dev/zero", "an HLO file", 1024).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadInputFile(dir_, "a JSON file", 1024).status().message(),
            dir_ + ": is a directory, not a JSON file");
  EXPECT_EQ(ReadInputFile(dir_ + "/missing", "a JSON file", 1024).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessel
