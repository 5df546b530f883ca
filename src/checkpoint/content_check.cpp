// The content check; see content_check.hpp. torch.save names a tensor's dtype through its
// storage's legacy class (torch.FloatStorage, ...; torch/storage.py _pickle_storage_type)
// or, in _rebuild_tensor_v3, a dtype argument; the storage's bytes are the archive entry
// <folder>/data/<key> (torch/serialization.py _save). A tensor's name is the path of keys
// and indices from the pickled object down to it, as a user writes it: model.fc.weight.
#include "spotvisor/checkpoint/content_check.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "spotvisor/checkpoint/pickle.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"
#include "spotvisor/checkpoint/torch_pickles.hpp"

namespace spotvisor::checkpoint {
namespace {

using Kind = PickleTree::Kind;
using Ref = PickleTree::Ref;
constexpr int kMaxDepth = 256;
constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

std::optional<FloatType> FromName(std::string_view name) {
  static const std::map<std::string_view, FloatType> kTypes = {{"torch.FloatStorage", FloatType::kF32},
                                                               {"torch.DoubleStorage", FloatType::kF64},
                                                               {"torch.HalfStorage", FloatType::kF16},
                                                               {"torch.BFloat16Storage", FloatType::kBF16},
                                                               {"torch.float32", FloatType::kF32},
                                                               {"torch.float", FloatType::kF32},
                                                               {"torch.float64", FloatType::kF64},
                                                               {"torch.double", FloatType::kF64},
                                                               {"torch.float16", FloatType::kF16},
                                                               {"torch.half", FloatType::kF16},
                                                               {"torch.bfloat16", FloatType::kBF16},
                                                               {"F32", FloatType::kF32},
                                                               {"F64", FloatType::kF64},
                                                               {"F16", FloatType::kF16},
                                                               {"BF16", FloatType::kBF16}};
  const auto it = kTypes.find(name);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

struct Found {
  std::string key;
  std::string storage;
  FloatType type;
  std::uint64_t offset;  // storage offset, in elements
};

// Walks a data.pkl tree from the root, naming what it passes; each node is entered once
// (pickle memo references make it a graph), so the first path to a tensor names it.
class TensorWalk {
 public:
  explicit TensorWalk(const PickleTree& tree) : tree_(tree), seen_(tree.size(), false) {}

  void Walk(Ref r, const std::string& path, int depth) {
    if (r >= tree_.size() || depth > kMaxDepth) return;
    const auto& n = tree_.at(r);
    const bool container = n.kind == Kind::kDict || n.kind == Kind::kList || n.kind == Kind::kTuple ||
                           n.kind == Kind::kSet || n.kind == Kind::kCall;
    if (!container || seen_[r]) return;
    seen_[r] = true;
    if (n.kind == Kind::kCall) return WalkCall(r, path, depth);
    if (n.kind == Kind::kDict) return WalkPairs(n.entries, path, depth);
    for (std::size_t i = 0; i < n.items.size(); ++i) Walk(n.items[i], Join(path, std::to_string(i)), depth + 1);
  }

  std::vector<Found> found;

 private:
  static std::string Join(const std::string& path, const std::string& segment) {
    return path.empty() ? segment : path + "." + segment;
  }

  std::string Segment(Ref key) const {
    if (const std::string* text = tree_.Text(key)) return *text;
    if (auto number = tree_.Int(key)) return std::to_string(*number);
    return "?";
  }

  void WalkPairs(const std::vector<Ref>& entries, const std::string& path, int depth) {
    for (std::size_t i = 0; i + 1 < entries.size(); i += 2) {
      Walk(entries[i + 1], Join(path, Segment(entries[i])), depth + 1);
    }
  }

  void WalkCall(Ref r, const std::string& path, int depth) {
    const auto name = tree_.CallName(r);
    if (name.ends_with("._rebuild_tensor_v2") || name.ends_with("._rebuild_tensor_v3") ||
        name.ends_with("._rebuild_tensor")) {
      return Tensor(r, name.ends_with("_v3"), path);
    }
    // Anything else (OrderedDict, Parameter, a tensor subclass, an object): its arguments
    // keep the path, its items and attributes add their names.
    const auto& n = tree_.at(r);
    if (n.args != PickleTree::kNoRef) {
      for (Ref a : tree_.at(n.args).items) Walk(a, path, depth + 1);
    }
    WalkPairs(n.entries, path, depth);
    if (n.state != PickleTree::kNoRef) Walk(n.state, path, depth + 1);
  }

  void Tensor(Ref call, bool v3, const std::string& path) {
    const auto& n = tree_.at(call);
    if (n.args == PickleTree::kNoRef) return;
    const auto& args = tree_.at(n.args).items;
    if (args.empty() || tree_.at(args[0]).kind != Kind::kPersistent || tree_.at(args[0]).items.empty()) return;
    const auto& id = tree_.at(tree_.at(args[0]).items[0]);
    if (id.kind != Kind::kTuple || id.items.size() < 3) return;
    const std::string* storage = tree_.Text(id.items[2]);
    if (storage == nullptr || !stored_.insert(*storage).second) return;
    std::optional<FloatType> type;
    if (v3 && args.size() > 6 && tree_.at(args[6]).kind == Kind::kGlobal) type = FromName(tree_.at(args[6]).text);
    if (!type && tree_.at(id.items[1]).kind == Kind::kGlobal) type = FromName(tree_.at(id.items[1]).text);
    if (!type) return;  // not a floating-point tensor
    const auto offset = args.size() > 1 ? tree_.Int(args[1]).value_or(0) : 0;
    found.push_back({path, *storage, *type, static_cast<std::uint64_t>(std::max<std::int64_t>(offset, 0))});
  }

  const PickleTree& tree_;
  std::vector<bool> seen_;
  std::set<std::string> stored_;  // storage keys already named
};

}  // namespace

Result<std::vector<TensorBytes>> TorchArchiveTensors(const ByteSource& source, const ZipArchive& archive,
                                                     const std::string& root_key) {
  if (archive.entries.empty()) return Error{source.name() + ": torch.save archive has no entries"};
  auto tree = ReadTorchObject(source, archive);
  if (!tree) return tree.error();
  TensorWalk walk(*tree);
  walk.Walk(tree->root(), "", 0);
  const std::string& first = archive.entries.front().name;
  const std::string folder = first.substr(0, first.find('/') + 1);
  std::map<std::string, const ZipEntry*> by_name;
  for (const auto& e : archive.entries) by_name[e.name] = &e;
  std::vector<TensorBytes> out;
  for (auto& f : walk.found) {
    const std::string entry = folder + "data/" + f.storage;
    const auto it = by_name.find(entry);
    const std::string key = root_key.empty() ? f.key : f.key.empty() ? root_key : root_key + "." + f.key;
    if (it == by_name.end()) {
      return Error{source.name() + ": data.pkl names storage '" + f.storage + "' of tensor '" + key +
                   "', but the archive has no entry '" + entry + "'"};
    }
    out.push_back({key, "storage '" + entry + "'", f.type, {it->second->data_offset, it->second->size}, f.offset});
  }
  return out;
}

Result<std::vector<TensorBytes>> SafetensorsTensors(const ByteSource& source) {
  std::array<std::byte, 8> size_bytes{};
  if (auto st = source.ReadAt(0, size_bytes); !st) return st.error();
  std::uint64_t n = 0;
  for (std::size_t b = 0; b < 8; ++b) n |= static_cast<std::uint64_t>(size_bytes[b]) << (8 * b);
  if (n > kMaxSafetensorsHeader || n > source.size() - 8) return Error{source.name() + ": safetensors header too long"};
  std::string header(static_cast<std::size_t>(n), '\0');
  if (auto st = source.ReadAt(8, {reinterpret_cast<std::byte*>(header.data()), header.size()}); !st) return st.error();
  const auto doc = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Error{source.name() + ": safetensors header is not a JSON object"};
  std::vector<TensorBytes> out;
  for (const auto& [name, t] : doc.items()) {
    if (name == "__metadata__" || !t.is_object() || !t.contains("dtype") || !t["dtype"].is_string()) continue;
    const auto type = FromName(t["dtype"].get<std::string>());
    const auto& off = t.contains("data_offsets") ? t["data_offsets"] : nlohmann::json();
    if (!type || !off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      continue;  // CheckSafetensors has refused a malformed entry already
    }
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    out.push_back({name, "", *type, {8 + n + begin, end - begin}, 0});
  }
  return out;
}

FiniteScan::FiniteScan(std::vector<TensorBytes> tensors)
    : tensors_(std::move(tensors)),
      first_bad_(std::make_unique<std::atomic<std::uint64_t>[]>(tensors_.size())),
      visitor_([this](std::uint64_t offset, std::span<const std::byte> block) { Visit(offset, block); }) {
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorBytes& a, const TensorBytes& b) { return a.bytes.offset < b.bytes.offset; });
  for (std::size_t i = 0; i < tensors_.size(); ++i) first_bad_[i].store(kNone, std::memory_order_relaxed);
}

