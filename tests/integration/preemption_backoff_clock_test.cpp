// A watcher's error backoff in virtual time: against an endpoint that answers every request
// with 500, the AWS watcher asks again after the poll interval, then twice that, and so on
// up to its ceiling, a tenth of the provider's warning window (never above
// WatcherTuning::backoff_max, never below the poll interval), each delay up to a quarter
// shorter (jitter). The requests are real (a RawServer on loopback); the delays are virtual,
// so a minute of backoff takes well under a second.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <vector>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::VirtualClock;

// Runs `io` for `total` of virtual time. While no virtual timer is pending the watcher waits
// on the network, and so does this, for real; else virtual time moves on a millisecond at a
// time (every delay is whole milliseconds, so each timer runs at exactly its time).
void Drive(boost::asio::io_context& io, VirtualClock& clock, Duration total) {
  const Duration end = clock.elapsed() + total;
  const auto real_limit = std::chrono::steady_clock::now() + 30s;
  while (clock.elapsed() < end && std::chrono::steady_clock::now() < real_limit) {
    if (clock.pending_timers() == 0) {
      io.restart();
      io.run_one_for(10ms);
      continue;
    }
    clock.RunFor(io, 1ms);
  }
}

struct Case {
  Duration window;   // provider.default_window
  Duration ceiling;  // what the backoff must stop growing at
};

class BackoffClock : public ::testing::TestWithParam<Case> {};

TEST_P(BackoffClock, DelaysDoubleFromThePollIntervalUpToATenthOfTheWindow) {
  const Case c = GetParam();
  boost::asio::io_context io;
  VirtualClock clock;
  std::vector<Duration> asked;  // virtual time of each token request
  testing::RawServer server(io, [&](const std::string& head, const std::string&) {
    if (head.rfind("PUT /latest/api/token", 0) == 0) asked.push_back(clock.elapsed());
    return testing::RawAction{testing::HttpAnswer(500, "broken")};
  });
  auto p = testing::FastProvider(config::ProviderKind::kAws, server.url());
  p.poll_interval = 1s;
  p.request_timeout = 2s;
  p.default_window = c.window;
  auto watcher = preemption::MakeWatcher(io, clock, p);  // production tuning: backoff_max 10 s
  ASSERT_TRUE(watcher.ok()) << watcher.error().message;
  testing::Recorder seen;
  (*watcher)->Start(seen.OnNotice(), seen.OnCleared());
  Drive(io, clock, 60s);
  (*watcher)->Stop();

  ASSERT_GE(asked.size(), 8u);
  EXPECT_EQ(asked[0], 0ms);
  Duration nominal = p.poll_interval;
  for (std::size_t i = 1; i < asked.size(); ++i) {
    const Duration gap = asked[i] - asked[i - 1];
    EXPECT_LE(gap, nominal) << "request " << i;
    EXPECT_GE(gap, nominal - nominal / 4) << "request " << i;
    nominal = std::min(nominal * 2, c.ceiling);
  }
  EXPECT_EQ(nominal, c.ceiling);
  EXPECT_TRUE(seen.notices.empty());
}

INSTANTIATE_TEST_SUITE_P(Windows, BackoffClock,
                         ::testing::Values(Case{30s, 3s},    // a tenth of the window
                                           Case{200s, 10s},  // backoff_max
                                           Case{5s, 1s}));   // never below the poll interval

}  // namespace
}  // namespace spotvisor
