// The etcd client over TLS against a real etcd member with https client URLs and a
// throwaway CA (test_pki.hpp): requests and a watch with mutual TLS, a member that wants a
// client certificate refusing a client without one, a wrong CA or host name failing the
// handshake with the reason, and password auth on top of TLS.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <string>

#include "integration/etcd_cluster.hpp"
#include "integration/etcd_test_util.hpp"
#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/watch.hpp"
#include "support/test_pki.hpp"

namespace spotvisor::etcd {
namespace {

using namespace etcd_test;  // NOLINT(google-build-using-namespace): the tests' own helpers
using testing::EtcdCluster;
using testing::EtcdTls;
using testing::TestPki;

// A member whose certificate is `pki`'s server certificate; with `mutual`, it wants a client
// certificate signed by `pki`'s CA, and its own checks present the client certificate.
EtcdTls MemberTls(const TestPki& pki, bool mutual) {
  EtcdTls tls{pki.server_cert(), pki.server_key(), pki.ca(), mutual, {pki.ca(), {}, {}}};
  if (mutual) tls.client = {pki.ca(), pki.client_cert(), pki.client_key()};
  return tls;
}

Result<std::unique_ptr<Client>> Make(boost::asio::io_context& io, std::vector<std::string> urls, http::TlsFiles tls,
                                     std::string credentials = "") {
  ClientOptions options{std::move(urls), std::move(credentials), seconds(2)};
  options.tls = std::move(tls);
  return Client::Create(io, SystemClock(), options);
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(EtcdTls, PutGetTxnAndAWatchWorkOverMutualTls) {
  TestPki pki;
  EtcdCluster cluster(1, MemberTls(pki, true));
  ASSERT_EQ(cluster.ClientUrl(0).rfind("https://127.0.0.1:", 0), 0U);
  boost::asio::io_context io;
  auto c = Make(io, cluster.ClientUrls(), {pki.ca(), pki.client_cert(), pki.client_key()});
  ASSERT_TRUE(c) << c.error().message;
  auto first = Put(io, **c, "/tls/a", "1");
  ASSERT_TRUE(first) << first.error().message;
  Seen seen;
  Watch watch(**c, {"/tls/", true, first->header.revision, false}, seen.Handlers());
  watch.Start();

  TxnRequest txn;
  txn.compare.push_back(Compare::Absent("/tls/b"));
  txn.success.emplace_back(PutRequest{"/tls/b", "2"});
  auto won = Await<TxnResponse>(io, [&](auto done) { (*c)->Txn(txn, done); });
  ASSERT_TRUE(won) << won.error().message;
  EXPECT_TRUE(won->succeeded);
  auto lost = Await<TxnResponse>(io, [&](auto done) { (*c)->Txn(txn, done); });
  ASSERT_TRUE(lost) << lost.error().message;
  EXPECT_FALSE(lost->succeeded);
  auto read = Get(io, **c, "/tls/", true);
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_EQ(read->kvs.size(), 2U);
  EXPECT_EQ(read->kvs[1].value, "2");

  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 2; })) << seen.events.size();
  EXPECT_EQ(seen.events[0].kv.key, "/tls/a");
  EXPECT_EQ(seen.events[1].kv.key, "/tls/b");
  EXPECT_EQ(seen.losses, 0);

  // The member's certificate names localhost too: a host name is checked (and sent as SNI).
  const std::string by_name = "https://localhost:" + cluster.ClientUrl(0).substr(cluster.ClientUrl(0).rfind(':') + 1);
  auto named = Make(io, {by_name}, {pki.ca(), pki.client_cert(), pki.client_key()});
  ASSERT_TRUE(named) << named.error().message;
  auto again = Get(io, **named, "/tls/a");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->kvs.at(0).value, "1");
}

TEST(EtcdTls, AMemberThatWantsAClientCertificateRefusesAClientWithoutOne) {
  TestPki pki;
  EtcdCluster cluster(1, MemberTls(pki, true));
  boost::asio::io_context io;
  auto c = Make(io, cluster.ClientUrls(), {pki.ca(), {}, {}});
  ASSERT_TRUE(c) << c.error().message;
  auto refused = Get(io, **c, "/tls/a");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(Has(refused.error().message, cluster.ClientUrl(0))) << refused.error().message;
  EXPECT_TRUE(Has(refused.error().message, "alert")) << refused.error().message;
  EXPECT_TRUE(Has(refused.error().message, "(no client certificate was given; does the server want one?)"))
      << refused.error().message;

  Seen seen;
  Watch watch(**c, {"/tls/", true, 0, false}, seen.Handlers());
  watch.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return seen.losses >= 1; }));
  EXPECT_TRUE(seen.events.empty());
}

