// torch.save pickles; see torch_pickles.hpp.
#include "spotvisor/checkpoint/torch_pickles.hpp"

#include <array>
#include <map>
#include <string_view>

namespace spotvisor::checkpoint {
namespace {

using Kind = PickleTree::Kind;

// Bytes per element of torch.<Name>Storage (torch/storage.py _dtype_to_storage_type_map).
std::optional<std::uint64_t> ElementSize(std::string_view type) {
  static const std::map<std::string_view, std::uint64_t> kSizes = {{"torch.DoubleStorage", 8},
                                                                   {"torch.FloatStorage", 4},
                                                                   {"torch.HalfStorage", 2},
                                                                   {"torch.LongStorage", 8},
                                                                   {"torch.IntStorage", 4},
                                                                   {"torch.ShortStorage", 2},
                                                                   {"torch.CharStorage", 1},
                                                                   {"torch.ByteStorage", 1},
                                                                   {"torch.BoolStorage", 1},
                                                                   {"torch.BFloat16Storage", 2},
                                                                   {"torch.ComplexDoubleStorage", 16},
                                                                   {"torch.ComplexFloatStorage", 8},
                                                                   {"torch.QUInt8Storage", 1},
                                                                   {"torch.QInt8Storage", 1},
                                                                   {"torch.QInt32Storage", 4},
                                                                   {"torch.QUInt4x2Storage", 1},
                                                                   {"torch.QUInt2x4Storage", 1},
                                                                   {"torch.UntypedStorage", 1}};
  auto it = kSizes.find(type);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

struct Storage {
  std::uint64_t element_size = 0;
  std::uint64_t numel = 0;
};

// Every ('storage', type, key, location, numel, ...) persistent id of the main pickle.
Result<std::map<std::string, Storage>> StoragesOf(const ByteSource& s, const PickleTree& t) {
  std::map<std::string, Storage> out;
  for (PickleTree::Ref r = 0; r < t.size(); ++r) {
    const auto& n = t.at(r);
    if (n.kind != Kind::kPersistent) continue;
    const auto& id = t.at(n.items.front());
    const std::string* tag = id.kind == Kind::kTuple && id.items.size() >= 5 ? t.Text(id.items[0]) : nullptr;
    if (tag == nullptr || *tag != "storage") {
      return Error{s.name() +
                   ": legacy torch pickle: a persistent id that is not a ('storage', type, key, location, size) tuple"};
    }
    const auto& type = t.at(id.items[1]);
    const std::string* key = t.Text(id.items[2]);
    const auto numel = t.Int(id.items[4]);
    const auto size = type.kind == Kind::kGlobal ? ElementSize(type.text) : std::nullopt;
    if (key == nullptr || !numel || *numel < 0 || !size) {
      return Error{s.name() + ": legacy torch pickle: storage id with " +
                   (size ? "no key or element count" : "an unknown storage type '" + type.text + "'")};
    }
    out[*key] = {*size, static_cast<std::uint64_t>(*numel)};
  }
  return out;
}

}  // namespace

Status CheckTorchLegacy(const ByteSource& s, bool read_every_byte, HashPool* pool) {
  std::uint64_t at = 0;
  const char* names[] = {"magic number", "protocol version", "system info", "object", "storage keys"};
  std::map<std::string, Storage> storages;
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    auto tree = ReadPickle(s, at, s.size(), &at);
    if (!tree) return Error{tree.error().message + " — the legacy torch.save " + names[i] + " pickle"};
    if (i == 1 && tree->Int(tree->root()) != 1001) {
      return Error{s.name() + ": legacy torch pickle: protocol version is not 1001"};
    }
    if (i == 3) {
      auto found = StoragesOf(s, *tree);
      if (!found) return found.error();
      storages = std::move(*found);
    }
    if (i == 4) {
      const auto& list = tree->at(tree->root());
      if (list.kind != Kind::kList) return Error{s.name() + ": legacy torch pickle: the storage keys are not a list"};
      for (auto r : list.items) {
        const std::string* key = tree->Text(r);
        if (key == nullptr || !storages.count(*key)) {
          return Error{s.name() + ": legacy torch pickle: storage key list names a storage the object does not use"};
        }
        keys.push_back(*key);
      }
    }
  }
  std::vector<ByteRange> data;
  for (const auto& key : keys) {
    const Storage& st = storages.at(key);
    std::array<std::byte, 8> header{};
    if (s.size() - at < header.size()) {
      return Error{s.name() + ": storage '" + key + "' has no header at offset " + std::to_string(at) +
                   ": the file ends at " + std::to_string(s.size()) + " (truncated)"};
    }
    if (auto r = s.ReadAt(at, header); !r) return r;
    std::uint64_t numel = 0;
    for (std::size_t b = 0; b < 8; ++b) numel |= static_cast<std::uint64_t>(header[b]) << (8 * b);
    if (numel != st.numel) {
      return Error{s.name() + ": storage '" + key + "' at offset " + std::to_string(at) + " records " +
                   std::to_string(numel) + " elements, the object says " + std::to_string(st.numel)};
    }
    at += header.size();
    const std::uint64_t bytes = st.numel * st.element_size;
    if (st.numel != 0 && bytes / st.numel != st.element_size)
      return Error{s.name() + ": storage '" + key + "' is impossibly large"};
    if (s.size() - at < bytes) {
      return Error{s.name() + ": storage '" + key + "' (" + std::to_string(bytes) + " bytes from offset " +
                   std::to_string(at) + ") runs past the end of the file at " + std::to_string(s.size()) +
                   " (truncated)"};
    }
    data.push_back({at, bytes});
    at += bytes;
  }
  if (at != s.size()) {
    return Error{s.name() + ": " + std::to_string(s.size() - at) + " bytes after the last storage (offset " +
                 std::to_string(at) + "): not what torch.save wrote"};
  }
  if (read_every_byte && !data.empty()) {
    auto crcs = Crc32OfRanges(s, data, pool);
    if (!crcs) return crcs.error();
  }
  return Ok{};
}

Result<PickleTree> ReadTorchObject(const ByteSource& s, const ZipArchive& a) {
  for (const auto& e : a.entries) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl") {
      return ReadPickle(s, e.data_offset, e.data_offset + e.size);
    }
  }
  return Error{s.name() + ": torch.save archive has no data.pkl"};
}

Result<PickleTree> ReadTorchFile(const std::filesystem::path& path) {
  auto src = FileSource::Open(path);
  if (!src) return src.error();
  std::array<std::byte, 4> head{};
  if (src->size() < head.size()) return Error{path.string() + ": too short for a torch.save file"};
  if (auto st = src->ReadAt(0, head); !st) return st.error();
  if (head[0] != std::byte{'P'} || head[1] != std::byte{'K'}) {  // legacy: the object is the 4th pickle
    std::uint64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      auto skipped = ReadPickle(*src, at, src->size(), &at);
      if (!skipped) return skipped.error();
    }
    return ReadPickle(*src, at, src->size());
  }
  auto archive = ReadZipIndex(*src, src->size(), /*allow_comment=*/true);
  if (!archive) return archive.error();
  if (auto st = CheckZipLayout(*src, *archive); !st) return st.error();
  return ReadTorchObject(*src, *archive);
}

}  // namespace spotvisor::checkpoint
