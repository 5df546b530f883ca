// Result and checkpoint comparison for drills; see drill_compare.hpp.
#include "spotvisor/drill/drill_compare.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"
#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/state/journal.hpp"

namespace spotvisor::drill {
namespace {

std::optional<std::string> Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<std::filesystem::path> Newest(const std::filesystem::path& dir, const std::string& pattern) {
  auto p = config::NamePattern::Parse(pattern);
  if (!p) return std::nullopt;
  std::optional<std::pair<std::uint64_t, std::filesystem::path>> best;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const auto step = p->Match(e.path().filename().string());
    if (step && (!best || *step > best->first)) best = std::make_pair(*step, e.path());
  }
  if (!best) return std::nullopt;
  return best->second;
}

// Where one tensor payload lies: a torch.save `<p>/data/<n>` entry, a safetensors data
// section, a DCP shard's leading BYTE_IO bytes.
struct Payload {
  std::filesystem::path file;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
using Payloads = std::map<std::string, Payload>;

void AddZipEntries(const checkpoint::ZipArchive& zip, const std::filesystem::path& file, const std::string& name,
                   Payloads& out) {
  for (const auto& e : zip.entries) {
    const auto at = e.name.find("/data/");
    if (at != std::string::npos) out[name + ":" + e.name.substr(at + 1)] = {file, e.data_offset, e.size};
  }
}

// The payloads of one checkpoint file, by a stable name; none when not a tensor file. A DCP
// shard holds one archive per tensor back to back: each is walked, named by its place.
void AddPayloads(const std::filesystem::path& file, const std::string& rel, Payloads& out) {
  auto src = checkpoint::FileSource::Open(file);
  if (!src) return;
  if (file.extension() == ".distcp") {
    std::vector<checkpoint::ZipArchive> archives;
    std::uint64_t end = src->size();
    while (end > 0) {
      auto zip = checkpoint::ReadZipIndex(*src, end, false);
      if (!zip || !checkpoint::CheckZipLayout(*src, *zip) || zip->start >= end) break;
      end = zip->start;
      archives.push_back(std::move(*zip));
    }
    std::reverse(archives.begin(), archives.end());
    for (std::size_t i = 0; i < archives.size(); ++i)
      AddZipEntries(archives[i], file, rel + ":" + std::to_string(i), out);
    if (end > 0) out[rel + ":bytes"] = {file, 0, end};
    return;
  }
  if (auto zip = checkpoint::ReadZipIndex(*src, src->size(), true)) {
    if (checkpoint::CheckZipLayout(*src, *zip)) AddZipEntries(*zip, file, rel, out);
    return;
  }
  if (file.extension() == ".safetensors" && src->size() >= 8) {
    std::array<std::byte, 8> head{};
    if (!src->ReadAt(0, head)) return;
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint64_t>(head[static_cast<std::size_t>(i)]);
    if (n <= src->size() - 8) out[rel + ":data"] = {file, 8 + n, src->size() - 8 - n};
  }
}

Payloads CheckpointPayloads(const std::filesystem::path& ckpt) {
  Payloads out;
  std::error_code ec;
  if (std::filesystem::is_regular_file(ckpt, ec)) {
    AddPayloads(ckpt, ckpt.filename().string(), out);
    return out;
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(ckpt, ec)) {
    if (e.is_regular_file()) AddPayloads(e.path(), std::filesystem::relative(e.path(), ckpt).string(), out);
  }
  return out;
}

// Whether two payloads hold the same bytes, read 1 MiB at a time from each.
bool SameBytes(const Payload& a, const Payload& b) {
  if (a.length != b.length) return false;
  auto fa = checkpoint::FileSource::Open(a.file);
  auto fb = checkpoint::FileSource::Open(b.file);
  if (!fa || !fb) return false;
  constexpr std::uint64_t kBlock = 1 << 20;
  std::vector<std::byte> x(static_cast<std::size_t>(std::min(kBlock, a.length)));
  std::vector<std::byte> y(x.size());
  for (std::uint64_t done = 0; done < a.length;) {
    const auto n = static_cast<std::size_t>(std::min(kBlock, a.length - done));
    if (!fa->ReadAt(a.offset + done, {x.data(), n}) || !fb->ReadAt(b.offset + done, {y.data(), n})) return false;
    if (std::memcmp(x.data(), y.data(), n) != 0) return false;
    done += n;
  }
  return true;
}

}  // namespace

Comparison CompareResultFiles(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto x = Slurp(a), y = Slurp(b);
  if (!x) return {false, "the uninterrupted run wrote no result file (" + a.string() + ")"};
  if (!y) return {false, "the interrupted run wrote no result file (" + b.string() + ")"};
  if (*x == *y) return {true, "result files are identical (" + std::to_string(x->size()) + " bytes)"};
  auto line = [](const std::string& s) { return s.substr(0, std::min<std::size_t>(s.find('\n'), 80)); };
  return {false, "result files differ: uninterrupted '" + line(*x) + "' vs interrupted '" + line(*y) + "'"};
}

Comparison CompareNewestCheckpoints(const std::filesystem::path& dir_a, const std::filesystem::path& dir_b,
                                    const std::string& pattern) {
  const auto a = Newest(dir_a, pattern), b = Newest(dir_b, pattern);
  if (!a || !b) return {false, "no final checkpoint to compare in " + (a ? dir_b : dir_a).string()};
  if (a->filename() != b->filename()) {
    return {false,
            "the runs ended at different checkpoints: " + a->filename().string() + " vs " + b->filename().string()};
  }
  const auto pa = CheckpointPayloads(*a), pb = CheckpointPayloads(*b);
  if (pa.empty()) return {false, "no tensor payloads found in " + a->string() + " (set job.result_file)"};
  for (const auto& [name, where] : pa) {
    const auto it = pb.find(name);
    if (it == pb.end())
      return {false, "tensor payload " + name + " is missing from the interrupted run's " + b->string()};
    if (!SameBytes(where, it->second))
      return {false, "tensor payload " + name + " differs in " + b->filename().string()};
  }
  if (pb.size() != pa.size()) return {false, "the interrupted run's checkpoint has extra tensor payloads"};
  return {true, "tensor payloads of " + a->filename().string() + " are identical (" + std::to_string(pa.size()) +
                    " tensors)"};
}

double StepsPerSecond(const std::filesystem::path& ckpt_dir, const std::string& pattern,
                      const std::filesystem::path& state_dir) {
  auto p = config::NamePattern::Parse(pattern);
  const auto newest = Newest(ckpt_dir, pattern);
  auto journal = state::Journal::Open(state_dir);
  if (!p || !newest || !journal) return 0;
  const auto attempts = journal->ReadAttempts();
  if (attempts.empty()) return 0;
  const double seconds = (attempts.back().ended_ms - attempts.front().started_ms) / 1000.0;
  const auto step = p->Match(newest->filename().string());
  return seconds > 0 && step ? static_cast<double>(*step) / seconds : 0;
}

std::optional<std::int64_t> CheckpointMillis(const std::filesystem::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

}  // namespace spotvisor::drill
