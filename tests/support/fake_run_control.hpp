// The driver's side of RunControl (spotvisor/supervisor/run_observer.hpp) for testing one
// observer in-process: its own io_context and child table, a clock (a VirtualClock unless the
// test gives another), and a record of every stop and checkpoint the observer asked for, with
// the virtual time of each. The test plays the driver: it calls the observer's On* methods and
// runs the loop for as long as it likes (RunFor: virtual time, at once).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <string>
#include <vector>

#include "spotvisor/process/child_table.hpp"
#include "spotvisor/supervisor/run_observer.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor::testing {

class FakeRunControl final : public supervisor::RunControl {
 public:
  struct Request {
    std::string what;  // "stop:hang", "stop:budget", "stop:notice", "checkpoint"
    std::string detail;
    Duration at;  // virtual time since the clock was made
  };

  explicit FakeRunControl(const config::JobConfig& job) : job_(job) {}

  boost::asio::io_context& io() override { return io_; }
  Clock& clock() override { return clock_; }
  const config::JobConfig& job() const override { return job_; }
  void RequestStop(supervisor::StopReason reason, const std::string& detail) override {
    requests.push_back({std::string("stop:") + StopName(reason), detail, clock_.elapsed()});
  }
  void RequestCheckpoint(const std::string& detail) override {
    requests.push_back({"checkpoint", detail, clock_.elapsed()});
  }
  pid_t child_pid() const override { return child; }
  bool MemberForSure() const override { return member_for_sure; }
  process::ChildTable& children() override { return children_; }

  // Runs the loop for `d` of virtual time (see VirtualClock::RunFor).
  void RunFor(Duration d) { clock_.RunFor(io_, d); }
  // The requests whose `what` is `what`.
  std::vector<Request> Requests(const std::string& what) const {
    std::vector<Request> out;
    for (const auto& r : requests) {
      if (r.what == what) out.push_back(r);
    }
    return out;
  }

  pid_t child = 0;              // what child_pid() says
  bool member_for_sure = true;  // what MemberForSure() says
  std::vector<Request> requests;
  VirtualClock clock_;

 private:
  static const char* StopName(supervisor::StopReason reason) {
    switch (reason) {
      case supervisor::StopReason::kHang:
        return "hang";
      case supervisor::StopReason::kBudget:
        return "budget";
      case supervisor::StopReason::kNotice:
        return "notice";
      default:
        return "other";
    }
  }

  const config::JobConfig& job_;
  boost::asio::io_context io_;
  process::ChildTable children_;
};

}  // namespace spotvisor::testing
