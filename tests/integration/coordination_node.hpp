// One node of a group in an in-process coordination test: its etcd coordinator and what it
// was told (stops, spare events, the agreement, cut-offs, the job's end). Shared by the
// spares, fencing and group-size tests.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "integration/etcd_cluster.hpp"
#include "spotvisor/coordination/etcd_coordinator.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::testing {

// A job of `nodes` nodes named `name` on `cluster`, auto rank, this node at `advertise`.
inline config::JobConfig GroupJob(const EtcdCluster& cluster, const std::string& name, const std::string& advertise,
                                  int nodes) {
  config::JobConfig job;
  job.job.name = name;
  job.coordination.etcd = cluster.ClientUrls();
  job.coordination.prefix = "/spotvisor-test";
  job.coordination.nodes = nodes;
  job.coordination.min_nodes = nodes;
  job.coordination.node_rank = config::kAutoRank;
  job.coordination.advertise = advertise;
  return job;
}

struct Node {
  config::JobConfig job;
  std::unique_ptr<supervisor::Coordinator> coordinator;
  std::vector<bool> spare_events;  // GroupSpareEvent::waiting, in order
  std::optional<supervisor::GroupAgreedEvent> agreed;
  std::vector<std::string> stops;  // StopRequestedEvent::detail, in order
  std::vector<std::string> grows;  // the grow handler's details, in order
  int cut_offs = 0;                // the cut-off handler's calls
  int finished = 0;                // a spare told that the group is done

  void Start(boost::asio::io_context& io, Clock& clock) {
    auto made = coordination::MakeEtcdCoordinator(io, clock, job);
    ASSERT_TRUE(made) << made.error().message;
    coordinator = std::move(*made);
    coordinator->Start({[this](const supervisor::StopRequestedEvent& e) { stops.push_back(e.detail); },
                        [this](supervisor::GroupSpareEvent e) { spare_events.push_back(e.waiting); },
                        [this] { ++cut_offs; }, [this] { ++finished; },
                        [this](const std::string& detail) { grows.push_back(detail); }});
  }
  void Propose(std::uint64_t step) {
    agreed.reset();
    coordinator->Propose({{checkpoint::ResumePoint{"/ckpt/step" + std::to_string(step), step}}, 1},
                         [this](supervisor::GroupAgreedEvent e) { agreed = std::move(e); });
  }
};

inline std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace spotvisor::testing
