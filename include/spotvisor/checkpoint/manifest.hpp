// spotvisor's own manifest: `spotvisor.manifest.json` inside a checkpoint directory, or
// `X.spotvisor.manifest.json` next to a single-file checkpoint X. Lists every file with
// its size and hash (XXH3-128 written by `seal`; CRC-32 as the Python helper writes it).
// Parsing is bounded and rejects absolute paths and `..`. Pure except Seal/Verify (files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

class HashPool;

inline constexpr std::string_view kManifestName = "spotvisor.manifest.json";
inline constexpr std::string_view kManifestSuffix = ".spotvisor.manifest.json";
inline constexpr std::uint64_t kMaxManifestBytes = 64ull << 20;
inline constexpr std::size_t kMaxManifestFiles = 1'000'000;

struct ManifestFile {
  std::string path;  // relative, '/'-separated, no '..'
  std::uint64_t size = 0;
  std::string hash;  // lowercase hex: 32 digits (xxh3-128) or 8 (crc32)
};

struct Manifest {
  std::string algorithm = "xxh3-128";  // "xxh3-128" | "crc32"
  std::vector<ManifestFile> files;     // sorted by path when written by us
  // The epoch (group start) whose trainer wrote it: SPOTVISOR_EPOCH as the Python helper
  // saw it. None: unknown (an older manifest, another writer); such a checkpoint is never
  // fenced (fence.hpp).
  std::optional<std::uint64_t> epoch;
};

// Parses and checks a manifest; `origin` names it in messages.
Result<Manifest> ParseManifest(std::string_view json, const std::string& origin);
std::string SerializeManifest(const Manifest& manifest);
// Reads (at most kMaxManifestBytes + 1 bytes) and parses the manifest file at `path`.
Result<Manifest> ReadManifestFile(const std::filesystem::path& path);

// A relative manifest path is safe: not empty, not absolute, no '.', '..' or empty parts.
bool IsSafeRelativePath(std::string_view path);

// The manifest that belongs to a checkpoint (file or directory), present or not.
std::filesystem::path ManifestPathFor(const std::filesystem::path& checkpoint, bool is_directory);

// Hash of a whole file in `algorithm`, lowercase hex (XXH3-128 as `xxhsum -H2` prints it).
Result<std::string> HashFile(const std::filesystem::path& file, std::string_view algorithm);

struct ManifestCheck {
  bool hashes = true;           // false: sizes and presence only
  bool allow_unlisted = false;  // a directory may hold files the manifest does not list (re-sealing)
};

// Checks `checkpoint` against `manifest`: every listed file present with its size (and
// hash), and, for a directory, no file that is not listed. Files hash in parallel.
Status VerifyManifest(const Manifest& manifest, const std::filesystem::path& checkpoint, bool is_directory,
                      const ManifestCheck& check, HashPool* pool);

// Writes the manifest of `checkpoint` (every regular file, XXH3-128) atomically. Returns
// the manifest's path. Symlinks inside are refused (a manifest lists real bytes). The
// epoch of the manifest it replaces, if any, is kept: sealing again does not change who
// wrote the checkpoint.
Result<std::filesystem::path> SealCheckpoint(const std::filesystem::path& checkpoint, HashPool* pool);

}  // namespace spotvisor::checkpoint
