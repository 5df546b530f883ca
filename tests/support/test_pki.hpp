// A throwaway certificate authority for the TLS tests, made with the `openssl` command in a
// TempDir: a CA, a server certificate for 127.0.0.1 and localhost, one for 127.0.0.1 alone,
// a client certificate, and a second CA that signed none of them. Keys are mode 0600.
// Test thread only.
#pragma once

#include <filesystem>
#include <string>

#include "support/test_support.hpp"

namespace spotvisor::testing {

class TestPki {
 public:
  // Runs openssl; throws std::runtime_error with its output when a step fails.
  TestPki();

  std::filesystem::path ca() const { return dir_ / "ca.pem"; }               // signed both certificates
  std::filesystem::path other_ca() const { return dir_ / "other-ca.pem"; }   // signed neither
  std::filesystem::path server_cert() const { return dir_ / "server.pem"; }  // SAN IP:127.0.0.1, DNS:localhost
  std::filesystem::path server_key() const { return dir_ / "server.key"; }
  std::filesystem::path ip_only_cert() const { return dir_ / "ip-only.pem"; }  // SAN IP:127.0.0.1 alone
  std::filesystem::path ip_only_key() const { return dir_ / "ip-only.key"; }
  std::filesystem::path client_cert() const { return dir_ / "client.pem"; }  // CN=spotvisor-client
  std::filesystem::path client_key() const { return dir_ / "client.key"; }
  const std::filesystem::path& dir() const { return dir_.path(); }

 private:
  void MakeCa(const std::string& name);
  void MakeLeaf(const std::string& name, const std::string& subject, const std::string& extensions);

  TempDir dir_;  // every file, removed with it
};

}  // namespace spotvisor::testing
