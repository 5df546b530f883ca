// Preflight measurements; see probes.hpp. The endpoint probe runs its own short-lived
// io_context around the http module's HttpClient.
#include "spotvisor/preflight/probes.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "spotvisor/http/http_client.hpp"
#include "spotvisor/preemption/metadata_endpoint.hpp"
#include "spotvisor/telemetry/nvml.hpp"

namespace spotvisor::preflight {
namespace {

using http::HttpOutcome;
using http::HttpRequest;

constexpr std::size_t kChunk = 4 << 20;
constexpr auto kProbeTimeout = std::chrono::seconds(3);

// Sends one request and runs the loop until it is answered (the client's own deadline
// bounds it).
HttpOutcome Exchange(boost::asio::io_context& io, http::HttpClient& client, HttpRequest request) {
  std::optional<HttpOutcome> outcome;
  request.timeout = kProbeTimeout;
  client.Send(std::move(request), [&](HttpOutcome o) { outcome = std::move(o); });
  io.restart();
  while (!outcome && io.run_one() > 0) {
  }
  return outcome ? *outcome : HttpOutcome{http::HttpErrorKind::kNetwork, "no answer", {}};
}

std::string Short(std::string body) {
  for (auto& c : body) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return body.size() > 80 ? body.substr(0, 77) + "..." : body;
}

struct Path {
  std::string token_target, token_header_ttl, token_header;  // empty: no token
  std::string target;
  std::vector<http::HttpHeader> headers;
};

std::optional<Path> PathFor(const std::string& provider) {
  if (provider == "aws") {
    return Path{"/latest/api/token",
                "X-aws-ec2-metadata-token-ttl-seconds",
                "X-aws-ec2-metadata-token",
                "/latest/meta-data/spot/instance-action",
                {}};
  }
  if (provider == "alibaba") {
    return Path{"/latest/api/token",
                "X-aliyun-ecs-metadata-token-ttl-seconds",
                "X-aliyun-ecs-metadata-token",
                "/latest/meta-data/instance/spot/termination-time",
                {}};
  }
  if (provider == "gcp") {
    return Path{"", "", "", "/computeMetadata/v1/instance/preempted", {{"Metadata-Flavor", "Google"}}};
  }
  if (provider == "azure") {
    return Path{"", "", "", "/metadata/scheduledevents?api-version=2020-07-01", {{"Metadata", "true"}}};
  }
  return std::nullopt;
}

}  // namespace

Result<WriteMeasurement> MeasureWriteThroughput(const std::filesystem::path& dir, std::uint64_t bytes) {
  const auto file = dir / (".spotvisor-preflight-" + std::to_string(getpid()));
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error{"cannot create " + file.string() + ": " + std::strerror(errno)};
  std::vector<char> chunk(kChunk, '\x5a');
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t done = 0;
  std::string error;
  while (done < bytes && error.empty()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, bytes - done));
    const ssize_t w = ::write(fd, chunk.data(), n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      error =
          "cannot write " + file.string() + " after " + FormatSize(done) + ": " + std::strerror(w < 0 ? errno : ENOSPC);
    else done += static_cast<std::uint64_t>(w);
  }
  if (error.empty() && ::fsync(fd) != 0) error = "cannot fsync " + file.string() + ": " + std::strerror(errno);
  const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  ::unlink(file.c_str());
  if (!error.empty()) return Error{error};
  return WriteMeasurement{static_cast<double>(done) / std::max(elapsed, 1e-6), done};
}

CheckLine ProbeEndpoint(const config::JobConfig& job, const std::string& provider) {
  CheckLine line{"endpoint", CheckStatus::kOk, ""};
  if (provider == "none") {
    line.text = "no metadata endpoint (provider: none): notices come only as SIGTERM to spotvisor";
    return line;
  }
  if (provider == "file") {
    std::error_code ec;
    const auto parent = job.provider.file.parent_path();
    line.status = std::filesystem::is_directory(parent, ec) ? CheckStatus::kOk : CheckStatus::kFail;
    line.text = "trigger file " + job.provider.file.string() +
                (line.status == CheckStatus::kOk ? " (its directory exists)" : ": its directory does not exist");
    return line;
  }
  const auto path = PathFor(provider);
  // The address the watcher itself will poll (no DNS), so the probe checks what `run` uses.
  const std::string base = !job.provider.endpoint.empty()
                               ? job.provider.endpoint
                               : preemption::DefaultEndpoint(provider == "alibaba" ? config::ProviderKind::kAlibaba
                                                                                   : config::ProviderKind::kAws);
  auto endpoint = preemption::ParseMetadataEndpoint(base);
  if (!path || !endpoint) {
    line.status = CheckStatus::kFail;
    line.text = base + ": " + (endpoint ? "unknown provider " + provider : endpoint.error().message);
    return line;
  }
  boost::asio::io_context io;
  http::HttpClient client(io, *endpoint);
  HttpRequest get{"GET", path->target, path->headers, "", kProbeTimeout};
  if (!path->token_target.empty()) {
    const auto token = Exchange(
        io, client, HttpRequest{"PUT", path->token_target, {{path->token_header_ttl, "60"}}, "", kProbeTimeout});
    if (token.ok() && token.response.status == 200) {
      get.headers.push_back({path->token_header, token.response.body});
    } else if (!token.ok()) {
      line.status = CheckStatus::kFail;
      line.text =
          base + " " + provider + " token request: " + http::ToString(token.error) + " (" + token.message + ")" +
          (token.error == http::HttpErrorKind::kTimeout ? "; from a container, the IMDS hop limit may be 1" : "");
      return line;
    }
  }
  const auto answer = Exchange(io, client, get);
  if (!answer.ok()) {
    line.status = CheckStatus::kFail;
    line.text = base + path->target + ": " + http::ToString(answer.error) + " (" + answer.message +
                "): spotvisor would not see a preemption notice";
    return line;
  }
  const int status = answer.response.status;
  line.text = base + path->target + " reachable: HTTP " + std::to_string(status);
  if ((provider == "aws" || provider == "alibaba") && status == 404) line.text += " (no interruption scheduled)";
  else if (status == 200) line.text += " \"" + Short(answer.response.body) + "\"";
  if (status >= 500 || status == 401 || status == 403) line.status = CheckStatus::kWarn;
  return line;
}

CheckLine ProbeGpu() {
  auto nvml = telemetry::Nvml::Load();
  if (!nvml) return CheckLine{"gpu", CheckStatus::kOk, "none (" + nvml.error().message + ")"};
  std::string text;
  for (const auto& g : (*nvml)->Sample()) {
    text += (text.empty() ? "" : "; ") + std::to_string(g.index) + ": " + g.name + ", " + FormatSize(g.memory_total);
  }
  return CheckLine{
      "gpu", CheckStatus::kOk,
      std::to_string((*nvml)->device_count()) + " × NVIDIA (" + text + "), driver " + (*nvml)->driver_version()};
}

}  // namespace spotvisor::preflight
