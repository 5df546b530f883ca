// The etcd gateway's wire format: request bodies as etcd 3.4 reads them and answers as it
// writes them (the bodies below were captured from Debian's etcd 3.4.23 on loopback).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "spotvisor/etcd/wire.hpp"

namespace spotvisor::etcd {
namespace {

using Json = nlohmann::json;

TEST(EtcdBase64, RoundTripsEveryLengthAndByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (std::size_t n = 0; n <= 7; ++n) {
    const std::string bytes = all.substr(250 - n, n);
    const auto decoded = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(decoded.has_value()) << n;
    EXPECT_EQ(*decoded, bytes) << n;
  }
  EXPECT_EQ(*Base64Decode(Base64Encode(all)), all);
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("a1"), "YTE=");
  EXPECT_EQ(Base64Encode("x"), "eA==");
}

TEST(EtcdBase64, AcceptsUnpaddedAndUrlSafeRefusesOtherBytes) {
  EXPECT_EQ(*Base64Decode("YTE"), "a1");
  EXPECT_EQ(*Base64Decode("-_8="), *Base64Decode("+/8="));
  EXPECT_FALSE(Base64Decode("Zm9v!").has_value());
  EXPECT_FALSE(Base64Decode("Z").has_value());
  EXPECT_FALSE(Base64Decode("Zm 9v").has_value());
}

TEST(EtcdWire, PrefixEndIsTheNextKeyAfterThePrefix) {
  EXPECT_EQ(PrefixEnd("a"), "b");
  EXPECT_EQ(PrefixEnd("/job/"), "/job0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

TEST(EtcdWire, PutBodyCarriesBase64AndInt64AsStrings) {
  const Json j = Json::parse(EncodePut({"k", "v\x01", 7587869234, true}));
  EXPECT_EQ(j["key"], "aw==");
  EXPECT_EQ(j["value"], "dgE=");
  EXPECT_EQ(j["lease"], "7587869234");
  EXPECT_EQ(j["prev_kv"], true);
  const Json plain = Json::parse(EncodePut({"k", "", 0, false}));
  EXPECT_FALSE(plain.contains("lease"));
  EXPECT_FALSE(plain.contains("prev_kv"));
  EXPECT_EQ(plain["value"], "");
}

TEST(EtcdWire, RangeAndDeleteBodies) {
  const Json range = Json::parse(EncodeRange({"a", PrefixEnd("a"), 12, 5, true, false}));
  EXPECT_EQ(range["key"], "YQ==");
  EXPECT_EQ(range["range_end"], "Yg==");
  EXPECT_EQ(range["revision"], "12");
  EXPECT_EQ(range["limit"], "5");
  EXPECT_EQ(range["count_only"], true);
  EXPECT_FALSE(range.contains("keys_only"));
  const Json del = Json::parse(EncodeDeleteRange({"a", "", true}));
  EXPECT_FALSE(del.contains("range_end"));
  EXPECT_EQ(del["prev_kv"], true);
}

TEST(EtcdWire, TxnBodyForCreateOnlyAndCompareAndSwap) {
  TxnRequest create_only;
  create_only.compare.push_back(Compare::Absent("rank/0"));
  create_only.success.emplace_back(PutRequest{"rank/0", "node-a", 42, false});
  create_only.failure.emplace_back(RangeRequest{"rank/0"});
  const Json j = Json::parse(EncodeTxn(create_only));
  EXPECT_EQ(j["compare"][0]["target"], "CREATE");
  EXPECT_EQ(j["compare"][0]["result"], "EQUAL");
  EXPECT_EQ(j["compare"][0]["create_revision"], "0");
  EXPECT_EQ(j["success"][0]["request_put"]["lease"], "42");
  EXPECT_EQ(j["failure"][0]["request_range"]["key"], Base64Encode("rank/0"));

  TxnRequest cas;
  cas.compare.push_back(Compare::ModRevision("budget", Compare::Result::kEqual, 9));
  cas.compare.push_back(Compare::Value("budget", Compare::Result::kNotEqual, "3"));
  cas.compare.push_back(Compare::Version("budget", Compare::Result::kGreater, 1));
  cas.success.emplace_back(DeleteRangeRequest{"budget", "", false});
  const Json c = Json::parse(EncodeTxn(cas));
  EXPECT_EQ(c["compare"][0]["target"], "MOD");
  EXPECT_EQ(c["compare"][0]["mod_revision"], "9");
  EXPECT_EQ(c["compare"][1]["target"], "VALUE");
  EXPECT_EQ(c["compare"][1]["result"], "NOT_EQUAL");
  EXPECT_EQ(c["compare"][1]["value"], "Mw==");
  EXPECT_EQ(c["compare"][2]["result"], "GREATER");
  EXPECT_EQ(c["compare"][2]["version"], "1");
  EXPECT_TRUE(c["success"][0].contains("request_delete_range"));
  EXPECT_TRUE(c["failure"].is_array());
}

TEST(EtcdWire, LeaseAuthCompactionAndWatchBodies) {
  EXPECT_EQ(Json::parse(EncodeLeaseGrant(2)), Json::parse(R"({"TTL":"2"})"));
  EXPECT_EQ(Json::parse(EncodeLeaseId(4111120383212593422)), Json::parse(R"({"ID":"4111120383212593422"})"));
  EXPECT_EQ(Json::parse(EncodeLeaseTimeToLive(5, true)), Json::parse(R"({"ID":"5","keys":true})"));
  EXPECT_EQ(Json::parse(EncodeCompaction(8)), Json::parse(R"({"revision":"8"})"));
  EXPECT_EQ(Json::parse(EncodeAuthenticate("root", "p\"w")), Json::parse(R"({"name":"root","password":"p\"w"})"));
  const Json w = Json::parse(EncodeWatchCreate({"a", "b", 2, true, true}));
  EXPECT_EQ(
      w,
      Json::parse(
          R"({"create_request":{"key":"YQ==","range_end":"Yg==","start_revision":"2","prev_kv":true,"progress_notify":true}})"));
}

constexpr const char* kHeader =
    R"("header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"3","raft_term":"2"})";

TEST(EtcdWire, ParsesPutWithPrevKvAndTheHeader) {
  const auto r = ParsePutResponse(
      std::string("{") + kHeader +
      R"(,"prev_kv":{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->header.cluster_id, 15118495548433857066ULL);
  EXPECT_EQ(r->header.revision, 3);
  ASSERT_TRUE(r->prev_kv.has_value());
  EXPECT_EQ(r->prev_kv->key, "foo");
  EXPECT_EQ(r->prev_kv->value, "bar");
  EXPECT_EQ(r->prev_kv->create_revision, 2);
  EXPECT_EQ(r->prev_kv->lease, 0);
  const auto first = ParsePutResponse(std::string("{") + kHeader + "}");
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->prev_kv.has_value());
}

TEST(EtcdWire, ParsesRangeCountAndAnEmptyRange) {
  const auto r = ParseRangeResponse(
      std::string("{") + kHeader +
      R"(,"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"2","value":"YmFy","lease":"77"}],"count":"1"})");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->kvs.size(), 1U);
  EXPECT_EQ(r->kvs[0].version, 2);
  EXPECT_EQ(r->kvs[0].lease, 77);
  EXPECT_EQ(r->count, 1);
  EXPECT_FALSE(r->more);
  const auto none = ParseRangeResponse(std::string("{") + kHeader + "}");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->kvs.empty());
  EXPECT_EQ(none->count, 0);
  const auto numbers = ParseRangeResponse(R"({"header":{"revision":12},"count":3,"more":true})");
  ASSERT_TRUE(numbers);
  EXPECT_EQ(numbers->header.revision, 12);
  EXPECT_EQ(numbers->count, 3);
  EXPECT_TRUE(numbers->more);
}

