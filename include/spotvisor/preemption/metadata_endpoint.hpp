// `provider.endpoint`: the metadata service's base URL, parsed by the http module with
// messages that name provider.endpoint, and each provider's own address. Pure.
#pragma once

#include <string_view>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/http/endpoint.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::preemption {

// http::ParseEndpoint for provider.endpoint ("http://127.0.0.1:1338").
Result<http::Endpoint> ParseMetadataEndpoint(std::string_view url);

// The provider's own metadata address (link-local: no DNS, no proxy), used when
// provider.endpoint is not set. GCP's also answers as metadata.google.internal.
const char* DefaultEndpoint(config::ProviderKind kind);

}  // namespace spotvisor::preemption
