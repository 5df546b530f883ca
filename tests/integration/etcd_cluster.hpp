// Real etcd members for the etcd client's tests: one or three `etcd` processes on loopback
// ports found free by binding 127.0.0.1:0, data dirs in a TempDir, killed by pid (and by
// the parent-death signal should the test binary die first); https client URLs on request.
// Test thread only.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "spotvisor/http/tls.hpp"
#include "support/test_support.hpp"

namespace spotvisor::testing {

// A port nothing listens on right now, below the kernel's ephemeral range (so that no other
// process is handed it by bind(0) or for an outgoing connection before etcd binds it).
int FreeLoopbackPort();

// TLS on the members' client URLs (https://127.0.0.1:P; peers stay plain on loopback).
struct EtcdTls {
  std::filesystem::path cert;     // the members' certificate (--cert-file)
  std::filesystem::path key;      // its key (--key-file)
  std::filesystem::path ca;       // --trusted-ca-file: the CA of client certificates
  bool client_cert_auth = false;  // --client-cert-auth: a client must present a certificate
  http::TlsFiles client;          // what the readiness check and etcdctl present
};

class EtcdCluster {
 public:
  // Starts `members` members forming one cluster and waits until each one serves reads.
  explicit EtcdCluster(int members, std::optional<EtcdTls> tls = std::nullopt);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "http://127.0.0.1:P" (https with TLS) of every member, in order.
  std::vector<std::string> ClientUrls() const;
  std::string ClientUrl(int member) const;
  // SIGKILL, then reaped.
  void Kill(int member);
  // Starts a killed member again on its ports and data dir; waits until it serves reads
  // when `wait` (a lone member of three cannot: it has no quorum).
  void Restart(int member, bool wait = true);
  // True once the member answers a read within the deadline.
  bool WaitServing(int member, std::chrono::milliseconds timeout = std::chrono::seconds(20)) const;
  // etcd's own output, for failure messages.
  std::string Output(int member) const;
  // Runs etcdctl against member 0 with `args`; returns its exit code, output in `*out`.
  int Etcdctl(const std::vector<std::string>& args, std::string* out = nullptr) const;

 private:
  struct MemberProcess {
    std::string name;  // m0, m1, ...
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;  // -1: not running
    bool started_once = false;
  };
  void Launch(int member);

  TempDir dir_;                         // data dirs and output files
  std::optional<EtcdTls> tls_;          // https client URLs when set
  std::string token_;                   // --initial-cluster-token, unique per cluster
  std::vector<MemberProcess> members_;  // in order
};

}  // namespace spotvisor::testing
