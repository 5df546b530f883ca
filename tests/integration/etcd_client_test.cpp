// The etcd client against one real etcd member on loopback (etcd_cluster.hpp): key-value
// requests, create-only and compare-and-swap transactions, leases and their keepalives,
// watches across a restart and a compaction, auth from a password file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>

#include "integration/etcd_cluster.hpp"
#include "integration/etcd_test_util.hpp"
#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/lease_keeper.hpp"
#include "spotvisor/etcd/watch.hpp"

namespace spotvisor::etcd {
namespace {

using namespace etcd_test;  // NOLINT(google-build-using-namespace): the tests' own helpers
using testing::EtcdCluster;
TEST(EtcdClient, PutRangeDeleteAndPrefix) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls());
  auto first = Put(io, *c, "/job/a", "1");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(first->prev_kv.has_value());
  auto second = Put(io, *c, "/job/a", std::string("2\0\xff", 3));
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->prev_kv.has_value());
  EXPECT_EQ(second->prev_kv->value, "1");
  ASSERT_TRUE(Put(io, *c, "/job/b", "3"));
  ASSERT_TRUE(Put(io, *c, "/jobs", "not under /job/"));

  auto one = Get(io, *c, "/job/a");
  ASSERT_TRUE(one) << one.error().message;
  ASSERT_EQ(one->kvs.size(), 1U);
  EXPECT_EQ(one->kvs[0].value, std::string("2\0\xff", 3));
  EXPECT_EQ(one->kvs[0].version, 2);
  auto prefix = Get(io, *c, "/job/", true);
  ASSERT_TRUE(prefix);
  ASSERT_EQ(prefix->kvs.size(), 2U);
  EXPECT_EQ(prefix->kvs[0].key, "/job/a");
  EXPECT_EQ(prefix->kvs[1].key, "/job/b");
  EXPECT_EQ(prefix->count, 2);

  auto old = Await<RangeResponse>(io, [&](auto done) { c->Range({"/job/a", "", first->header.revision}, done); });
  ASSERT_TRUE(old);
  EXPECT_EQ(old->kvs.at(0).value, "1");
  auto counted = Await<RangeResponse>(io, [&](auto done) {
    c->Range({"/job/", PrefixEnd("/job/"), 0, 0, true}, done);
  });
  ASSERT_TRUE(counted);
  EXPECT_EQ(counted->count, 2);
  EXPECT_TRUE(counted->kvs.empty());

  auto deleted = Await<DeleteRangeResponse>(io, [&](auto done) {
    c->DeleteRange({"/job/", PrefixEnd("/job/"), true}, done);
  });
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->deleted, 2);
  EXPECT_EQ(deleted->prev_kvs.size(), 2U);
  auto gone = Get(io, *c, "/job/", true);
  ASSERT_TRUE(gone);
  EXPECT_TRUE(gone->kvs.empty());
  EXPECT_EQ(Get(io, *c, "/jobs")->kvs.size(), 1U);

  // A gateway error names the operation, the member and etcd's words.
  auto future = Await<RangeResponse>(io, [&](auto done) { c->Range({"/job/a", "", 1000000}, done); });
  ASSERT_FALSE(future);
  EXPECT_EQ(future.error().message, "etcd read key /job/a at revision 1000000 at " + cluster.ClientUrl(0) +
                                        ": etcdserver: mvcc: required revision is a future revision (code 11)");
}

TEST(EtcdClient, CreateOnlyTxnSucceedsOnceThenFails) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls());
  auto claim = [&](const std::string& who) {
    TxnRequest txn;
    txn.compare.push_back(Compare::Absent("/job/rank/0"));
    txn.success.emplace_back(PutRequest{"/job/rank/0", who});
    txn.failure.emplace_back(RangeRequest{"/job/rank/0"});
    return Await<TxnResponse>(io, [&](auto done) { c->Txn(txn, done); });
  };
  auto won = claim("node-a");
  ASSERT_TRUE(won) << won.error().message;
  EXPECT_TRUE(won->succeeded);
  ASSERT_EQ(won->responses.size(), 1U);
  EXPECT_TRUE(std::holds_alternative<PutResponse>(won->responses[0]));
  auto lost = claim("node-b");
  ASSERT_TRUE(lost) << lost.error().message;  // the answer has no `succeeded` field at all
  EXPECT_FALSE(lost->succeeded);
  const auto& holder = std::get<RangeResponse>(lost->responses.at(0));
  EXPECT_EQ(holder.kvs.at(0).value, "node-a");
  EXPECT_EQ(Get(io, *c, "/job/rank/0")->kvs.at(0).value, "node-a");
}

