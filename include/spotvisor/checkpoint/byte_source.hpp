// Random-access bytes that checkpoint parsers read: an open file (pread) or a buffer in
// memory (fuzzers, tests), and CRCs of many ranges at once, split into chunks on a
// HashPool. Sources are safe for concurrent reads; FileSource owns its descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

class HashPool;

// Sees the bytes of a range as they are hashed, block by block, in order within a block's
// chunk: `offset` is the block's absolute offset. Lets a second check ride on the same read
// (the content check). Runs on pool threads: must be safe to call concurrently.
using BlockVisitor = std::function<void(std::uint64_t offset, std::span<const std::byte> block)>;

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;
  // What messages call it: a file path, or "<memory>".
  virtual const std::string& name() const = 0;
  // Exactly out.size() bytes at `offset`, or an Error naming the offset.
  virtual Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const = 0;
  // CRC-32 (ZIP) of [offset, offset + length), on the calling thread; `visit` (may be
  // null) sees every byte of the range.
  virtual Result<std::uint32_t> Crc32Of(std::uint64_t offset, std::uint64_t length,
                                        const BlockVisitor* visit = nullptr) const = 0;
};

struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// CRC-32 of each range, in order. Ranges are cut into chunks of at most 8 MiB that run on
// `pool` (null: the caller) and are joined with Crc32Combine. The first failure wins.
// `visit` (may be null) sees every byte of every range, from any pool thread.
Result<std::vector<std::uint32_t>> Crc32OfRanges(const ByteSource& source, std::span<const ByteRange> ranges,
                                                 HashPool* pool, const BlockVisitor* visit = nullptr);

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::span<const std::byte> bytes, std::string name);
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override;
  Result<std::uint32_t> Crc32Of(std::uint64_t offset, std::uint64_t length,
                                const BlockVisitor* visit = nullptr) const override;

 private:
  std::span<const std::byte> bytes_;  // not owned; outlives the source
  std::string name_;                  // for messages
};

class FileSource final : public ByteSource {
 public:
  // Opens `path` read-only; it must be a regular file (symlinks are checked by callers).
  static Result<FileSource> Open(const std::filesystem::path& path);
  FileSource(FileSource&& other) noexcept;
  FileSource& operator=(FileSource&&) = delete;
  FileSource(const FileSource&) = delete;
  ~FileSource() override;

  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override;
  Result<std::uint32_t> Crc32Of(std::uint64_t offset, std::uint64_t length,
                                const BlockVisitor* visit = nullptr) const override;
  int fd() const { return fd_; }

 private:
  FileSource(int fd, std::uint64_t size, std::string name) : fd_(fd), size_(size), name_(std::move(name)) {}

  int fd_ = -1;             // owned
  std::uint64_t size_ = 0;  // at open time
  std::string name_;        // the path, for messages
};

}  // namespace spotvisor::checkpoint