TEST(EtcdWire, AFailedTxnHasNoSucceededField) {
  const auto r = ParseTxnResponse(
      std::string("{") + kHeader +
      R"(,"responses":[{"response_range":{"header":{"revision":"3"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"2","value":"YmFy"}],"count":"1"}}]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->succeeded);
  ASSERT_EQ(r->responses.size(), 1U);
  const auto* range = std::get_if<RangeResponse>(&r->responses[0]);
  ASSERT_NE(range, nullptr);
  EXPECT_EQ(range->kvs.at(0).value, "bar");
}

TEST(EtcdWire, ASucceededTxnWithDeleteAndPut) {
  const auto r = ParseTxnResponse(
      std::string("{") + kHeader +
      R"(,"succeeded":true,"responses":[{"response_delete_range":{"header":{"revision":"4"},"deleted":"1","prev_kvs":[{"key":"Zm9v","value":"YmFy"}]}},{"response_put":{"header":{"revision":"4"}}}]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->succeeded);
  ASSERT_EQ(r->responses.size(), 2U);
  const auto& del = std::get<DeleteRangeResponse>(r->responses[0]);
  EXPECT_EQ(del.deleted, 1);
  EXPECT_EQ(del.prev_kvs.at(0).key, "foo");
  EXPECT_TRUE(std::holds_alternative<PutResponse>(r->responses[1]));
}

TEST(EtcdWire, LeaseAnswers) {
  const auto grant = ParseLeaseGrantResponse(std::string("{") + kHeader + R"(,"ID":"4111120383212593420","TTL":"5"})");
  ASSERT_TRUE(grant);
  EXPECT_EQ(grant->id, 4111120383212593420);
  EXPECT_EQ(grant->ttl, 5);
  const auto alive = ParseLeaseKeepAliveResponse(std::string(R"({"result":{)") + kHeader +
                                                 R"(,"ID":"4111120383212593422","TTL":"3"}})" + "\n");
  ASSERT_TRUE(alive) << alive.error().message;
  EXPECT_EQ(alive->ttl, 3);
  // A keepalive of an expired lease answers without TTL.
  const auto expired =
      ParseLeaseKeepAliveResponse(std::string(R"({"result":{)") + kHeader + R"(,"ID":"4111120383212593422"}})");
  ASSERT_TRUE(expired);
  EXPECT_EQ(expired->id, 4111120383212593422);
  EXPECT_EQ(expired->ttl, 0);
  const auto ttl = ParseLeaseTimeToLiveResponse(std::string("{") + kHeader +
                                                R"(,"ID":"4","TTL":"2","grantedTTL":"3","keys":["bGs="]})");
  ASSERT_TRUE(ttl);
  EXPECT_EQ(ttl->granted_ttl, 3);
  EXPECT_EQ(ttl->keys, std::vector<std::string>{"lk"});
  const auto gone = ParseLeaseTimeToLiveResponse(std::string("{") + kHeader + R"(,"ID":"4","TTL":"-1"})");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->ttl, -1);
  const auto token = ParseAuthenticateResponse(std::string("{") + kHeader + R"(,"token":"abc.12"})");
  ASSERT_TRUE(token);
  EXPECT_EQ(token->token, "abc.12");
}

TEST(EtcdWire, WatchLines) {
  const auto created = ParseWatchLine(std::string(R"({"result":{)") + kHeader + R"(,"created":true}})");
  ASSERT_TRUE(created);
  EXPECT_TRUE(created->created);
  EXPECT_FALSE(created->IsProgressNotify());

  const auto put = ParseWatchLine(
      R"({"result":{"header":{"revision":"8"},"events":[{"kv":{"key":"YTE=","create_revision":"7","mod_revision":"8","version":"2","value":"eQ=="},"prev_kv":{"key":"YTE=","create_revision":"7","mod_revision":"7","version":"1","value":"eA=="}}]}})");
  ASSERT_TRUE(put) << put.error().message;
  ASSERT_EQ(put->events.size(), 1U);
  EXPECT_EQ(put->events[0].type, Event::Type::kPut);
  EXPECT_EQ(put->events[0].kv.value, "y");
  EXPECT_EQ(put->events[0].prev_kv->value, "x");

  const auto del = ParseWatchLine(
      R"({"result":{"header":{"revision":"9"},"events":[{"type":"DELETE","kv":{"key":"YTE=","mod_revision":"9"}}]}})");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->events.at(0).type, Event::Type::kDelete);
  EXPECT_EQ(del->events.at(0).kv.mod_revision, 9);
  EXPECT_FALSE(del->events.at(0).prev_kv.has_value());

  const auto compacted = ParseWatchLine(
      R"({"result":{"header":{"cluster_id":"1","raft_term":"2"},"canceled":true,"compact_revision":"8"}})");
  ASSERT_TRUE(compacted);
  EXPECT_TRUE(compacted->canceled);
  EXPECT_EQ(compacted->compact_revision, 8);

  const auto progress = ParseWatchLine(R"({"result":{"header":{"revision":"31"}}})");
  ASSERT_TRUE(progress);
  EXPECT_TRUE(progress->IsProgressNotify());
  EXPECT_EQ(progress->header.revision, 31);
}