TEST(EtcdClient, CompareAndSwapCounterLosesNoIncrementWithTwoClients) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto a = Connect(io, cluster.ClientUrls());
  auto b = Connect(io, cluster.ClientUrls());
  ASSERT_TRUE(Put(io, *a, "/job/failures", "0"));
  constexpr int kEach = 25;
  int done = 0;
  int conflicts = 0;
  std::string trouble;
  // read, then put value+1 only if mod_revision is still what was read; on a conflict, again.
  std::function<void(Client&, int)> increment = [&](Client& c, int left) {
    if (left == 0) return void(++done);
    c.Range({"/job/failures"}, [&, left](Result<RangeResponse> r) {
      if (!r) return void(trouble = r.error().message);
      const auto& kv = r->kvs.at(0);
      TxnRequest txn;
      txn.compare.push_back(Compare::ModRevision(kv.key, Compare::Result::kEqual, kv.mod_revision));
      txn.success.emplace_back(PutRequest{kv.key, std::to_string(std::stoi(kv.value) + 1)});
      c.Txn(txn, [&, left](Result<TxnResponse> t) {
        if (!t) return void(trouble = t.error().message);
        if (!t->succeeded) ++conflicts;
        increment(c, t->succeeded ? left - 1 : left);
      });
    });
  };
  increment(*a, kEach);
  increment(*b, kEach);
  ASSERT_TRUE(RunUntil(
      io, [&] { return done == 2 || !trouble.empty(); }, seconds(30)))
      << done;
  ASSERT_EQ(trouble, "");
  EXPECT_EQ(Get(io, *a, "/job/failures")->kvs.at(0).value, std::to_string(2 * kEach)) << conflicts << " conflicts";
}

TEST(EtcdLease, KeepAliveKeepsTheKeyAndStoppingItLetsTheKeyVanish) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls());
  auto lease = Await<LeaseGrantResponse>(io, [&](auto done) { c->LeaseGrant(2, done); });
  ASSERT_TRUE(lease) << lease.error().message;
  ASSERT_EQ(lease->ttl, 2);
  ASSERT_TRUE(Put(io, *c, "/job/members/a", "here", lease->id));
  Seen seen;
  Watch watch(*c, {"/job/members/", true, 0, true}, seen.Handlers());
  watch.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return seen.connects == 1; }));

  std::optional<Error> lost;
  auto keeper = std::make_unique<LeaseKeeper>(*c, lease->id, lease->ttl, [&](Error e) { lost = e; });
  keeper->Start();
  // A keeper that renews nothing (its process stopped, say) knows its lease may be gone once
  // the TTL has passed, before anything tells it so.
  LeaseKeeper stalled(*c, lease->id, 1, [](Error) {});
  EXPECT_TRUE(stalled.Fresh());
  // Twice the TTL: without the keeper the key would be gone.
  RunUntil(
      io, [] { return false; }, milliseconds(4000));
  EXPECT_FALSE(lost.has_value()) << lost->message;
  EXPECT_GE(keeper->renewals(), 4U);
  EXPECT_TRUE(keeper->Fresh());
  EXPECT_FALSE(stalled.Fresh());
  ASSERT_EQ(Get(io, *c, "/job/members/a")->kvs.size(), 1U);
  auto ttl = Await<LeaseTimeToLiveResponse>(io, [&](auto done) { c->LeaseTimeToLive(lease->id, true, done); });
  ASSERT_TRUE(ttl);
  EXPECT_EQ(ttl->keys, std::vector<std::string>{"/job/members/a"});
  EXPECT_TRUE(seen.events.empty());

  keeper.reset();
  // etcd expires the lease on its own schedule, which lags on a loaded machine (3.3 s for a
  // 2 s TTL seen in CI): the test asks that the key goes, not how fast etcd is.
  ASSERT_TRUE(RunUntil(
      io, [&] { return !seen.events.empty(); }, seconds(10)))
      << "the key outlived its lease by 8 s";
  EXPECT_EQ(seen.events.at(0).type, Event::Type::kDelete);
  EXPECT_EQ(seen.events.at(0).kv.key, "/job/members/a");
  ASSERT_TRUE(seen.events.at(0).prev_kv.has_value());
  EXPECT_EQ(seen.events.at(0).prev_kv->value, "here");
  EXPECT_TRUE(Get(io, *c, "/job/members/a")->kvs.empty());

  // A keeper of the lapsed lease reports it: etcd answers its keepalive without a TTL.
  LeaseKeeper late(*c, lease->id, 2, [&](Error e) { lost = e; });
  late.Start();
  ASSERT_TRUE(RunUntil(
      io, [&] { return lost.has_value(); }, seconds(5)));
  EXPECT_EQ(lost->message, "etcd lease " + std::to_string(lease->id) +
                               " lost: etcd answered a keepalive without TTL: the lease expired");
  EXPECT_FALSE(late.Fresh());
}

