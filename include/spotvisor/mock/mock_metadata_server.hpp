// A faithful fake of the AWS, GCP, Azure and Alibaba instance-metadata services that can
// be told to preempt: `spotvisor mock-metadata`, the drills, and the tests use it in-process.
// Runs on the io_context thread it was created with; all members are called on that thread.
// Control paths: POST /__spotvisor/preempt (optional JSON body, see ParsePreemptSpec),
// POST /__spotvisor/clear, GET /__spotvisor/state.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/util/result.hpp"
#include "spotvisor/util/units.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::mock {

enum class MockProvider { kAws, kGcp, kAzure, kAlibaba };

// "aws" | "gcp" | "azure" | "alibaba".
Result<MockProvider> ParseMockProvider(std::string_view name);
const char* ToString(MockProvider provider);

struct MockOptions {
  std::string listen_host = "127.0.0.1";      // an address, not a name
  std::uint16_t listen_port = 0;              // 0 = any free port (see Start)
  std::string action = "terminate";           // aws: terminate | stop | hibernate
  bool imdsv2_required = false;               // aws/alibaba: GETs need a valid token (else 401)
  std::optional<Duration> preempt_after;      // flip by itself this long after Start
  std::string vm_name = "spotvisor-mock-vm";  // azure: this VM's name
  bool other_vm_events = true;                // azure: a preemption also lists another VM's event
  int azure_rate_limit = 5;                   // azure: requests per second before 429; 0 = off
  bool gke_workload_identity = false;         // gcp: the GKE metadata server: instance/ holds only
                                              // attributes/ hostname id service-accounts/ zone (404 else)
  // A flapping service: every `flap` the metadata paths change behaviour, in turn: healthy,
  // connection dropped unanswered, no answer for a whole period, 200 with garbage, 503,
  // bytes that are not HTTP. Control paths always answer. Stops after `flap_for`.
  std::optional<Duration> flap;
  std::optional<Duration> flap_for;
};

// The behaviours a flapping server cycles through, in order.
enum class FlapPhase { kHealthy, kDropped, kSilent, kGarbage, kUnavailable, kNotHttp };
const char* ToString(FlapPhase phase);

// What one flip sets. Unset fields take the provider's defaults.
struct PreemptSpec {
  std::optional<std::string> action;    // aws: terminate | stop | hibernate
  std::optional<Duration> deadline_in;  // the notice's time = now + this (aws 2 min,
                                        // alibaba 5 min, azure NotBefore 30 s)
  bool notice = true;                   // aws: the interruption notice itself
  bool rebalance = false;               // aws: a rebalance recommendation (alone if !notice)
  bool maintenance = false;             // gcp: maintenance-event TERMINATE_ON_HOST_MAINTENANCE
                                        // instead of preempted=TRUE
  std::string event_type = "Preempt";   // azure: EventType of this VM's event
  bool other_vm_only = false;           // azure: only another VM's event appears
};

// The JSON body of POST /__spotvisor/preempt: {"action": "stop", "deadline_in_s": 90,
// "notice": true, "rebalance": true, "maintenance": true, "event_type": "Terminate",
// "other_vm_only": true}; every key optional; an empty body is the default spec. Pure.
Result<PreemptSpec> ParsePreemptSpec(std::string_view body);

class MockMetadataServer {
 public:
  MockMetadataServer(boost::asio::io_context& io, MockProvider provider, MockOptions options);
  ~MockMetadataServer();  // Stop()
  MockMetadataServer(const MockMetadataServer&) = delete;
  MockMetadataServer& operator=(const MockMetadataServer&) = delete;

  // Binds and listens; returns the port (the chosen one when listen_port is 0).
  Result<std::uint16_t> Start();
  // Flips to "preempted"; answers pending GCP long-polls at once.
  void Preempt(const PreemptSpec& spec = {});
  // Back to "no notice"; answers pending GCP long-polls at once.
  void Clear();
  // Closes the listener and every connection (by cancelling; the io_context keeps running).
  void Stop();

  bool preempted() const;
  std::uint16_t port() const;
  std::uint64_t requests() const;                          // metadata requests served (not control)
  std::uint64_t requests_to(std::string_view path) const;  // ... to exactly this path
  std::vector<std::string> acknowledged() const;           // azure: EventIds acknowledged so far
  std::string url() const;                                 // "http://127.0.0.1:PORT"
  FlapPhase flap_phase() const;                            // kHealthy unless flapping now

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with in-flight connection handlers
};

}  // namespace spotvisor::mock
