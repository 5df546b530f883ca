// Manifest parsing, hashing, verification and sealing; see manifest.hpp. JSON exceptions
// stay in this file. Directory walks never follow symlinks.
#include "spotvisor/checkpoint/manifest.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "spotvisor/checkpoint/crc32.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"
#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::size_t kBuffer = 1u << 20;

Error Fail(const std::string& origin, const std::string& what) { return Error{origin + ": " + what}; }

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string ToHex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

// Every regular file under `root`, relative and '/'-separated; symlinks and other special
// files are reported as errors (`what` names them), directories are descended.
Result<std::vector<std::string>> ListFiles(const fs::path& root) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return Error{"cannot list " + root.string() + ": " + ec.message()};
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return Error{"cannot list " + root.string() + ": " + ec.message()};
    const auto status = it->symlink_status(ec);
    if (ec) return Error{"cannot stat " + it->path().string() + ": " + ec.message()};
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (fs::is_directory(status)) continue;
    if (fs::is_symlink(status))
      return Error{it->path().string() + " is a symlink; a manifest lists regular files only"};
    if (!fs::is_regular_file(status)) return Error{it->path().string() + " is not a regular file"};
    out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool IsSafeRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string_view::npos ||
      path.find('\\') != std::string_view::npos) {
    return false;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t slash = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

Result<Manifest> ParseManifest(std::string_view json, const std::string& origin) {
  if (json.size() > kMaxManifestBytes) return Fail(origin, "manifest is larger than 64 MiB");
  if (JsonNestingDepth(json) > 4) return Fail(origin, "manifest nesting is too deep or brackets do not balance");
  Json doc;
  try {
    doc = Json::parse(json.begin(), json.end());
  } catch (const Json::exception& e) {
    return Fail(origin, std::string("manifest is not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) return Fail(origin, "manifest is not a JSON object");
  if (doc.value("format", Json()) != "spotvisor-manifest")
    return Fail(origin, "manifest 'format' is not \"spotvisor-manifest\"");
  if (doc.value("version", Json()) != 1) return Fail(origin, "manifest 'version' is not 1");
  Manifest m;
  if (doc.contains("epoch")) {
    if (!doc["epoch"].is_number_unsigned()) return Fail(origin, "manifest 'epoch' is not a non-negative integer");
    m.epoch = doc["epoch"].get<std::uint64_t>();
  }
  const Json algorithm = doc.value("algorithm", Json());
  if (algorithm != "xxh3-128" && algorithm != "crc32") {
    return Fail(origin, "manifest 'algorithm' must be \"xxh3-128\" or \"crc32\"");
  }
  m.algorithm = algorithm.get<std::string>();
  const std::size_t hex_len = m.algorithm == "crc32" ? 8 : 32;
  const Json files = doc.value("files", Json());
  if (!files.is_array()) return Fail(origin, "manifest 'files' is not a list");
  if (files.size() > kMaxManifestFiles) return Fail(origin, "manifest lists too many files");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const Json& f = files[i];
    const std::string who = "manifest entry " + std::to_string(i);
    if (!f.is_object()) return Fail(origin, who + " is not an object");
    const Json path = f.value("path", Json()), size = f.value("size", Json()), hash = f.value("hash", Json());
    if (!path.is_string()) return Fail(origin, who + " has no 'path' string");
    ManifestFile file;
    file.path = path.get<std::string>();
    if (!IsSafeRelativePath(file.path)) {
      return Fail(origin, who + " path '" + file.path + "' is absolute or contains '..', '.' or an empty part");
    }
    if (file.path == kManifestName) return Fail(origin, who + " lists the manifest itself");
    if (!seen.insert(file.path).second) return Fail(origin, who + " path '" + file.path + "' is listed twice");
    if (!size.is_number_unsigned())
      return Fail(origin, who + " ('" + file.path + "') has no non-negative integer 'size'");
    file.size = size.get<std::uint64_t>();
    if (!hash.is_string() || hash.get<std::string>().size() != hex_len || !IsLowerHex(hash.get<std::string>())) {
      return Fail(origin,
                  who + " ('" + file.path + "') 'hash' is not " + std::to_string(hex_len) + " lowercase hex digits");
    }
    file.hash = hash.get<std::string>();
    m.files.push_back(std::move(file));
  }
  return m;
}

std::string SerializeManifest(const Manifest& manifest) {
  Json files = Json::array();
  for (const auto& f : manifest.files) files.push_back({{"path", f.path}, {"size", f.size}, {"hash", f.hash}});
  Json doc = {{"format", "spotvisor-manifest"}, {"version", 1}, {"algorithm", manifest.algorithm}, {"files", files}};
  if (manifest.epoch) doc["epoch"] = *manifest.epoch;
  return doc.dump(1) + "\n";
}

Result<Manifest> ReadManifestFile(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Error{path.string() + ": cannot read the manifest: " + ec.message()};
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(std::min<std::uintmax_t>(size, kMaxManifestBytes + 1)), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in) return Error{path.string() + ": cannot read the manifest"};
  return ParseManifest(text, path.string());
}

fs::path ManifestPathFor(const fs::path& checkpoint, bool is_directory) {
  if (is_directory) return checkpoint / std::string(kManifestName);
  return checkpoint.parent_path() / (checkpoint.filename().string() + std::string(kManifestSuffix));
}

Result<std::string> HashFile(const fs::path& file, std::string_view algorithm) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Error{"cannot open " + file.string() + ": " + std::strerror(errno)};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  thread_local std::unique_ptr<unsigned char[]> buffer;
  if (!buffer) buffer = std::make_unique<unsigned char[]>(kBuffer);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_128bits_reset(state.get());
  std::uint32_t crc = 0;
  const bool use_crc = algorithm == "crc32";
  std::uint64_t offset = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.get(), kBuffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e{file.string() + " at offset " + std::to_string(offset) + ": read failed: " + std::strerror(errno)};
      ::close(fd);
      return e;
    }
    if (n == 0) break;
    if (use_crc) crc = Crc32(crc, buffer.get(), static_cast<std::size_t>(n));
    else XXH3_128bits_update(state.get(), buffer.get(), static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  if (use_crc) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", crc);
    return std::string(hex);
  }
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state.get()));
  return ToHex(canonical.digest, sizeof canonical.digest);
}