TEST(EtcdLease, RevokeEndsTheLeaseAtOnce) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls());
  auto lease = Await<LeaseGrantResponse>(io, [&](auto done) { c->LeaseGrant(30, done); });
  ASSERT_TRUE(lease);
  ASSERT_TRUE(Put(io, *c, "/job/stop", "x", lease->id));
  ASSERT_TRUE(Await<LeaseRevokeResponse>(io, [&](auto done) { c->LeaseRevoke(lease->id, done); }));
  EXPECT_TRUE(Get(io, *c, "/job/stop")->kvs.empty());
  auto ttl = Await<LeaseTimeToLiveResponse>(io, [&](auto done) { c->LeaseTimeToLive(lease->id, false, done); });
  ASSERT_TRUE(ttl);
  EXPECT_EQ(ttl->ttl, -1);
  auto again = Await<LeaseRevokeResponse>(io, [&](auto done) { c->LeaseRevoke(lease->id, done); });
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("requested lease not found (code 5)"), std::string::npos)
      << again.error().message;
}

TEST(EtcdWatch, SeesEveryEventInOrderAcrossARestartOfTheMember) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls());
  auto start = Put(io, *c, "/w/0", "v0");
  ASSERT_TRUE(start);
  Seen seen;
  Watch watch(*c, {"/w/", true, start->header.revision, false}, seen.Handlers());
  watch.Start();
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(Put(io, *c, "/w/" + std::to_string(i), "v" + std::to_string(i)));
  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 6; })) << seen.events.size();
  cluster.Kill(0);
  ASSERT_TRUE(RunUntil(io, [&] { return seen.losses >= 1; }));
  cluster.Restart(0);
  for (int i = 6; i <= 9; ++i) ASSERT_TRUE(Put(io, *c, "/w/" + std::to_string(i), "v" + std::to_string(i)));
  ASSERT_TRUE(Await<DeleteRangeResponse>(io, [&](auto done) { c->DeleteRange({"/w/3"}, done); }));
  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 11; })) << seen.events.size();
  EXPECT_GE(seen.connects, 2);
  for (int i = 0; i <= 9; ++i) {
    EXPECT_EQ(seen.events[i].kv.key, "/w/" + std::to_string(i));
    EXPECT_EQ(seen.events[i].type, Event::Type::kPut);
  }
  EXPECT_EQ(seen.events[10].kv.key, "/w/3");
  EXPECT_EQ(seen.events[10].type, Event::Type::kDelete);
  for (std::size_t i = 1; i < seen.events.size(); ++i) {
    EXPECT_EQ(seen.events[i].kv.mod_revision, seen.events[i - 1].kv.mod_revision + 1);
  }
  EXPECT_EQ(watch.next_revision(), seen.events.back().kv.mod_revision + 1);
}

