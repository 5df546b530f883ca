// PyTorch DCP directories; see framework_layout.hpp. torch/distributed/_shard/checkpoint
// (filesystem.py FileSystemWriter, torch 1.13; torch.distributed.checkpoint later): every
// rank writes __<rank>_<n>.distcp — its BYTE_IO items raw, then one torch.save archive per
// tensor — and the coordinator pickles Metadata to .metadata.tmp and renames it to
// .metadata last. Metadata.storage_data maps each item (MetadataIndex: fqn, offset) to
// _StorageInfo(relative_path, offset, length); state_dict_metadata says which fqns are
// tensors (TensorStorageMetadata) and which bytes (BytesStorageMetadata).
#include <array>
#include <cstring>
#include <map>

#include "framework_layout.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/pickle.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using Ref = PickleTree::Ref;

constexpr std::uint64_t kMaxMetadataBytes = 256ull << 20;

struct Item {
  std::string fqn;
  std::string file;  // relative to the .metadata's directory
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool tensor = false;
};

Result<std::vector<Item>> ReadItems(const fs::path& meta_path) {
  auto src = FileSource::Open(meta_path);
  if (!src) return src.error();
  if (src->size() > kMaxMetadataBytes) return Error{meta_path.string() + ": DCP .metadata larger than 256 MiB"};
  auto tree = ReadPickle(*src, 0, src->size());
  if (!tree) return Error{tree.error().message + " — DCP .metadata cut short or not what torch wrote"};
  const Ref root = tree->root();
  auto fail = [&](const std::string& what) { return Error{meta_path.string() + ": DCP .metadata " + what}; };
  if (!tree->CallName(root).ends_with(".Metadata")) return fail("is not a pickled Metadata object");
  const auto storage = tree->Get(root, "storage_data");
  const auto tensors = tree->Get(root, "state_dict_metadata");
  if (!storage || tree->at(*storage).kind != PickleTree::Kind::kDict) return fail("has no storage_data dict");
  if (!tensors || tree->at(*tensors).kind != PickleTree::Kind::kDict) return fail("has no state_dict_metadata dict");
  std::map<std::string, bool> is_tensor;
  const auto& kinds = tree->at(*tensors).entries;
  for (std::size_t i = 0; i + 1 < kinds.size(); i += 2) {
    const std::string* fqn = tree->Text(kinds[i]);
    if (fqn == nullptr) return fail("has a state_dict_metadata key that is not a string");
    is_tensor[*fqn] = tree->CallName(kinds[i + 1]).ends_with("TensorStorageMetadata");
  }
  std::vector<Item> items;
  std::map<std::string, bool> stored;
  const auto& entries = tree->at(*storage).entries;
  for (std::size_t i = 0; i + 1 < entries.size(); i += 2) {
    const auto fqn_ref = tree->Get(entries[i], "fqn");
    const std::string* fqn = fqn_ref ? tree->Text(*fqn_ref) : nullptr;
    const auto file_ref = tree->Get(entries[i + 1], "relative_path");
    const std::string* file = file_ref ? tree->Text(*file_ref) : nullptr;
    const auto off_ref = tree->Get(entries[i + 1], "offset");
    const auto len_ref = tree->Get(entries[i + 1], "length");
    const std::int64_t off = off_ref ? tree->Int(*off_ref).value_or(-1) : -1;
    const std::int64_t len = len_ref ? tree->Int(*len_ref).value_or(-1) : -1;
    if (fqn == nullptr || file == nullptr || off < 0 || len < 0) {
      return fail("has a storage_data entry without fqn, relative_path, offset and length");
    }
    if (file->empty() || file->find('/') != std::string::npos || *file == "." || *file == "..") {
      return fail("names the shard '" + *file + "', which is not a file name");
    }
    auto kind = is_tensor.find(*fqn);
    if (kind == is_tensor.end()) return fail("stores '" + *fqn + "', which its state_dict_metadata does not list");
    items.push_back({*fqn, *file, static_cast<std::uint64_t>(off), static_cast<std::uint64_t>(len), kind->second});
    stored[*fqn] = true;
  }
  for (const auto& [fqn, tensor] : is_tensor) {
    if (!stored.count(fqn)) return fail("lists '" + fqn + "' but stores it nowhere");
  }
  return items;
}