TEST(EtcdWire, GatewayErrorsUnaryAndStreamed) {
  const auto unary = ParseGatewayError(
      R"({"error":"etcdserver: mvcc: required revision is a future revision","message":"etcdserver: mvcc: required revision is a future revision","code":11})");
  ASSERT_TRUE(unary.has_value());
  EXPECT_EQ(unary->code, 11);
  EXPECT_EQ(unary->message, "etcdserver: mvcc: required revision is a future revision");
  const auto streamed = ParseGatewayError(
      R"({"error":{"grpc_code":16,"http_code":401,"message":"etcdserver: invalid auth token","http_status":"Unauthorized"}})");
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(streamed->code, 16);
  EXPECT_EQ(streamed->message, "etcdserver: invalid auth token");
  EXPECT_FALSE(ParseGatewayError(std::string("{") + kHeader + "}").has_value());
  EXPECT_FALSE(ParseGatewayError("not json").has_value());
  const auto line = ParseWatchLine(R"({"error":{"grpc_code":14,"message":"etcdserver: no leader"}})");
  ASSERT_FALSE(line);
  EXPECT_NE(line.error().message.find("no leader"), std::string::npos);
}

TEST(EtcdWire, BadBodiesAreErrorsNamingTheField) {
  EXPECT_EQ(ParseRangeResponse("<html>").error().message, "the answer is not JSON");
  EXPECT_EQ(ParseRangeResponse("[1]").error().message, "the answer is not a JSON object");
  EXPECT_EQ(ParseRangeResponse(R"({"count":true})").error().message,
            "unexpected answer: field count is not an integer");
  EXPECT_EQ(ParseRangeResponse(R"({"kvs":[{"key":"!!"}]})").error().message,
            "unexpected answer: field kvs[0].key is not base64 text");
  EXPECT_EQ(ParseRangeResponse(R"({"header":{"revision":"12x"}})").error().message,
            "unexpected answer: field header.revision is not an integer");
  EXPECT_EQ(ParseTxnResponse(R"({"responses":[{"response_what":{}}]})").error().message,
            "unexpected answer: field responses[0] is not a put, range or delete_range response");
  EXPECT_EQ(ParseWatchLine(R"({"result":{"events":[{"type":"EXPIRE"}]}})").error().message,
            "unexpected answer: field result.events[0].type is not PUT or DELETE");
  EXPECT_FALSE(ParseWatchLine(R"({"header":{}})"));
  EXPECT_FALSE(ParseLeaseKeepAliveResponse(""));
}

}  // namespace
}  // namespace spotvisor::etcd