TEST(EtcdTls, AWrongCaFailsTheHandshakeNamingTheUrlAndTheReason) {
  TestPki pki;
  EtcdCluster cluster(1, MemberTls(pki, false));
  boost::asio::io_context io;
  auto wrong = Make(io, cluster.ClientUrls(), {pki.other_ca(), {}, {}});
  ASSERT_TRUE(wrong) << wrong.error().message;
  auto refused = Get(io, **wrong, "/x");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "etcd read key /x: no endpoint answered (" + cluster.ClientUrl(0) +
                                         ": TLS handshake: certificate verify failed: unable to get local issuer "
                                         "certificate)");

  // No CA file: the system's trust store, which does not know the throwaway CA either.
  auto system = Make(io, cluster.ClientUrls(), {});
  ASSERT_TRUE(system) << system.error().message;
  auto unknown = Get(io, **system, "/x");
  ASSERT_FALSE(unknown);
  EXPECT_TRUE(Has(unknown.error().message, cluster.ClientUrl(0) + ": TLS handshake: certificate verify failed"))
      << unknown.error().message;

  auto right = Make(io, cluster.ClientUrls(), {pki.ca(), {}, {}});
  ASSERT_TRUE(right) << right.error().message;
  EXPECT_TRUE(Get(io, **right, "/x"));
}

TEST(EtcdTls, ACertificateForAnotherHostFailsTheHandshake) {
  TestPki pki;
  EtcdTls tls = MemberTls(pki, false);
  tls.cert = pki.ip_only_cert();
  tls.key = pki.ip_only_key();
  EtcdCluster cluster(1, tls);
  const std::string url = cluster.ClientUrl(0);
  const std::string by_name = "https://localhost:" + url.substr(url.rfind(':') + 1);
  boost::asio::io_context io;
  auto c = Make(io, {by_name}, {pki.ca(), {}, {}});
  ASSERT_TRUE(c) << c.error().message;
  auto refused = Get(io, **c, "/x");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(Has(refused.error().message, by_name + ": TLS handshake: certificate verify failed: hostname mismatch"))
      << refused.error().message;
}

TEST(EtcdTls, PasswordAuthWorksOverTls) {
  TestPki pki;
  EtcdCluster cluster(1, MemberTls(pki, false));
  std::string out;
  ASSERT_EQ(cluster.Etcdctl({"user", "add", "root:s3cret"}, &out), 0) << out;
  ASSERT_EQ(cluster.Etcdctl({"auth", "enable"}, &out), 0) << out;
  testing::TempDir dir;
  const auto file = dir / "etcd-credentials";
  testing::WriteFile(file, "root:s3cret\n");
  chmod(file.c_str(), 0600);

  boost::asio::io_context io;
  auto c = Make(io, cluster.ClientUrls(), {pki.ca(), {}, {}}, file.string());
  ASSERT_TRUE(c) << c.error().message;
  auto put = Put(io, **c, "/a/x", "1");
  ASSERT_TRUE(put) << put.error().message;
  Seen seen;
  Watch watch(**c, {"/a/", true, put->header.revision, false}, seen.Handlers());
  watch.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 1; }));

  auto anonymous = Make(io, cluster.ClientUrls(), {pki.ca(), {}, {}});
  ASSERT_TRUE(anonymous);
  auto refused = Get(io, **anonymous, "/a/x");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(Has(refused.error().message, "user name is empty")) << refused.error().message;
}

TEST(EtcdClientOptions, MixedSchemesAndTlsFilesForHttpAreRefused) {
  TestPki pki;
  boost::asio::io_context io;
  auto mixed = Make(io, {"https://10.0.0.5:2379", "http://10.0.0.6:2379"}, {pki.ca(), {}, {}});
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.error().message,
            "etcd endpoints mix http (http://10.0.0.6:2379) and https (https://10.0.0.5:2379); use https:// for all");
  auto plain = Make(io, {"http://10.0.0.5:2379"}, {pki.ca(), {}, {}});
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().message, "etcd: TLS files are given but the endpoints are http:// (http://10.0.0.5:2379)");
  auto no_ca = Make(io, {"https://10.0.0.5:2379"}, {pki.dir() / "absent.pem", {}, {}});
  ASSERT_FALSE(no_ca);
  EXPECT_EQ(no_ca.error().message, "etcd TLS: cannot read the CA file " + (pki.dir() / "absent.pem").string() +
                                       " (No such file or directory)");
  chmod(pki.client_key().c_str(), 0644);
  auto open_key = Make(io, {"https://10.0.0.5:2379"}, {pki.ca(), pki.client_cert(), pki.client_key()});
  ASSERT_FALSE(open_key);
  EXPECT_EQ(open_key.error().message, "etcd TLS: refusing the TLS key file " + pki.client_key().string() +
                                          ": it is accessible by group or others (mode 0644); run chmod 600 " +
                                          pki.client_key().string());
  chmod(pki.client_key().c_str(), 0600);
  auto other_key = Make(io, {"https://10.0.0.5:2379"}, {pki.ca(), pki.client_cert(), pki.server_key()});
  ASSERT_FALSE(other_key);
  EXPECT_EQ(other_key.error().message, "etcd TLS: the TLS key file " + pki.server_key().string() +
                                           " does not belong to the certificate in " + pki.client_cert().string());
  auto ok = Make(io, {"https://10.0.0.5:2379"}, {pki.ca(), pki.client_cert(), pki.client_key()});
  EXPECT_TRUE(ok) << ok.error().message;
}

}  // namespace
}  // namespace spotvisor::etcd
