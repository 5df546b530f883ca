// provider.endpoint through the http module's parser, in the words of metadata services
// (plain http; the provider's paths are appended), and the providers' default addresses.
#include "spotvisor/preemption/metadata_endpoint.hpp"

namespace spotvisor::preemption {

Result<http::Endpoint> ParseMetadataEndpoint(std::string_view url) {
  static constexpr http::EndpointWords kWords{
      .https = "metadata services speak plain http, not https",
      .path = "the provider's paths are appended",
  };
  return http::ParseEndpoint(url, "provider.endpoint", kWords);
}

const char* DefaultEndpoint(config::ProviderKind kind) {
  return kind == config::ProviderKind::kAlibaba ? "http://100.100.100.200" : "http://169.254.169.254";
}

}  // namespace spotvisor::preemption
