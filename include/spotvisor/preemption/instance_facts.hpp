// What the provider's metadata service says about this machine — instance type, zone and
// region — for the run report and the info metric. Asked once at start; every request is
// bounded by provider.request_timeout, and an answer that does not come stays empty
// (unknown, never guessed). Runs on the io thread it was created with.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "spotvisor/config/job_config.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::preemption {

struct InstanceFacts {
  std::string instance_type;  // "g5.xlarge", "a2-highgpu-1g", "Standard_NC6s_v3", ...
  std::string zone;           // "us-east-1a", "us-central1-a", "1" (Azure), "cn-hangzhou-i"
  std::string region;         // "us-east-1", "us-central1", "eastus", "cn-hangzhou"
  std::string trouble;        // the first request that failed, for one log line; empty if none
};

class InstanceFactsQuery {
 public:
  using Done = std::function<void(InstanceFacts)>;
  // nullptr for providers without a metadata service (`none`, `file`, `auto` finding none)
  // or an endpoint that does not parse (the watcher reports that one).
  static std::unique_ptr<InstanceFactsQuery> Make(boost::asio::io_context& io, const config::ProviderSection& provider);
  virtual ~InstanceFactsQuery() = default;  // cancels; `done` never runs afterwards
  // Starts the questions; `done` runs once on the io thread with whatever was answered.
  virtual void Start(Done done) = 0;
};

}  // namespace spotvisor::preemption
