// Host, boot time, config hash and file fingerprints; see run_facts.hpp.
#include "spotvisor/telemetry/run_facts.hpp"

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/util/host_name.hpp"

namespace spotvisor::telemetry {
namespace {

constexpr std::uint64_t kMaxFingerprintBytes = 256ull << 20;

std::string Hex(const XXH128_hash_t& h) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string("xxh3-128:") + buf;
}

std::string ReadTrimmed(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

HostInfo DescribeHost(const config::JobConfig& job) {
  HostInfo h;
  h.hostname = util::ShortHostName();
  const auto kind = job.provider.kind;
  h.source = job.provider.detected_from.empty() ? "job file (provider.kind)" : "DMI: " + job.provider.detected_from;
  h.provider = config::ToString(kind);
  // EC2 and Alibaba put the instance type in the DMI product name; GCP and Azure do not.
  const std::string product = ReadTrimmed(job.provider.dmi_root / "product_name");
  if ((kind == config::ProviderKind::kAws || kind == config::ProviderKind::kAlibaba) && !product.empty()) {
    h.instance_type = product;
  }
  return h;
}

std::optional<std::int64_t> BootTimeMs() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stoll(line.substr(6)) * 1000;
  }
  return std::nullopt;
}

std::string ConfigHash(const config::JobConfig& job) {
  const std::string yaml = config::ToYaml(job);
  return Hex(XXH3_128bits(yaml.data(), yaml.size()));
}

std::vector<Fingerprint> FingerprintFiles(const std::vector<std::filesystem::path>& files) {
  std::vector<Fingerprint> out;
  for (const auto& path : files) {
    Fingerprint f;
    f.path = path.string();
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) {
      f.error = "cannot read: " + ec.message();
    } else if (size > kMaxFingerprintBytes) {
      f.bytes = size;
      f.error = "larger than 256 MiB: not hashed";
    } else {
      std::ifstream in(path, std::ios::binary);
      XXH3_state_t* state = XXH3_createState();
      XXH3_128bits_reset(state);
      std::vector<char> buf(1 << 16);
      while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
        XXH3_128bits_update(state, buf.data(), static_cast<std::size_t>(in.gcount()));
        f.bytes += static_cast<std::uint64_t>(in.gcount());
      }
      f.hash = Hex(XXH3_128bits_digest(state));
      XXH3_freeState(state);
      if (in.bad()) f.error = "read error", f.hash.clear();
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace spotvisor::telemetry
