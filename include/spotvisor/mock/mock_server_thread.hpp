// The mock metadata server on a thread of its own, for callers that block (drills, tests):
// Preempt() and Clear() run on the server's thread and return once done. Owns the thread;
// the destructor stops the server and joins.
#pragma once

#include <memory>
#include <string>

#include "spotvisor/mock/mock_metadata_server.hpp"

namespace spotvisor::mock {

class MockServerThread {
 public:
  MockServerThread(MockProvider provider, MockOptions options = {});
  ~MockServerThread();
  MockServerThread(const MockServerThread&) = delete;
  MockServerThread& operator=(const MockServerThread&) = delete;

  // Binds, starts the thread; returns the base URL ("http://127.0.0.1:PORT").
  Result<std::string> Start();
  void Preempt(const PreemptSpec& spec = {});
  void Clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // io_context, server, thread
};

}  // namespace spotvisor::mock