std::vector<ByteRange> FiniteScan::Ranges() const {
  std::vector<ByteRange> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) {
    if (t.bytes.length > 0) out.push_back(t.bytes);
  }
  return out;
}

void FiniteScan::Visit(std::uint64_t offset, std::span<const std::byte> block) const {
  const std::uint64_t end = offset + block.size();
  auto it = std::upper_bound(tensors_.begin(), tensors_.end(), offset,
                             [](std::uint64_t at, const TensorBytes& t) { return at < t.bytes.offset; });
  std::size_t i = static_cast<std::size_t>(it - tensors_.begin());
  if (i > 0) --i;
  for (; i < tensors_.size() && tensors_[i].bytes.offset < end; ++i) {
    const auto& t = tensors_[i];
    std::uint64_t lo = std::max(offset, t.bytes.offset);
    const std::uint64_t hi = std::min(end, t.bytes.offset + t.bytes.length);
    const std::uint64_t size = ElementSize(t.type);
    lo += (size - (lo - t.bytes.offset) % size) % size;  // a block may start inside an element
    if (lo >= hi) continue;
    const auto bad = FirstNonFinite(t.type, block.subspan(lo - offset, hi - lo));
    if (!bad) continue;
    const std::uint64_t element = (lo - t.bytes.offset) / size + *bad;
    auto& slot = first_bad_[i];
    std::uint64_t seen = slot.load(std::memory_order_relaxed);
    while (element < seen && !slot.compare_exchange_weak(seen, element, std::memory_order_relaxed)) {
    }
  }
}

