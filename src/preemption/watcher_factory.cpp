// MakeWatcher: resolves `auto`, applies the default endpoint of each provider, refuses
// configurations that cannot work, and builds the watcher.
#include "azure_watcher.hpp"
#include "file_watcher.hpp"
#include "gcp_watcher.hpp"
#include "imds_dialects.hpp"
#include "imds_watcher.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/metadata_endpoint.hpp"
#include "spotvisor/preemption/watcher.hpp"

namespace spotvisor::preemption {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

using config::ProviderKind;

}  // namespace

Result<std::unique_ptr<Watcher>> MakeWatcher(boost::asio::io_context& io, Clock& clock,
                                             const config::ProviderSection& provider) {
  return MakeWatcher(io, clock, provider, WatcherTuning{});
}

Result<std::unique_ptr<Watcher>> MakeWatcher(boost::asio::io_context& io, Clock& clock,
                                             const config::ProviderSection& provider, const WatcherTuning& tuning) {
  const ProviderKind kind = provider.kind;
  if (kind == ProviderKind::kAuto) return Error{"provider.kind: auto is resolved when the job is finalized"};
  if (!provider.detected_from.empty()) {
    if (kind == ProviderKind::kNone) {
      // Info, not a warning: a workstation or an on-premises box is no cloud, and the default
      // (provider.kind: auto) must not cry wolf there. One line says what was read.
      Log(LogLevel::kInfo,
          "event=provider_detected provider=none kind=none evidence=" + Quote(OneLine(provider.detected_from)) +
              " detail=\"no known cloud in DMI: no metadata endpoint is watched (SIGTERM still stops the "
              "trainer); set provider.kind to watch one\"");
    } else {
      Log(LogLevel::kInfo, "event=provider_detected kind=" + std::string(config::ToString(kind)) +
                               " evidence=" + Quote(OneLine(provider.detected_from)));
    }
  }
  if (kind == ProviderKind::kNone) return std::unique_ptr<Watcher>();
  if (provider.poll_interval <= Duration::zero() || provider.request_timeout <= Duration::zero()) {
    return Error{"provider.poll_interval and provider.request_timeout must be positive"};
  }
  if (kind == ProviderKind::kFile) {
    if (provider.file.empty()) return Error{"provider.file is required with provider.kind: file"};
    return std::unique_ptr<Watcher>(std::make_unique<FileWatcher>(io, clock, provider));
  }
  auto endpoint = ParseMetadataEndpoint(provider.endpoint.empty() ? DefaultEndpoint(kind) : provider.endpoint);
  if (!endpoint) return endpoint.error();
  switch (kind) {
    case ProviderKind::kAws:
      return std::unique_ptr<Watcher>(
          std::make_unique<ImdsWatcher>(io, clock, std::move(*endpoint), provider, tuning, AwsDialect(provider)));
    case ProviderKind::kAlibaba:
      return std::unique_ptr<Watcher>(
          std::make_unique<ImdsWatcher>(io, clock, std::move(*endpoint), provider, tuning, AlibabaDialect(provider)));
    case ProviderKind::kGcp:
      return std::unique_ptr<Watcher>(std::make_unique<GcpWatcher>(io, clock, std::move(*endpoint), provider, tuning));
    case ProviderKind::kAzure:
      return std::unique_ptr<Watcher>(
          std::make_unique<AzureWatcher>(io, clock, std::move(*endpoint), provider, tuning));
    default:
      return Error{std::string("provider.kind ") + config::ToString(kind) + " has no watcher"};
  }
}

}  // namespace spotvisor::preemption