// One item inside its shard: in the file; a tensor is one complete torch.save archive.
Status CheckItem(const ByteSource& shard, const Item& item, const ValidatorOptions& o) {
  const std::string where = "item '" + item.fqn + "' (offset " + std::to_string(item.offset) + ", " +
                            std::to_string(item.length) + " bytes, as .metadata records it)";
  if (item.offset > shard.size() || shard.size() - item.offset < item.length) {
    return Error{shard.name() + ": " + where + " runs past the end of the shard at " + std::to_string(shard.size()) +
                 " (truncated)"};
  }
  const bool full = o.level == config::ValidateLevel::kFull;
  if (!item.tensor) {  // torch's planner torch.saves the object into the BytesIO: check it as such
    std::array<std::byte, 4> head{};
    const bool zip =
        item.length >= 22 && shard.ReadAt(item.offset, head) && std::memcmp(head.data(), "PK\x03\x04", 4) == 0;
    if (!zip) {
      if (!full || item.length == 0) return Ok{};
      auto crc = Crc32OfRanges(shard, std::array<ByteRange, 1>{ByteRange{item.offset, item.length}}, o.pool);
      return crc ? Status(Ok{}) : Status(crc.error());
    }
  }
  auto archive = ReadZipIndex(shard, item.offset + item.length, /*allow_comment=*/false);
  if (!archive) return Error{archive.error().message + " — " + where + " is not a complete torch.save archive"};
  if (archive->start != item.offset) {
    return Error{shard.name() + ": " + where + " holds an archive that starts at offset " +
                 std::to_string(archive->start)};
  }
  if (auto st = CheckZipLayout(shard, *archive); !st) return st;
  if (auto st = CheckTorchRecords(shard, *archive); !st) return st;
  if (full) return VerifyZipCrcs(shard, *archive, o.pool);
  return Ok{};
}

}  // namespace

Status CheckDcpLayout(const fs::path& dir, const std::vector<CheckpointFile>& files, const ValidatorOptions& o,
                      LayoutVerdict& verdict) {
  std::set<std::string> names;
  std::set<std::string> shard_dirs;
  for (const auto& f : files) {
    names.insert(f.rel);
    if (f.rel.size() > 7 && f.rel.ends_with(".distcp")) {
      const auto slash = f.rel.rfind('/');
      shard_dirs.insert(slash == std::string::npos ? "" : f.rel.substr(0, slash));
    }
    if (f.rel == ".metadata") shard_dirs.insert("");  // shards gone, or none: still DCP
  }
  if (o.format == "dcp") shard_dirs.insert("");
  for (const auto& d : shard_dirs) {
    const std::string prefix = d.empty() ? "" : d + "/";
    const std::string meta = prefix + ".metadata";
    if (!names.count(meta)) {
      return Error{dir.string() + ": missing DCP commit marker '" + meta + "'" +
                   (names.count(meta + ".tmp") ? " (only .metadata.tmp: the save did not finish)" : "")};
    }
    auto items = ReadItems(dir / meta);
    if (!items) return items.error();
    std::map<std::string, std::vector<const Item*>> by_file;
    for (const auto& item : *items) by_file[item.file].push_back(&item);
    for (const auto& [file, in_file] : by_file) {
      const std::string rel = prefix + file;
      if (!names.count(rel)) {
        return Error{(dir / rel).string() + ": missing DCP shard, which .metadata records " +
                     std::to_string(in_file.size()) + " item(s) in (first: '" + in_file.front()->fqn + "')"};
      }
      auto src = FileSource::Open(dir / rel);
      if (!src) return src.error();
      for (const Item* item : in_file) {
        if (auto st = CheckItem(*src, *item, o); !st) return st;
      }
      verdict.checked.insert(rel);
    }
    verdict.checked.insert(meta);
    if (d.empty()) verdict = {".metadata", "dcp", std::move(verdict.checked)};
  }
  return Ok{};
}

}  // namespace spotvisor::checkpoint