Status FiniteScan::Verdict(const ByteSource& source) const {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const std::uint64_t element = first_bad_[i].load(std::memory_order_relaxed);
    if (element == kNone) continue;
    const auto& t = tensors_[i];
    const std::uint64_t size = ElementSize(t.type);
    const std::uint64_t at = t.bytes.offset + element * size;
    std::array<std::byte, 8> value{};
    std::string_view what = "NaN or Inf";
    if (source.ReadAt(at, {value.data(), size})) what = ClassifyElement(t.type, {value.data(), size});
    const std::string index = element >= t.first_element
                                  ? "element " + std::to_string(element - t.first_element)
                                  : "storage element " + std::to_string(element) + " (before the tensor's view)";
    return Error{source.name() + ": tensor '" + (t.key.empty() ? "(the saved tensor)" : t.key) + "' (" +
                 std::string(FloatTypeName(t.type)) + (t.where.empty() ? "" : ", " + t.where) + ") holds " +
                 std::string(what) + " at " + index + " (offset " + std::to_string(at) +
                 "): checkpoints.content: finite refuses a checkpoint with non-finite weights"};
  }
  return Ok{};
}

Status ReadAndJudge(const ByteSource& source, const FiniteScan& scan, HashPool* pool) {
  const auto ranges = scan.Ranges();
  if (auto crcs = Crc32OfRanges(source, ranges, pool, scan.visitor()); !crcs) return crcs.error();
  return scan.Verdict(source);
}

}  // namespace spotvisor::checkpoint
