// Sharded weight sets; see safetensors_index.hpp. transformers/modeling_utils.py
// save_pretrained (via huggingface_hub's split_torch_state_dict_into_shards) names the shards
// `<p>-{K:05d}-of-{N:05d}.<ext>`, writes them, then writes `<p>.<ext>.index.json`
// ({"metadata": {...}, "weight_map": {tensor: shard}}) last.
#include "spotvisor/checkpoint/safetensors_index.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "rel_path.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::uint64_t kMaxIndexBytes = 64ull << 20;

std::string Join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

bool AllDigits(std::string_view s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// One shard of a series: `<prefix>-<k>-of-<n>.<ext>`.
struct ShardName {
  std::string prefix;
  std::string ext;  // "safetensors" | "bin"
  int k = 0;
  int n = 0;
  int width = 0;  // digits of k as written
};

std::optional<ShardName> ParseShardName(const std::string& name) {
  ShardName s;
  std::string_view stem = name;
  for (const char* ext : {"safetensors", "bin"}) {
    const std::string dot_ext = std::string(".") + ext;
    if (name.size() > dot_ext.size() && name.ends_with(dot_ext)) {
      s.ext = ext;
      stem.remove_suffix(dot_ext.size());
    }
  }
  const auto of = stem.rfind("-of-");
  if (s.ext.empty() || of == std::string_view::npos || !AllDigits(stem.substr(of + 4))) return std::nullopt;
  const auto dash = stem.substr(0, of).rfind('-');
  if (dash == std::string_view::npos || dash == 0 || !AllDigits(stem.substr(dash + 1, of - dash - 1))) {
    return std::nullopt;
  }
  s.prefix = std::string(stem.substr(0, dash));
  s.width = static_cast<int>(of - dash - 1);
  s.k = std::stoi(std::string(stem.substr(dash + 1, of - dash - 1)));
  s.n = std::stoi(std::string(stem.substr(of + 4)));
  if (s.k < 1 || s.n < 1 || s.k > s.n) return std::nullopt;
  return s;
}

std::string ShardFile(const ShardName& s, int k) {
  std::string kk = std::to_string(k), nn = std::to_string(s.n);
  kk.insert(0, static_cast<std::size_t>(std::max(0, s.width - static_cast<int>(kk.size()))), '0');
  nn.insert(0, static_cast<std::size_t>(std::max(0, s.width - static_cast<int>(nn.size()))), '0');
  return s.prefix + "-" + kk + "-of-" + nn + "." + s.ext;
}

// Every series is complete and has its index.
Status CheckSeries(const fs::path& dir, const std::set<std::string>& names) {
  std::set<std::string> seen;
  for (const auto& rel : names) {
    const std::string parent = RelParent(rel);
    const auto shard = ParseShardName(parent.empty() ? rel : rel.substr(parent.size() + 1));
    if (!shard || !seen.insert(Join(parent, shard->prefix + "|" + std::to_string(shard->n))).second) continue;
    for (int k = 1; k <= shard->n; ++k) {
      const std::string want = Join(parent, ShardFile(*shard, k));
      if (!names.count(want)) {
        return Error{(dir / want).string() + ": missing shard " + std::to_string(k) + " of " +
                     std::to_string(shard->n) + " (the series " + rel + " belongs to)"};
      }
    }
    const std::string index = Join(parent, shard->prefix + "." + shard->ext + ".index.json");
    if (!names.count(index)) {
      return Error{(dir / index).string() + ": missing: the index of the " + std::to_string(shard->n) + " shards " +
                   Join(parent, ShardFile(*shard, 1)) +
                   "..., which save_pretrained writes after the last shard (the save did not finish)"};
    }
  }
  return Ok{};
}

Result<Json> ReadIndex(const fs::path& file, std::string& text) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) return Error{file.string() + ": cannot stat: " + ec.message()};
  if (size > kMaxIndexBytes) return Error{file.string() + ": index larger than 64 MiB"};
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  if (!in && !in.eof()) return Error{file.string() + ": cannot read the index"};
  if (JsonNestingDepth(text) > 256) {
    return Error{file.string() + ": index JSON nesting too deep or brackets unbalanced (cut short?) (offset " +
                 std::to_string(text.size()) + ", the end)"};
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return Error{file.string() + ": index is not valid JSON: " + e.what() + " (offset " +
                 std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ")"};
  } catch (const Json::exception& e) {
    return Error{file.string() + ": index is not valid JSON: " + e.what() + " (offset 0)"};
  }
}

