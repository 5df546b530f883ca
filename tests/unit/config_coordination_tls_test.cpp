// coordination.tls: the keys are read, printed and checked when the job file is loaded
// (the files themselves too, made by a throwaway CA); every mistake names file:line:key.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "spotvisor/config/loader.hpp"
#include "support/test_pki.hpp"
#include "support/test_support.hpp"

namespace spotvisor::config {
namespace {

using spotvisor::testing::TempDir;
using spotvisor::testing::TestPki;
using spotvisor::testing::WriteFile;

const std::string kHead = "job:\n  command: [\"/bin/true\"]\ncoordination:\n";  // line 4 is the first key

// Loads `yaml` as the file job.yaml in `dir` and finalizes it.
Result<JobConfig> Load(const std::filesystem::path& dir, const std::string& yaml) {
  WriteFile(dir / "job.yaml", yaml);
  auto job = LoadJobFile(dir / "job.yaml");
  if (!job) return job;
  if (Status s = Finalize(*job); !s) return s.error();
  return job;
}

TEST(ConfigCoordinationTls, MutualTlsFilesAreReadCheckedAndPrinted) {
  TestPki pki;
  auto job = Load(pki.dir(), kHead +
                                 "  etcd: [\"https://10.0.0.5:2379\", \"https://etcd-1.example:2379\"]\n"
                                 "  tls:\n    ca: ca.pem\n    cert: client.pem\n    key: client.key\n");
  ASSERT_TRUE(job) << job.error().message;
  const auto& tls = job->coordination.tls;
  EXPECT_EQ(tls.ca, pki.ca());  // relative to the job file
  EXPECT_EQ(tls.cert, pki.client_cert());
  EXPECT_EQ(tls.key, pki.client_key());
  const std::string yaml = ToYaml(*job);
  EXPECT_NE(yaml.find("  tls:\n    ca: " + pki.ca().string() + "\n    cert: " + pki.client_cert().string() +
                      "\n    key: " + pki.client_key().string()),
            std::string::npos)
      << yaml;
  WriteFile(pki.dir() / "printed.yaml", yaml);
  auto again = LoadJobFile(pki.dir() / "printed.yaml");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->coordination.tls.key, pki.client_key());
}

TEST(ConfigCoordinationTls, HttpsWithoutTlsUsesTheSystemTrustStore) {
  TempDir dir;
  auto job = Load(dir.path(), kHead + "  etcd: [\"https://10.0.0.5:2379\"]\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_FALSE(job->coordination.tls.set());
  EXPECT_NE(ToYaml(*job).find("# coordination.tls: not set (https members: the system's trust store)"),
            std::string::npos)
      << ToYaml(*job);
}

TEST(ConfigCoordinationTls, MistakesNameFileLineAndKey) {
  TestPki pki;
  const std::string file = (pki.dir() / "job.yaml").string();
  WriteFile(pki.dir() / "garbage.pem", "not a certificate\n");
  const std::string https = "  etcd: [\"https://10.0.0.5:2379\"]\n  tls:\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  etcd: [\"https://10.0.0.5:2379\", \"http://10.0.0.6:2379\"]\n",
       file + ":4: coordination.etcd: mixes http:// and https:// members; use https:// for all of them"},
      {"  etcd: [\"http://10.0.0.5:2379\"]\n  tls:\n    ca: ca.pem\n",
       file + ":5: coordination.tls: is set but the etcd members are http://; write them as https://"},
      {https + "    cert: client.pem\n",
       file + ":6: coordination.tls.cert: needs coordination.tls.key too: a client certificate and its private key"},
      {https + "    key: client.key\n", file + ":6: coordination.tls.key: needs coordination.tls.cert too"},
      {https + "    ca: absent.pem\n", file + ":6: coordination.tls.ca: cannot read the CA file " +
                                           (pki.dir() / "absent.pem").string() + " (No such file or directory)"},
      {https + "    ca: garbage.pem\n", file + ":6: coordination.tls.ca: the CA file " +
                                            (pki.dir() / "garbage.pem").string() + " holds no PEM certificate"},
      {https + "    cert: client.pem\n    key: server.key\n",
       file + ":7: coordination.tls.key: the TLS key file " + pki.server_key().string() +
           " does not belong to the certificate in " + pki.client_cert().string()},
      {https + "    cert: client.pem\n    key: ca.pem\n",
       file + ":7: coordination.tls.key: refusing the TLS key file " + pki.ca().string() +
           ": it is accessible by group or others"},
      {"  etcd: [\"https://10.0.0.5:2379\"]\n  tls: {ca: ca.pem, crt: client.pem}\n", "coordination.tls.crt"},
  };
  for (const auto& [yaml, expected] : cases) {
    auto job = Load(pki.dir(), kHead + yaml);
    ASSERT_FALSE(job) << yaml;
    EXPECT_NE(job.error().message.find(expected), std::string::npos) << yaml << " -> " << job.error().message;
  }
}

TEST(ConfigCoordinationTls, AWorldReadableKeyIsRefusedWithoutShowingIt) {
  TestPki pki;
  chmod(pki.client_key().c_str(), 0644);
  auto job = Load(pki.dir(), kHead +
                                 "  etcd: [\"https://10.0.0.5:2379\"]\n"
                                 "  tls:\n    ca: ca.pem\n    cert: client.pem\n    key: client.key\n");
  ASSERT_FALSE(job);
  EXPECT_EQ(job.error().message,
            (pki.dir() / "job.yaml").string() + ":8: coordination.tls.key: refusing the TLS key file " +
                pki.client_key().string() + ": it is accessible by group or others (mode 0644); run chmod 600 " +
                pki.client_key().string());
  EXPECT_EQ(job.error().message.find("PRIVATE KEY"), std::string::npos);
}

}  // namespace
}  // namespace spotvisor::config
