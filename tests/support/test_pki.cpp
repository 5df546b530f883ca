// TestPki: P-256 keys (fast to make), certificates valid for two days, each step a real
// `openssl` run whose output is shown when it fails.
#include "support/test_pki.hpp"

#include <sys/stat.h>

#include <stdexcept>
#include <vector>

namespace spotvisor::testing {
namespace {

void Openssl(const std::filesystem::path& dir, std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/openssl");
  const std::filesystem::path out = dir / "openssl.out";
  const Spawned s = Spawn(args, out);
  if (WaitExit(s.pid, std::chrono::seconds(30)) != 0) {
    throw std::runtime_error("openssl " + args.at(1) + " failed: " + ReadFile(out));
  }
}

}  // namespace

TestPki::TestPki() {
  MakeCa("ca");
  MakeCa("other-ca");
  MakeLeaf("server", "/CN=localhost",
           "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
           // etcd's gateway dials its own listener with the server certificate as a client.
           "extendedKeyUsage=serverAuth,clientAuth\n");
  MakeLeaf("ip-only", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  MakeLeaf("client", "/CN=spotvisor-client", "extendedKeyUsage=clientAuth\n");
}

void TestPki::MakeCa(const std::string& name) {
  Openssl(dir_.path(), {"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                        (dir_ / (name + ".key")).string(), "-out", (dir_ / (name + ".pem")).string(), "-days", "2",
                        "-subj", "/CN=spotvisor-test-" + name, "-addext", "basicConstraints=critical,CA:TRUE",
                        "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
}

void TestPki::MakeLeaf(const std::string& name, const std::string& subject, const std::string& extensions) {
  const auto key = dir_ / (name + ".key");
  const auto csr = dir_ / (name + ".csr");
  const auto ext = dir_ / (name + ".ext");
  WriteFile(ext, extensions);
  Openssl(dir_.path(), {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                        key.string(), "-out", csr.string(), "-subj", subject});
  Openssl(dir_.path(), {"x509", "-req", "-in", csr.string(), "-CA", ca().string(), "-CAkey", (dir_ / "ca.key").string(),
                        "-CAcreateserial", "-CAserial", (dir_ / "ca.srl").string(), "-out",
                        (dir_ / (name + ".pem")).string(), "-days", "2", "-extfile", ext.string()});
  chmod(key.c_str(), 0600);
}

}  // namespace spotvisor::testing
