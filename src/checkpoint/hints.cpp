// DeepSpeed / Megatron pointer files; see hints.hpp. Megatron parses its tracker strictly
// (an integer or "release"), so ours is written as a bare decimal with a newline.
#include "spotvisor/checkpoint/hints.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr const char* kDeepSpeed = "latest";
constexpr const char* kMegatron = "latest_checkpointed_iteration.txt";

std::optional<std::string> ReadSmall(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > 4096) return std::nullopt;
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return std::string();
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::vector<Hint> ReadHints(const fs::path& dir) {
  std::vector<Hint> hints;
  if (auto v = ReadSmall(dir / kDeepSpeed)) {
    hints.push_back({dir / kDeepSpeed, *v, !v->empty() && v->find('/') == std::string::npos});
  }
  if (auto v = ReadSmall(dir / kMegatron)) hints.push_back({dir / kMegatron, *v, AllDigits(*v) || *v == "release"});
  return hints;
}

Result<std::vector<fs::path>> RewriteHints(const fs::path& dir, const std::string& chosen_name,
                                           std::uint64_t chosen_step) {
  std::vector<fs::path> rewritten;
  std::error_code ec;
  if (fs::is_regular_file(dir / kDeepSpeed, ec)) {
    if (auto st = WriteFileAtomically(dir / kDeepSpeed, chosen_name); !st) return st.error();
    rewritten.push_back(dir / kDeepSpeed);
  }
  if (fs::is_regular_file(dir / kMegatron, ec)) {
    if (auto st = WriteFileAtomically(dir / kMegatron, std::to_string(chosen_step) + "\n"); !st) return st.error();
    rewritten.push_back(dir / kMegatron);
  }
  return rewritten;
}

}  // namespace spotvisor::checkpoint
