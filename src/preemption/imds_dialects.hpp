// The AWS (IMDSv2) and Alibaba dialects of the token-based metadata watcher: paths,
// header names, and how a 200 body becomes a Notice. Pure; any thread.
#pragma once

#include "imds_watcher.hpp"

namespace spotvisor::preemption {

// spot/instance-action, plus events/recommendations/rebalance unless `rebalance: ignore`.
ImdsDialect AwsDialect(const config::ProviderSection& cfg);
// instance/spot/termination-time.
ImdsDialect AlibabaDialect(const config::ProviderSection& cfg);

}  // namespace spotvisor::preemption
