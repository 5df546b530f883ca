// The protocol half of the mock metadata server, free of sockets: one MockService per
// provider turns a parsed request into a reply, and holds the "preempted" state. The
// server (mock_metadata_server.cpp) does the I/O. io thread only.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "spotvisor/mock/mock_metadata_server.hpp"

namespace spotvisor::mock {

struct MockRequest {
  std::string method;                          // "GET", "PUT", "POST"
  std::string path;                            // without the query
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool answer_now = false;  // a held long-poll timed out: answer with the current value

  const std::string* Header(const std::string& lower_name) const;
  const std::string* Query(const std::string& name) const;
};

struct MockReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // GCP wait_for_change: nothing to say yet; hold the request until the value changes
  // (the server asks again after every flip) or `hold_for` passes.
  bool hold = false;
  Duration hold_for{0};
};

class MockService {
 public:
  virtual ~MockService() = default;
  // May annotate `request` (e.g. pin the ETag a held long-poll waits on).
  virtual MockReply Handle(MockRequest& request) = 0;
  virtual void Preempt(const PreemptSpec& spec) = 0;
  virtual void Clear() = 0;
  virtual bool preempted() const = 0;
  virtual std::vector<std::string> acknowledged() const { return {}; }
};

std::unique_ptr<MockService> MakeMockService(MockProvider provider, const MockOptions& options);

// Shared helpers for the services.
MockReply TextReply(int status, std::string body, std::string content_type = "text/plain");
// "/a/b/" -> "/a/b".
std::string StripSlash(std::string path);
// A random token of `length` characters from [A-Za-z0-9_-].
std::string RandomToken(std::size_t length);
// A random GUID in Azure's upper-case form.
std::string RandomGuid();

}  // namespace spotvisor::mock

namespace spotvisor::mock {

// One per file: mock_imds_service.cpp (aws, alibaba), mock_gcp_service.cpp,
// mock_azure_service.cpp.
std::unique_ptr<MockService> MakeImdsMockService(MockProvider provider, const MockOptions& options);
std::unique_ptr<MockService> MakeGcpMockService(const MockOptions& options);
std::unique_ptr<MockService> MakeAzureMockService(const MockOptions& options);

}  // namespace spotvisor::mock
