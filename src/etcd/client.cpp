// Client: each request is encoded (wire.hpp), posted through the transport and its answer
// parsed; the error of a bad answer names the operation and the key. io_context thread.
#include "spotvisor/etcd/client.hpp"

#include "spotvisor/etcd/wire.hpp"

namespace spotvisor::etcd {
namespace {

// A key as messages show it: as is when printable, else its base64.
std::string Shown(const std::string& key) {
  for (const char c : key) {
    if (c < 0x20 || c == 0x7f) return "(base64) " + Base64Encode(key);
  }
  return key;
}

// The TLS context of https members (null for http ones), or why there can be none.
Result<std::shared_ptr<http::TlsContext>> TlsFor(const std::vector<Member>& members, const ClientOptions& options) {
  std::string http_urls;   // "http://a:2379, http://b:2379"
  std::string https_urls;  // the same for https
  for (const auto& m : members) {
    std::string& urls = m.tls ? https_urls : http_urls;
    urls += (urls.empty() ? "" : ", ") + m.url;
  }
  if (!http_urls.empty() && !https_urls.empty()) {
    return Error{"etcd endpoints mix http (" + http_urls + ") and https (" + https_urls + "); use https:// for all"};
  }
  if (https_urls.empty()) {
    if (!options.tls.empty())
      return Error{"etcd: TLS files are given but the endpoints are http:// (" + http_urls + ")"};
    return std::shared_ptr<http::TlsContext>();
  }
  auto material = http::LoadTlsFiles(options.tls);
  if (!material) return Error{"etcd TLS: " + material.error().message};
  auto context = http::MakeTlsContext(*material);
  if (!context) return Error{"etcd TLS: " + context.error().message};
  return context;
}

std::string RangeWords(const std::string& key, const std::string& range_end) {
  if (range_end.empty()) return "key " + Shown(key);
  if (range_end == PrefixEnd(key)) return "prefix " + Shown(key);
  return "range " + Shown(key) + " .. " + Shown(range_end);
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(boost::asio::io_context& io, Clock& clock,
                                               const ClientOptions& options) {
  if (options.endpoints.empty()) return Error{"etcd: no endpoint given"};
  std::vector<Member> members;
  for (const auto& url : options.endpoints) {
    auto member = ParseMember(url);
    if (!member) return member.error();
    members.push_back(std::move(*member));
  }
  auto tls = TlsFor(members, options);
  if (!tls) return tls.error();
  std::optional<Credentials> credentials;
  if (!options.credentials_file.empty()) {
    auto read = ReadCredentialsFile(options.credentials_file);
    if (!read) return read.error();
    credentials = std::move(*read);
  }
  return std::make_unique<Client>(io, clock, std::move(members), std::move(credentials), options.request_timeout,
                                  std::move(*tls));
}

Client::Client(boost::asio::io_context& io, Clock& clock, std::vector<Member> members,
               std::optional<Credentials> credentials, Duration request_timeout, std::shared_ptr<http::TlsContext> tls)
    : clock_(clock),
      transport_(io, std::move(members), std::move(credentials), std::move(tls)),
      request_timeout_(request_timeout) {}

template <class T>
void Client::Call(const char* path, std::string body, std::string operation, Duration timeout,
                  Result<T> (*parse)(std::string_view), Callback<T> done) {
  // Held until the answer is handled: a virtual clock does not move while etcd answers.
  auto in_flight = clock_.BackgroundWork();
  transport_.Post(
      path, std::move(body), operation, timeout,
      [parse, operation, done = std::move(done), in_flight = std::move(in_flight)](Result<std::string> answer) mutable {
        const auto held = std::move(in_flight);  // released when this handler returns
        if (!answer) return done(answer.error());
        auto parsed = parse(*answer);
        if (!parsed) return done(Error{"etcd " + operation + ": " + parsed.error().message});
        done(std::move(parsed));
      });
}

void Client::Put(PutRequest request, Callback<PutResponse> done) {
  std::string operation = "put key " + Shown(request.key);
  Call("/v3/kv/put", EncodePut(request), std::move(operation), request_timeout_, &ParsePutResponse, std::move(done));
}

void Client::Range(RangeRequest request, Callback<RangeResponse> done) {
  std::string operation = "read " + RangeWords(request.key, request.range_end);
  if (request.revision != 0) operation += " at revision " + std::to_string(request.revision);
  Call("/v3/kv/range", EncodeRange(request), std::move(operation), request_timeout_, &ParseRangeResponse,
       std::move(done));
}

void Client::DeleteRange(DeleteRangeRequest request, Callback<DeleteRangeResponse> done) {
  Call("/v3/kv/deleterange", EncodeDeleteRange(request), "delete " + RangeWords(request.key, request.range_end),
       request_timeout_, &ParseDeleteRangeResponse, std::move(done));
}

void Client::Txn(TxnRequest request, Callback<TxnResponse> done) {
  std::string operation = "txn";
  if (!request.compare.empty()) operation += " on key " + Shown(request.compare.front().key);
  Call("/v3/kv/txn", EncodeTxn(request), std::move(operation), request_timeout_, &ParseTxnResponse, std::move(done));
}

void Client::Compact(std::int64_t revision, Callback<CompactionResponse> done) {
  Call("/v3/kv/compaction", EncodeCompaction(revision), "compact to revision " + std::to_string(revision),
       request_timeout_, &ParseCompactionResponse, std::move(done));
}

void Client::LeaseGrant(std::int64_t ttl_seconds, Callback<LeaseGrantResponse> done) {
  Call("/v3/lease/grant", EncodeLeaseGrant(ttl_seconds), "grant a lease of " + std::to_string(ttl_seconds) + "s",
       request_timeout_, &ParseLeaseGrantResponse, std::move(done));
}

void Client::LeaseKeepAliveOnce(std::int64_t id, Duration timeout, Callback<LeaseKeepAliveResponse> done) {
  Call("/v3/lease/keepalive", EncodeLeaseId(id), "keep lease " + std::to_string(id) + " alive", timeout,
       &ParseLeaseKeepAliveResponse, std::move(done));
}

void Client::LeaseRevoke(std::int64_t id, Callback<LeaseRevokeResponse> done) {
  Call("/v3/lease/revoke", EncodeLeaseId(id), "revoke lease " + std::to_string(id), request_timeout_,
       &ParseLeaseRevokeResponse, std::move(done));
}

void Client::LeaseTimeToLive(std::int64_t id, bool keys, Callback<LeaseTimeToLiveResponse> done) {
  Call("/v3/lease/timetolive", EncodeLeaseTimeToLive(id, keys), "read the time to live of lease " + std::to_string(id),
       request_timeout_, &ParseLeaseTimeToLiveResponse, std::move(done));
}

}  // namespace spotvisor::etcd
