// The verdict cache file; see verdict_cache.hpp. A line format, because `latest` and the
// resume selection read it on every start and a 10,000-entry JSON document took longer to
// parse than the rest of the selection: a header line "spotvisor-verdict-cache\t2\tDIR",
// then one line per checkpoint: NAME size mtime_ns inode level good format reason, tab-
// separated, with \\, \t and \n escaped in the text fields.
#include "spotvisor/checkpoint/verdict_cache.hpp"

#include <charconv>
#include <fstream>
#include <iterator>
#include <string_view>
#include <vector>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::checkpoint {
namespace {
using config::ValidateLevel;

constexpr std::string_view kMagic = "spotvisor-verdict-cache";
constexpr std::string_view kVersion = "2";

int Rank(ValidateLevel l) { return static_cast<int>(l); }

void AppendEscaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

std::string Unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char next = text[++i];
      out += next == 't' ? '\t' : next == 'n' ? '\n' : next;
    } else {
      out += text[i];
    }
  }
  return out;
}

// `line` split at tabs into exactly `n` fields, or empty.
std::vector<std::string_view> Fields(std::string_view line, std::size_t n) {
  std::vector<std::string_view> out;
  out.reserve(n);
  while (out.size() + 1 < n) {
    const auto tab = line.find('\t');
    if (tab == std::string_view::npos) return {};
    out.push_back(line.substr(0, tab));
    line.remove_prefix(tab + 1);
  }
  if (line.find('\t') != std::string_view::npos) return {};
  out.push_back(line);
  return out;
}

template <typename T>
bool Number(std::string_view text, T& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

VerdictCache::VerdictCache(std::filesystem::path dir, std::filesystem::path file)
    : dir_(std::move(dir)), file_(std::move(file)) {}

void VerdictCache::Load() {
  entries_.clear();
  if (file_.empty()) return;
  std::ifstream in(file_, std::ios::binary);
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string_view rest(text);
  bool header = true;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    if (nl == std::string_view::npos) break;  // a torn last line is not used
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    if (header) {
      const auto f = Fields(line, 3);
      if (f.empty() || f[0] != kMagic || f[1] != kVersion || Unescape(f[2]) != dir_.string()) return;
      header = false;
      continue;
    }
    const auto f = Fields(line, 8);
    if (f.empty()) continue;
    Entry e;
    const auto level = ParseLevel(std::string(f[4]));
    if (!Number(f[1], e.key.size) || !Number(f[2], e.key.mtime_ns) || !Number(f[3], e.key.inode) || !level ||
        (f[5] != "0" && f[5] != "1")) {
      continue;  // a damaged line is simply not used
    }
    e.level = *level;
    e.verdict = Verdict{f[5] == "1", Unescape(f[7]), Unescape(f[6])};
    entries_.insert_or_assign(Unescape(f[0]), std::move(e));
  }
}

Status VerdictCache::Save() const {
  if (file_.empty()) return Ok{};
  std::string out;
  out.reserve(64 + entries_.size() * 96);
  out.append(kMagic).append("\t").append(kVersion).append("\t");
  AppendEscaped(out, dir_.string());
  out += '\n';
  for (const auto& [name, e] : entries_) {
    AppendEscaped(out, name);
    out.append("\t").append(std::to_string(e.key.size)).append("\t").append(std::to_string(e.key.mtime_ns));
    out.append("\t").append(std::to_string(e.key.inode)).append("\t").append(LevelName(e.level));
    out.append(e.verdict.good ? "\t1\t" : "\t0\t");
    AppendEscaped(out, e.verdict.format);
    out += '\t';
    AppendEscaped(out, e.verdict.reason);
    out += '\n';
  }
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  if (ec) return Error{"cannot create " + file_.parent_path().string() + ": " + ec.message()};
  // Atomic, not fsynced: a cache lost to a power cut costs one re-validation, and this
  // write sits on the path from a trainer's exit to the next start.
  return WriteFileAtomically(file_, out, Durability::kAtomicOnly);
}

std::optional<Verdict> VerdictCache::Find(const std::string& name, const CacheKey& key, ValidateLevel level) const {
  const auto it = entries_.find(name);
  if (it == entries_.end() || !(it->second.key == key)) return std::nullopt;
  const Entry& e = it->second;
  const bool answers = e.verdict.good ? Rank(e.level) >= Rank(level) : Rank(e.level) <= Rank(level);
  if (!answers) return std::nullopt;
  return e.verdict;
}

void VerdictCache::Put(const std::string& name, const CacheKey& key, ValidateLevel level, const Verdict& verdict) {
  entries_[name] = Entry{key, level, verdict};
}

}  // namespace spotvisor::checkpoint