TEST(EtcdWatch, ACompactedStartRevisionIsReportedAndSnapshotWatchReadsAgain) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls());
  auto first = Put(io, *c, "/s/a", "1");
  ASSERT_TRUE(first);
  ASSERT_TRUE(Put(io, *c, "/s/a", "2"));
  auto last = Put(io, *c, "/s/b", "3");
  ASSERT_TRUE(last);
  ASSERT_TRUE(Await<CompactionResponse>(io, [&](auto done) { c->Compact(last->header.revision, done); }));

  Seen seen;
  Watch old(*c, {"/s/", true, first->header.revision, false}, seen.Handlers());
  old.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return seen.compacted != 0; }));
  EXPECT_EQ(seen.compacted, last->header.revision);
  EXPECT_TRUE(seen.events.empty());

  std::vector<RangeResponse> snapshots;
  std::vector<Event> events;
  SnapshotWatch follow(
      *c, "/s/",
      {[&](const RangeResponse& r) { snapshots.push_back(r); },
       [&](const std::vector<Event>& e) { events.insert(events.end(), e.begin(), e.end()); }, nullptr});
  follow.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return snapshots.size() == 1; }));
  ASSERT_EQ(snapshots[0].kvs.size(), 2U);
  EXPECT_EQ(snapshots[0].kvs[0].value, "2");
  ASSERT_TRUE(Put(io, *c, "/s/c", "4"));
  ASSERT_TRUE(RunUntil(io, [&] { return events.size() == 1; }));
  EXPECT_EQ(events[0].kv.key, "/s/c");
}

TEST(EtcdAuth, PasswordFileAuthenticatesAndAWorldReadableOneIsRefused) {
  EtcdCluster cluster(1);
  std::string out;
  ASSERT_EQ(cluster.Etcdctl({"user", "add", "root:s3cret:with-colon"}, &out), 0) << out;
  ASSERT_EQ(cluster.Etcdctl({"auth", "enable"}, &out), 0) << out;
  testing::TempDir dir;
  const auto file = dir / "etcd-credentials";
  testing::WriteFile(file, "root:s3cret:with-colon\n");
  chmod(file.c_str(), 0600);

  boost::asio::io_context io;
  auto c = Connect(io, cluster.ClientUrls(), file.string());
  auto put = Put(io, *c, "/a/x", "1");
  ASSERT_TRUE(put) << put.error().message;
  Seen seen;
  Watch watch(*c, {"/a/", true, put->header.revision, false}, seen.Handlers());
  watch.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 1; }));

  auto anonymous = Connect(io, cluster.ClientUrls());
  auto refused = Get(io, *anonymous, "/a/x");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("user name is empty"), std::string::npos) << refused.error().message;

  const auto wrong = dir / "wrong";
  testing::WriteFile(wrong, "root:nope\n");
  chmod(wrong.c_str(), 0600);
  auto bad = Connect(io, cluster.ClientUrls(), wrong.string());
  auto denied = Get(io, *bad, "/a/x");
  ASSERT_FALSE(denied);
  EXPECT_NE(denied.error().message.find("authentication failed"), std::string::npos) << denied.error().message;
  EXPECT_EQ(denied.error().message.find("nope"), std::string::npos);

  chmod(file.c_str(), 0644);
  auto open = Client::Create(io, SystemClock(), {cluster.ClientUrls(), file.string(), seconds(2)});
  ASSERT_FALSE(open);
  EXPECT_EQ(open.error().message, "refusing the etcd credentials file " + file.string() +
                                      ": it is accessible by group or others (mode 0644); run chmod 600 " +
                                      file.string());
  EXPECT_EQ(open.error().message.find("s3cret"), std::string::npos);
}

TEST(EtcdClientOptions, BadEndpointsAreRefusedByName) {
  boost::asio::io_context io;
  auto path = Client::Create(io, SystemClock(), {{"https://10.0.0.5:2379/v3"}, "", seconds(1)});
  ASSERT_FALSE(path);
  EXPECT_EQ(path.error().message.rfind("etcd endpoint 'https://10.0.0.5:2379/v3': expected only scheme://host:port", 0),
            0U)
      << path.error().message;
  auto none = Client::Create(io, SystemClock(), {{}, "", seconds(1)});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "etcd: no endpoint given");
  auto garbage = Client::Create(io, SystemClock(), {{"10.0.0.5"}, "", seconds(1)});
  ASSERT_FALSE(garbage);
  EXPECT_EQ(garbage.error().message.rfind("etcd endpoint '10.0.0.5': ", 0), 0U) << garbage.error().message;
}

}  // namespace
}  // namespace spotvisor::etcd
