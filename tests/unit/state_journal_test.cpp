// The durable journal line: a disk that fills up part-way through an append leaves no half
// line behind, a torn last line from a power cut stays alone, and attempt records that
// could not be written are appended, in order, once the state dir takes writes again.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "spotvisor/state/journal.hpp"
#include "spotvisor/util/atomic_file.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// Caps the size of files this process writes (RLIMIT_FSIZE, SIGXFSZ ignored) while alive:
// a write past the cap is cut short exactly as on a full disk, then fails with EFBIG.
class FileSizeCap {
 public:
  explicit FileSizeCap(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit capped = saved_;
    capped.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &capped);
  }
  ~FileSizeCap() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeCap(const FileSizeCap&) = delete;
  FileSizeCap& operator=(const FileSizeCap&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

TEST(AppendLineDurably, AWriteCutShortByAFullDiskLeavesNoHalfLine) {
  TempDir dir;
  const auto file = dir / "attempts.jsonl";
  ASSERT_TRUE(AppendLineDurably(file, "{\"attempt\":1}\n").ok());
  const auto before = std::filesystem::file_size(file);
  {
    FileSizeCap cap(before + 10);  // room for 10 of the next line's bytes
    const Status s = AppendLineDurably(file, std::string(100, 'x') + "\n");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find(file.string()), std::string::npos) << s.error().message;
  }
  EXPECT_EQ(std::filesystem::file_size(file), before) << "the partial line was not cut back off";
  ASSERT_TRUE(AppendLineDurably(file, "{\"attempt\":2}\n").ok());
  EXPECT_EQ(ReadFile(file), "{\"attempt\":1}\n{\"attempt\":2}\n");
}

TEST(AppendLineDurably, ATornLastLineFromAPowerCutStaysAlone) {
  TempDir dir;
  const auto file = dir / "attempts.jsonl";
  WriteFile(file, "{\"attempt\":1}\n{\"attem");
  ASSERT_TRUE(AppendLineDurably(file, "{\"attempt\":2}\n").ok());
  EXPECT_EQ(ReadFile(file), "{\"attempt\":1}\n{\"attem\n{\"attempt\":2}\n");
  auto journal = state::Journal::Open(dir.path());
  ASSERT_TRUE(journal.ok());
  const auto attempts = journal->ReadAttempts();
  ASSERT_EQ(attempts.size(), 2u) << "the torn line is skipped, the one after it is read";
  EXPECT_EQ(attempts[1].attempt, 2);
}

TEST(Journal, AttemptsThatCouldNotBeWrittenAreAppendedLaterInOrder) {
  TempDir dir;
  auto journal = state::Journal::Open(dir.path());
  ASSERT_TRUE(journal.ok());
  state::AttemptRecord r;
  r.outcome = "failed";
  r.attempt = 1;
  ASSERT_TRUE(journal->AppendAttempt(r).ok());
  {
    FileSizeCap cap(std::filesystem::file_size(dir / "attempts.jsonl"));  // "full"
    r.attempt = 2;
    EXPECT_FALSE(journal->AppendAttempt(r).ok());
    r.attempt = 3;
    EXPECT_FALSE(journal->AppendAttempt(r).ok());
    EXPECT_EQ(journal->unwritten_attempts(), 2u);
    EXPECT_FALSE(journal->FlushAttempts().ok());
  }
  ASSERT_TRUE(journal->FlushAttempts().ok());
  EXPECT_EQ(journal->unwritten_attempts(), 0u);
  r.attempt = 4;
  ASSERT_TRUE(journal->AppendAttempt(r).ok());
  const auto attempts = journal->ReadAttempts();
  ASSERT_EQ(attempts.size(), 4u) << ReadFile(dir / "attempts.jsonl");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(attempts[static_cast<std::size_t>(i)].attempt, i + 1);
}

}  // namespace
}  // namespace spotvisor
