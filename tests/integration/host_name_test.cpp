// The names a node advertises to its peers, against the system's own `hostname` and
// `hostname -f` (the canonical name is what a Kubernetes pod's peers resolve).
#include "spotvisor/util/host_name.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

std::string Output(const char* command) {
  std::string out;
  FILE* pipe = popen(command, "r");
  if (pipe == nullptr) return out;
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

TEST(HostName, ShortIsWhatHostnameSays) {
  const std::string expected = Output("hostname");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(spotvisor::util::ShortHostName(), expected);
}

TEST(HostName, CanonicalIsWhatHostnameFSays) {
  const std::string expected = Output("hostname -f 2>/dev/null || hostname");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(spotvisor::util::CanonicalHostName(), expected);
}

}  // namespace