Status VerifyManifest(const Manifest& manifest, const fs::path& checkpoint, bool is_directory,
                      const ManifestCheck& check, HashPool* pool) {
  const fs::path root = is_directory ? checkpoint : checkpoint.parent_path();
  const std::string origin = ManifestPathFor(checkpoint, is_directory).string();
  if (!is_directory) {
    if (manifest.files.size() != 1 || manifest.files[0].path != checkpoint.filename().string()) {
      return Fail(origin,
                  "manifest of a single-file checkpoint must list exactly '" + checkpoint.filename().string() + "'");
    }
  } else {
    auto present = ListFiles(root);
    if (!present) return present.error();
    std::set<std::string> listed;
    for (const auto& f : manifest.files) listed.insert(f.path);
    for (const auto& rel : *present) {
      if (rel != kManifestName && !listed.count(rel) && !check.allow_unlisted)
        return Fail(origin, "extra file '" + rel + "' is not in the manifest");
    }
  }
  for (const auto& f : manifest.files) {
    std::error_code ec;
    const auto status = fs::symlink_status(root / f.path, ec);
    if (ec || !fs::exists(status)) return Fail(origin, "file '" + f.path + "' listed in the manifest is missing");
    if (!fs::is_regular_file(status)) return Fail(origin, "'" + f.path + "' is not a regular file");
    const auto size = fs::file_size(root / f.path, ec);
    if (ec) return Fail(origin, "cannot stat '" + f.path + "': " + ec.message());
    if (size != f.size) {
      return Fail(origin, "file '" + f.path + "' is " + std::to_string(size) + " bytes, the manifest says " +
                              std::to_string(f.size) + (size < f.size ? " (truncated)" : ""));
    }
  }
  if (!check.hashes) return Ok{};
  std::vector<Result<std::string>> hashes(manifest.files.size(), Result<std::string>(std::string()));
  auto run = [&](std::size_t i) { hashes[i] = HashFile(root / manifest.files[i].path, manifest.algorithm); };
  if (pool != nullptr) pool->ParallelFor(manifest.files.size(), run);
  else
    for (std::size_t i = 0; i < manifest.files.size(); ++i) run(i);
  for (std::size_t i = 0; i < manifest.files.size(); ++i) {
    if (!hashes[i]) return hashes[i].error();
    if (*hashes[i] != manifest.files[i].hash) {
      return Fail(origin, "file '" + manifest.files[i].path + "' has " + manifest.algorithm + " " + *hashes[i] +
                              ", the manifest says " + manifest.files[i].hash + " (contents changed)");
    }
  }
  return Ok{};
}

