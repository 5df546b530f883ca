// The verdict cache file; see verdict_cache.hpp. Layout: {"version": 1, "dir": DIR,
// "entries": {NAME: [size, mtime_ns, inode, level, good, format, reason]}} — arrays keep
// a 10,000-entry cache quick to parse.
#include "spotvisor/checkpoint/verdict_cache.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::checkpoint {
namespace {
using Json = nlohmann::json;
using config::ValidateLevel;

int Rank(ValidateLevel l) { return static_cast<int>(l); }
}  // namespace

VerdictCache::VerdictCache(std::filesystem::path dir, std::filesystem::path file)
    : dir_(std::move(dir)), file_(std::move(file)) {}

void VerdictCache::Load() {
  entries_.clear();
  if (file_.empty()) return;
  std::ifstream in(file_, std::ios::binary);
  if (!in) return;
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    const Json doc = Json::parse(ss.str());
    if (doc.value("version", 0) != 1 || doc.value("dir", std::string()) != dir_.string()) return;
    for (const auto& [name, e] : doc.at("entries").items()) {
      if (!e.is_array() || e.size() != 7) continue;
      const auto level = ParseLevel(e[3].get<std::string>());
      if (!level) continue;
      entries_[name] = Entry{{e[0].get<std::uint64_t>(), e[1].get<std::int64_t>(), e[2].get<std::uint64_t>()},
                             *level,
                             Verdict{e[4].get<bool>(), e[6].get<std::string>(), e[5].get<std::string>()}};
    }
  } catch (const Json::exception&) {
    entries_.clear();  // a damaged cache is simply not used
  }
}

Status VerdictCache::Save() const {
  if (file_.empty()) return Ok{};
  Json entries = Json::object();
  for (const auto& [name, e] : entries_) {
    entries[name] = Json::array({e.key.size, e.key.mtime_ns, e.key.inode, std::string(LevelName(e.level)),
                                 e.verdict.good, e.verdict.format, e.verdict.reason});
  }
  const Json doc = {{"version", 1}, {"dir", dir_.string()}, {"entries", entries}};
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  if (ec) return Error{"cannot create " + file_.parent_path().string() + ": " + ec.message()};
  return WriteFileAtomically(file_, doc.dump() + "\n");
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
