// Helpers of the etcd client's integration tests: run the loop until something holds, wait
// for one asynchronous answer, connect, and collect what a watch reports. Test thread only.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/watch.hpp"

namespace spotvisor::etcd::etcd_test {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Runs the loop until `done` holds or `limit` passes.
inline bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& done, Duration limit = seconds(10)) {
  const auto deadline = Clock::now() + limit;
  while (!done() && Clock::now() < deadline) {
    io.restart();
    io.run_for(milliseconds(10));
  }
  return done();
}

// Starts one asynchronous request and waits for its answer.
template <class T>
Result<T> Await(boost::asio::io_context& io, const std::function<void(Callback<T>)>& start) {
  std::optional<Result<T>> out;
  start([&](Result<T> r) { out = std::move(r); });
  if (!RunUntil(
          io, [&] { return out.has_value(); }, seconds(30)))
    return Error{"no answer within 30 s"};
  return std::move(*out);
}

inline std::unique_ptr<Client> Connect(boost::asio::io_context& io, std::vector<std::string> endpoints,
                                       std::string credentials = "", Duration timeout = seconds(2)) {
  auto client = Client::Create(io, SystemClock(), {std::move(endpoints), std::move(credentials), timeout});
  EXPECT_TRUE(client) << client.error().message;
  return std::move(*client);
}

inline Result<PutResponse> Put(boost::asio::io_context& io, Client& c, const std::string& key, const std::string& value,
                               std::int64_t lease = 0) {
  return Await<PutResponse>(io, [&](auto done) { c.Put({key, value, lease, true}, std::move(done)); });
}

inline Result<RangeResponse> Get(boost::asio::io_context& io, Client& c, const std::string& key, bool prefix = false) {
  return Await<RangeResponse>(io, [&](auto done) { c.Range({key, prefix ? PrefixEnd(key) : ""}, std::move(done)); });
}

// Collects a watch's events and what it reports.
struct Seen {
  std::vector<Event> events;
  std::int64_t compacted = 0;
  int connects = 0;
  int losses = 0;
  WatchHandlers Handlers() {
    return {[this](const std::vector<Event>& e) { events.insert(events.end(), e.begin(), e.end()); },
            [this](std::int64_t rev) { compacted = rev; },
            [this](bool up, const std::string&) { ++(up ? connects : losses); }};
  }
};

}  // namespace spotvisor::etcd::etcd_test
