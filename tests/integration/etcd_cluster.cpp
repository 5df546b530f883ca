// EtcdCluster: launches Debian's /usr/bin/etcd with short raft timings so that a killed
// leader is replaced within about a second, and checks readiness through the gateway.
#include "integration/etcd_cluster.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>

#include "spotvisor/etcd/client.hpp"

namespace spotvisor::testing {

namespace {

// Binds 127.0.0.1:`port` (0: any) and returns the bound port; -1 when it cannot.
int BindLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

// The low end of the kernel's ephemeral range (32768 by default).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return in ? low : 32768;
}

}  // namespace

// A port below the kernel's ephemeral range, which bind(0) and every outgoing connection
// draw from: once checked free here, no other process is handed it before etcd binds it (or
// while a member is down and comes back on it). With bind(0) a test beside this one took
// the port in between once ("bind: address already in use"). Never the same port twice in
// one test process: a port checked free stays free until its etcd binds it, so two draws of
// one cluster could get the same one (twice in the same cluster's peer URLs: "has duplicate
// url", once in a fresh-clone run).
int FreeLoopbackPort() {
  static std::mt19937 rng(std::random_device{}());
  static std::set<int> handed_out;
  const int below = EphemeralLow();
  const int low = std::max(1024, below - 12000);
  for (int tries = 0; tries < 200 && below - low >= 1000; ++tries) {
    const int port = std::uniform_int_distribution<int>(low, below - 1)(rng);
    if (handed_out.count(port) == 0 && BindLoopback(port) == port) {
      handed_out.insert(port);
      return port;
    }
  }
  const int any = BindLoopback(0);
  if (any < 0) throw std::runtime_error("cannot bind 127.0.0.1:0");
  return any;
}

EtcdCluster::EtcdCluster(int members, std::optional<EtcdTls> tls)
    : tls_(std::move(tls)),
      token_("spotvisor-test-" + std::to_string(getpid()) + "-" + std::to_string(FreeLoopbackPort())) {
  for (int i = 0; i < members; ++i) {
    members_.push_back({"m" + std::to_string(i), FreeLoopbackPort(), FreeLoopbackPort(), -1, false});
  }
  for (int i = 0; i < members; ++i) Launch(i);
  for (int i = 0; i < members; ++i) {
    if (!WaitServing(i)) throw std::runtime_error("etcd member " + std::to_string(i) + " never served:\n" + Output(i));
  }
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) Kill(i);
}

std::string EtcdCluster::ClientUrl(int member) const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(members_.at(member).client_port);
}

std::vector<std::string> EtcdCluster::ClientUrls() const {
  std::vector<std::string> urls;
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) urls.push_back(ClientUrl(i));
  return urls;
}

void EtcdCluster::Launch(int member) {
  auto& m = members_.at(member);
  std::string initial;
  for (const auto& other : members_) {
    initial += (initial.empty() ? "" : ",") + other.name + "=http://127.0.0.1:" + std::to_string(other.peer_port);
  }
  const std::string client = ClientUrl(member);
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  std::vector<std::string> argv{
      "/usr/bin/setpriv",
      "--pdeathsig",
      "KILL",
      "/usr/bin/etcd",
      "--name",
      m.name,
      "--data-dir",
      (dir_ / (m.name + ".data")).string(),
      "--listen-client-urls",
      client,
      "--advertise-client-urls",
      client,
      "--listen-peer-urls",
      peer,
      "--initial-advertise-peer-urls",
      peer,
      "--initial-cluster",
      initial,
      "--initial-cluster-token",
      token_,
      "--initial-cluster-state",
      m.started_once ? "existing" : "new",
      "--heartbeat-interval",
      "50",
      "--election-timeout",
      "500",
      "--pre-vote",  // etcd's advice: a member back from a partition does not unseat the leader
      "--log-level",
      "warn"};
  if (tls_) {
    argv.insert(argv.end(), {"--cert-file", tls_->cert.string(), "--key-file", tls_->key.string()});
    if (tls_->client_cert_auth) {
      argv.insert(argv.end(), {"--client-cert-auth", "--trusted-ca-file", tls_->ca.string()});
    }
  }
  const Spawned s = Spawn(argv, dir_ / (m.name + ".out"));
  m.pid = s.pid;
  m.started_once = true;
}

void EtcdCluster::Kill(int member) {
  auto& m = members_.at(member);
  if (m.pid < 0) return;
  kill(m.pid, SIGKILL);
  waitpid(m.pid, nullptr, 0);
  m.pid = -1;
}

void EtcdCluster::Restart(int member, bool wait) {
  Launch(member);
  if (wait && !WaitServing(member)) {
    throw std::runtime_error("etcd member " + std::to_string(member) + " never served again:\n" + Output(member));
  }
}

bool EtcdCluster::WaitServing(int member, std::chrono::milliseconds timeout) const {
  return WaitUntil(
      [&] {
        boost::asio::io_context io;
        etcd::ClientOptions options{{ClientUrl(member)}, "", std::chrono::milliseconds(500)};
        if (tls_) options.tls = tls_->client;
        auto client = etcd::Client::Create(io, SystemClock(), options);
        if (!client) throw std::runtime_error(client.error().message);
        std::optional<bool> ok;
        (*client)->Range({"ready-check"}, [&](Result<etcd::RangeResponse> r) { ok = r.ok(); });
        io.run_for(std::chrono::seconds(1));
        return ok.value_or(false);
      },
      timeout);
}

std::string EtcdCluster::Output(int member) const { return ReadFile(dir_ / (members_.at(member).name + ".out")); }

int EtcdCluster::Etcdctl(const std::vector<std::string>& args, std::string* out) const {
  std::vector<std::string> argv{"/usr/bin/etcdctl", "--endpoints", ClientUrl(0)};
  if (tls_) {
    const auto& c = tls_->client;
    if (!c.ca.empty()) argv.insert(argv.end(), {"--cacert", c.ca.string()});
    if (!c.cert.empty()) argv.insert(argv.end(), {"--cert", c.cert.string(), "--key", c.key.string()});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  TempDir tmp;
  const Spawned s = Spawn(argv, tmp / "out.txt", {{"ETCDCTL_API", "3"}});
  const int code = WaitExit(s.pid, std::chrono::seconds(20));
  if (out != nullptr) *out = ReadFile(tmp / "out.txt");
  return code;
}

}  // namespace spotvisor::testing
