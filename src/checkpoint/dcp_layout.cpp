// PyTorch DCP directories; see framework_layout.hpp. torch/distributed/_shard/checkpoint
// (filesystem.py FileSystemWriter, torch 1.13; torch.distributed.checkpoint later): every
// rank writes __<rank>_<n>.distcp — its BYTE_IO items raw, then one torch.save archive per
// tensor — and the coordinator pickles Metadata to .metadata.tmp and renames it to
// .metadata last. Metadata.storage_data maps each item (MetadataIndex: fqn, offset) to
// _StorageInfo(relative_path, offset, length); state_dict_metadata says which fqns are
// tensors (TensorStorageMetadata) and which bytes (BytesStorageMetadata).
// With FileSystemWriter(serialization_format=SerializationFormat.SAFETENSORS) (torch 2.x) a
// rank's tensors are one safetensors blob after its BYTE_IO items instead: each tensor item
// records the blob's start as its offset and its own size as its length, and the blob's
// header says where each tensor is.
#include <array>
#include <cstring>
#include <map>

#include "framework_layout.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/file_check.hpp"
#include "spotvisor/checkpoint/pickle.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"
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

// A failure inside an item's archive names the item too (the archive's own entry names are
// the same in every item: 'archive/data/0').
Status InItem(Status st, const Item& item, const std::string& where) {
  if (st || st.error().message.find("'" + item.fqn + "'") != std::string::npos) return st;
  return Error{st.error().message + " — in " + where};
}

// The tensor names of each safetensors blob of a shard already checked, by its offset.
using Blobs = std::map<std::uint64_t, std::set<std::string>>;

bool IsSafetensorsBlob(const ByteSource& shard, std::uint64_t offset) {
  std::array<std::byte, 9> head{};
  return shard.size() - offset > head.size() && shard.ReadAt(offset, head) &&
         std::memcmp(head.data(), "PK\x03\x04", 4) != 0 && head[8] == std::byte{'{'};
}

// A tensor item in a SerializationFormat.SAFETENSORS shard: the blob at its offset (to the
// end of the shard) is a valid safetensors file that holds the item's tensor.
Status CheckSafetensorsItem(const ByteSource& shard, const Item& item, const std::string& where,
                            const ValidatorOptions& o, Blobs& blobs) {
  auto blob = blobs.find(item.offset);
  if (blob == blobs.end()) {
    const std::string in_blob = " — in the safetensors blob at offset " + std::to_string(item.offset) + " that " +
                                where + " points to (offsets in the blob)";
    std::array<std::byte, 8> len{};
    if (auto st = shard.ReadAt(item.offset, len); !st) return st;
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(len[static_cast<std::size_t>(i)]);
    const std::uint64_t blob_size = shard.size() - item.offset;
    if (n > kMaxSafetensorsHeader || n > blob_size - 8) {
      return Error{shard.name() + ": safetensors header: declared length " + std::to_string(n) +
                   " runs past the end of the shard (truncated?) (offset " + std::to_string(shard.size()) + ")" +
                   in_blob};
    }
    std::string header(static_cast<std::size_t>(n), '\0');
    if (auto st = shard.ReadAt(item.offset + 8, {reinterpret_cast<std::byte*>(header.data()), header.size()}); !st)
      return st;
    auto summary = CheckSafetensorsHeader(header, blob_size, shard.name());
    if (!summary) return Error{summary.error().message + in_blob};
    if (o.level == config::ValidateLevel::kFull) {  // no checksum: every byte read
      auto crc = Crc32OfRanges(shard, std::array<ByteRange, 1>{ByteRange{item.offset, blob_size}}, o.pool);
      if (!crc) return crc.error();
    }
    blob = blobs.emplace(item.offset, std::set<std::string>(summary->names.begin(), summary->names.end())).first;
  }
  if (!blob->second.count(item.fqn)) {
    return Error{shard.name() + ": " + where + " is not a tensor of the safetensors blob there (offset " +
                 std::to_string(item.offset) + ")"};
  }
  return Ok{};
}

// One item inside its shard: in the file; a tensor is one complete torch.save archive (or
// in a safetensors blob).
Status CheckItem(const ByteSource& shard, const Item& item, const ValidatorOptions& o, Blobs& blobs) {
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
  } else if (IsSafetensorsBlob(shard, item.offset)) {
    return CheckSafetensorsItem(shard, item, where, o, blobs);
  }
  auto archive = ReadZipIndex(shard, item.offset + item.length, /*allow_comment=*/false);
  if (!archive) return Error{archive.error().message + " — " + where + " is not a complete torch.save archive"};
  if (archive->start != item.offset) {
    return Error{shard.name() + ": " + where + " holds an archive that starts at offset " +
                 std::to_string(archive->start)};
  }
  if (auto st = CheckZipLayout(shard, *archive); !st) return InItem(st, item, where);
  if (auto st = CheckTorchRecords(shard, *archive); !st) return InItem(st, item, where);
  return InItem(CheckArchiveBytes(shard, *archive, {o.level, true, "", o.pool, o.content}, /*torch=*/true, item.fqn),
                item, where);
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
      Blobs blobs;
      for (const Item* item : in_file) {
        if (auto st = CheckItem(*src, *item, o, blobs); !st) return st;
      }
      verdict.checked.insert(rel);
    }
    verdict.checked.insert(meta);
    if (d.empty()) verdict = {".metadata", "dcp", std::move(verdict.checked)};
  }
  return Ok{};
}

}  // namespace spotvisor::checkpoint