std::string EntryAt(const std::string& text, const std::string& tensor) {
  const auto at = text.find(Json(tensor).dump());
  return " (offset " + std::to_string(at == std::string::npos ? 0 : at) + ")";
}

Status CheckIndex(const fs::path& dir, const std::string& rel, const std::set<std::string>& names, bool read_shards) {
  const fs::path file = dir / rel;
  std::string text;
  auto index = ReadIndex(file, text);
  if (!index) return index.error();
  if (!index->is_object() || !index->contains("weight_map") || !(*index)["weight_map"].is_object()) {
    return Error{file.string() + ": index has no weight_map object (offset 0)"};
  }
  const bool safetensors = rel.ends_with(".safetensors.index.json");
  std::map<std::string, std::set<std::string>> by_shard;  // shard -> the tensors the index puts there
  for (const auto& [tensor, shard] : (*index)["weight_map"].items()) {
    if (!shard.is_string()) {
      return Error{file.string() + ": weight_map entry '" + tensor + "' names no shard file" + EntryAt(text, tensor)};
    }
    const std::string name = shard.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return Error{file.string() + ": weight_map entry '" + tensor + "' names '" + name +
                   "', which is not a file name" + EntryAt(text, tensor)};
    }
    if (!names.count(Join(RelParent(rel), name))) {
      return Error{(dir / Join(RelParent(rel), name)).string() + ": missing shard, which " + rel +
                   " names for weight_map entry '" + tensor + "'" + EntryAt(text, tensor)};
    }
    by_shard[name].insert(tensor);
  }
  if (!safetensors || !read_shards) return Ok{};
  // The shards of the index's own series that it names nowhere hold tensors it does not list.
  const std::string base = rel.substr(RelParent(rel).empty() ? 0 : RelParent(rel).size() + 1);
  const std::string prefix = base.substr(0, base.size() - std::string(".safetensors.index.json").size());
  for (const auto& other : names) {
    if (RelParent(other) != RelParent(rel)) continue;
    const auto shard = ParseShardName(other.substr(RelParent(rel).empty() ? 0 : RelParent(rel).size() + 1));
    if (shard && shard->ext == "safetensors" && shard->prefix == prefix) by_shard[ShardFile(*shard, shard->k)];
  }
  std::map<std::string, std::set<std::string>> held;  // shard -> the tensors its header has
  for (const auto& [shard, tensors] : by_shard) {
    auto src = FileSource::Open(dir / Join(RelParent(rel), shard));
    if (!src) return src.error();
    auto header = CheckSafetensors(*src);
    if (!header) return header.error();
    held[shard].insert(header->names.begin(), header->names.end());
  }
  // Every entry in its shard first: a renamed tensor is reported under the name the index knows.
  for (const auto& [shard, tensors] : by_shard) {
    for (const auto& tensor : tensors) {
      if (!held[shard].count(tensor)) {
        return Error{file.string() + ": weight_map entry '" + tensor + "' names shard '" + shard +
                     "', whose header has no such tensor" + EntryAt(text, tensor) + " (" +
                     (dir / Join(RelParent(rel), shard)).string() + " holds " + std::to_string(held[shard].size()) +
                     " tensors)"};
      }
    }
  }
  for (const auto& [shard, tensors] : by_shard) {
    for (const auto& tensor : held[shard]) {
      if (!tensors.count(tensor)) {
        return Error{(dir / Join(RelParent(rel), shard)).string() + ": holds tensor '" + tensor +
                     "', which the weight_map of " + rel + " does not put in this shard"};
      }
    }
  }
  return Ok{};
}

}  // namespace

Status CheckShardedWeights(const fs::path& dir, const std::set<std::string>& names, bool read_shards) {
  for (const auto& rel : names) {
    if (!rel.ends_with(".safetensors.index.json") && !rel.ends_with(".bin.index.json")) continue;
    if (auto st = CheckIndex(dir, rel, names, read_shards); !st) return st;
  }
  return CheckSeries(dir, names);
}

}  // namespace spotvisor::checkpoint