Result<fs::path> SealCheckpoint(const fs::path& checkpoint, HashPool* pool) {
  std::error_code ec;
  const auto status = fs::symlink_status(checkpoint, ec);
  if (ec || !fs::exists(status)) return Error{"cannot seal " + checkpoint.string() + ": it does not exist"};
  const bool is_dir = fs::is_directory(status);
  if (!is_dir && !fs::is_regular_file(status))
    return Error{"cannot seal " + checkpoint.string() + ": not a file or directory"};
  // A manifest certifies every byte it covers, so a checkpoint that is already bad (a
  // flipped byte a ZIP CRC-32 catches, a truncated safetensors) is never sealed. Fully
  // validated, any format (sealing is how an unknown format becomes checkable).
  ValidatorOptions full;
  full.level = config::ValidateLevel::kFull;
  full.format = "any";
  full.pool = pool;
  full.for_seal = true;
  if (const Verdict verdict = ValidateCheckpoint(checkpoint, full); !verdict.good) {
    return Error{"refusing to seal " + checkpoint.string() + ": it is not a good checkpoint: " + verdict.reason};
  }
  Manifest m;
  if (is_dir) {
    auto files = ListFiles(checkpoint);
    if (!files) return Error{"cannot seal " + checkpoint.string() + ": " + files.error().message};
    for (auto& rel : *files) {
      if (rel == kManifestName || rel.rfind(".spotvisor-tmp-", 0) == 0) continue;
      m.files.push_back({rel, 0, {}});
    }
  } else {
    m.files.push_back({checkpoint.filename().string(), 0, {}});
  }
  const fs::path root = is_dir ? checkpoint : checkpoint.parent_path();
  std::vector<Result<std::string>> hashes(m.files.size(), Result<std::string>(std::string()));
  auto run = [&](std::size_t i) {
    std::error_code size_ec;
    m.files[i].size = fs::file_size(root / m.files[i].path, size_ec);
    hashes[i] = size_ec ? Result<std::string>(Error{"cannot stat " + (root / m.files[i].path).string()})
                        : HashFile(root / m.files[i].path, m.algorithm);
  };
  if (pool != nullptr) pool->ParallelFor(m.files.size(), run);
  else
    for (std::size_t i = 0; i < m.files.size(); ++i) run(i);
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    if (!hashes[i]) return Error{"cannot seal " + checkpoint.string() + ": " + hashes[i].error().message};
    m.files[i].hash = *hashes[i];
  }
  const fs::path out = ManifestPathFor(checkpoint, is_dir);
  if (fs::exists(fs::symlink_status(out, ec))) {
    if (auto old = ReadManifestFile(out)) m.epoch = old->epoch;
  }
  if (auto st = WriteFileAtomically(out, SerializeManifest(m)); !st) return st.error();
  return out;
}

}  // namespace spotvisor::checkpoint
