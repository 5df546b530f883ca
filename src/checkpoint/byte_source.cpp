// pread-based and in-memory byte sources; see byte_source.hpp. Big CRC ranges are split
// into 8 MiB chunks hashed on the pool and joined with Crc32Combine, so one multi-GiB
// tensor entry uses every pool thread.
#include "spotvisor/checkpoint/byte_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "spotvisor/checkpoint/crc32.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"

namespace spotvisor::checkpoint {
namespace {
constexpr std::uint64_t kChunk = 8ull << 20;  // unit of parallel work
constexpr std::size_t kBuffer = 256u << 10;   // pread buffer, stays in L2

std::string At(const std::string& name, std::uint64_t offset) { return name + " at offset " + std::to_string(offset); }
}  // namespace

MemorySource::MemorySource(std::span<const std::byte> bytes, std::string name)
    : bytes_(bytes), name_(std::move(name)) {}

Status MemorySource::ReadAt(std::uint64_t offset, std::span<std::byte> out) const {
  if (offset > bytes_.size() || out.size() > bytes_.size() - offset) {
    return Error{At(name_, offset) + ": read of " + std::to_string(out.size()) + " bytes past the end (" +
                 std::to_string(bytes_.size()) + " bytes)"};
  }
  if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
  return Ok{};
}

Result<std::uint32_t> MemorySource::Crc32Of(std::uint64_t offset, std::uint64_t length,
                                            const BlockVisitor* visit) const {
  if (offset > bytes_.size() || length > bytes_.size() - offset) {
    return Error{At(name_, offset) + ": range of " + std::to_string(length) + " bytes past the end"};
  }
  const std::span<const std::byte> range = bytes_.subspan(offset, static_cast<std::size_t>(length));
  if (visit != nullptr) (*visit)(offset, range);
  return Crc32(0, range.data(), range.size());
}

Result<FileSource> FileSource::Open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{"cannot open " + path.string() + ": " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{"cannot stat " + path.string() + ": " + std::strerror(err)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path.string() + " is not a regular file"};
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return FileSource(fd, static_cast<std::uint64_t>(st.st_size), path.string());
}

FileSource::FileSource(FileSource&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), name_(std::move(other.name_)) {}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileSource::ReadAt(std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{At(name_, offset + done) + ": read failed: " + std::strerror(errno)};
    if (n == 0) {
      return Error{At(name_, offset + done) + ": unexpected end of file (wanted " + std::to_string(out.size()) +
                   " bytes at offset " + std::to_string(offset) + ")"};
    }
    done += static_cast<std::size_t>(n);
  }
  return Ok{};
}

Result<std::uint32_t> FileSource::Crc32Of(std::uint64_t offset, std::uint64_t length, const BlockVisitor* visit) const {
  if (offset > size_ || length > size_ - offset) {
    return Error{At(name_, offset) + ": range of " + std::to_string(length) + " bytes runs past the end of the file (" +
                 std::to_string(size_) + " bytes)"};
  }
  thread_local std::unique_ptr<std::byte[]> buffer;
  if (!buffer) buffer = std::make_unique<std::byte[]>(kBuffer);
  std::uint32_t crc = 0;
  while (length > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(length, kBuffer));
    if (auto st = ReadAt(offset, {buffer.get(), n}); !st) return st.error();
    crc = Crc32(crc, buffer.get(), n);
    if (visit != nullptr) (*visit)(offset, {buffer.get(), n});
    offset += n;
    length -= n;
  }
  return crc;
}

Result<std::vector<std::uint32_t>> Crc32OfRanges(const ByteSource& source, std::span<const ByteRange> ranges,
                                                 HashPool* pool, const BlockVisitor* visit) {
  struct Piece {
    std::size_t range;  // which range it belongs to
    ByteRange bytes;    // its part of that range
  };
  std::vector<Piece> pieces;
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    std::uint64_t at = ranges[r].offset;
    const std::uint64_t end = ranges[r].offset + ranges[r].length;
    do {
      const std::uint64_t n = std::min<std::uint64_t>(kChunk, end - at);
      pieces.push_back({r, {at, n}});
      at += n;
    } while (at < end);
  }
  std::vector<Result<std::uint32_t>> crcs(pieces.size(), Result<std::uint32_t>(0u));
  auto run = [&](std::size_t i) { crcs[i] = source.Crc32Of(pieces[i].bytes.offset, pieces[i].bytes.length, visit); };
  if (pool != nullptr && pieces.size() > 1) {
    pool->ParallelFor(pieces.size(), run);
  } else {
    for (std::size_t i = 0; i < pieces.size(); ++i) run(i);
  }
  std::vector<std::uint32_t> out(ranges.size(), 0);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (!crcs[i]) return crcs[i].error();
    auto& crc = out[pieces[i].range];
    crc = Crc32Combine(crc, *crcs[i], pieces[i].bytes.length);
  }
  return out;
}

}  // namespace spotvisor::checkpoint
