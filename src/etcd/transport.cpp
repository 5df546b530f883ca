// Transport: failover across members, per-try deadlines, the auth token. Each request is a
// shared Attempt that completion handlers capture with a weak pointer to the transport, so a
// destroyed transport (which cancels its HTTP clients) never sees a late handler.
#include "spotvisor/etcd/transport.hpp"

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <map>

#include "spotvisor/etcd/wire.hpp"
#include "spotvisor/http/http_client.hpp"
#include "spotvisor/util/secret_file.hpp"

namespace spotvisor::etcd {
namespace {

// Real time on purpose, not the Client's Clock: these deadlines bound waits on real sockets
// (as the HTTP client's own do), and a virtual clock stands still while a request is in
// flight (Client::Call holds its BackgroundWork).
using SteadyClock = std::chrono::steady_clock;
using HttpClient = http::HttpClient;

constexpr std::size_t kIdlePerMember = 4;  // kept-alive connections per member
constexpr int kUnavailable = 14;           // gRPC: no leader, leader changed, timed out inside etcd
constexpr int kDeadlineExceeded = 4;       // gRPC: the member ran out of time
constexpr int kUnauthenticated = 16;       // gRPC: the token is unknown or expired

// One request across the members.
struct Attempt {
  std::string path;                   // "/v3/kv/put"
  std::string body;                   // the JSON request
  std::string operation;              // for messages
  SteadyClock::time_point deadline;   // of the whole request
  std::size_t start = 0;              // the member tried first
  std::size_t tries = 0;              // members tried so far
  bool reauthenticated = false;       // a refused token was renewed once already
  bool authenticating = false;        // this is the authentication itself
  std::vector<std::string> failures;  // "url: why" per member tried
  Transport::Done done;               // the caller's handler
};

std::string Join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

}  // namespace

Result<Credentials> ReadCredentialsFile(const std::string& path) {
  auto text = ReadSecretFile(path, "etcd credentials");
  if (!text) return text.error();
  const std::string line = text->substr(0, text->find('\n'));
  const auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0) {
    return Error{"the etcd credentials file " + path + " does not hold name:password on its first line"};
  }
  return Credentials{line.substr(0, colon), line.substr(colon + 1)};
}

Result<Member> ParseMember(const std::string& url) {
  // "etcd endpoint '<url>': <why>"
  return http::ParseEndpoint(url, "etcd endpoint", {}, http::Schemes::kHttpOrHttps);
}

struct Transport::Impl : std::enable_shared_from_this<Impl> {
  Impl(boost::asio::io_context& io_context, std::vector<Member> m, std::optional<Credentials> c,
       std::shared_ptr<http::TlsContext> t)
      : io(io_context), members(std::move(m)), credentials(std::move(c)), tls(std::move(t)), idle(members.size()) {}

  boost::asio::io_context& io;                                 // the thread everything runs on
  std::vector<Member> members;                                 // in the user's order
  std::optional<Credentials> credentials;                      // etcd auth, if any
  std::shared_ptr<http::TlsContext> tls;                       // for https members
  std::string token;                                           // the auth token ("" = none yet)
  std::size_t preferred = 0;                                   // the member that answered last
  std::vector<std::vector<std::unique_ptr<HttpClient>>> idle;  // free clients per member
  std::map<std::uint64_t, std::unique_ptr<HttpClient>> busy;   // clients with an exchange in flight
  std::uint64_t next_id = 0;                                   // key of `busy`

  std::unique_ptr<HttpClient> TakeClient(std::size_t member) {
    auto& free = idle[member];
    if (!free.empty()) {
      auto client = std::move(free.back());
      free.pop_back();
      return client;
    }
    http::HttpLimits limits;
    limits.body_limit = 64 * 1024 * 1024;  // a prefix read can be large; etcd caps requests, not answers
    return std::make_unique<HttpClient>(io, members[member], limits, tls);
  }

  void Start(const std::shared_ptr<Attempt>& a) {
    if (credentials && token.empty() && !a->authenticating) {
      auto weak = weak_from_this();
      Authenticate(a->deadline, [weak, a](Result<std::string> t) {
        auto self = weak.lock();
        if (!self) return;
        if (!t) return a->done(Error{"etcd " + a->operation + ": " + t.error().message});
        self->Try(a);
      });
      return;
    }
    Try(a);
  }

  void Try(const std::shared_ptr<Attempt>& a) {
    const auto now = SteadyClock::now();
    if (a->tries >= members.size() || now >= a->deadline) return GiveUp(a);
    const std::size_t member = (a->start + a->tries) % members.size();
    const auto left = a->deadline - now;
    const auto share = std::chrono::duration_cast<Duration>(left / static_cast<long>(members.size() - a->tries));
    http::HttpRequest request;
    request.method = "POST";
    request.target = a->path;
    request.headers.push_back({"Content-Type", "application/json"});
    if (!token.empty() && !a->authenticating) request.headers.push_back({"Authorization", token});
    request.body = a->body;
    request.timeout = std::max(share, Duration(1));
    const std::uint64_t id = ++next_id;
    auto& client = busy[id] = TakeClient(member);
    auto weak = weak_from_this();
    client->Send(std::move(request), [weak, a, id, member](http::HttpOutcome outcome) {
      auto self = weak.lock();
      if (!self) return;
      self->Release(id, member);
      self->Answered(a, member, std::move(outcome));
    });
  }

  void Release(std::uint64_t id, std::size_t member) {
    auto it = busy.find(id);
    if (it == busy.end()) return;
    if (idle[member].size() < kIdlePerMember) idle[member].push_back(std::move(it->second));
    busy.erase(it);
  }

  void Answered(const std::shared_ptr<Attempt>& a, std::size_t member, http::HttpOutcome outcome) {
    const std::string& url = members[member].url;
    ++a->tries;
    if (!outcome.ok()) {
      // A TLS refusal says why (a wrong CA, a missing client certificate): it will not heal.
      const bool refused = outcome.error == http::HttpErrorKind::kTls;
      a->failures.push_back(url + ": " + (refused ? outcome.why : http::ToString(outcome.error)));
      return Try(a);
    }
    auto& response = outcome.response;
    if (response.status == 200) {
      preferred = member;
      return a->done(std::move(response.body));
    }
    const auto error = ParseGatewayError(response.body);
    const int code = error ? error->code : 0;
    const std::string why = error ? error->message + " (code " + std::to_string(code) + ")"
                                  : "HTTP status " + std::to_string(response.status);
    if (code == kUnavailable || code == kDeadlineExceeded || (!error && response.status >= 500)) {
      a->failures.push_back(url + ": " + why);
      return Try(a);
    }
    if (code == kUnauthenticated && credentials && !a->authenticating && !a->reauthenticated) {
      a->reauthenticated = true;  // the same member again, with a fresh token
      a->start = member;
      a->tries = 0;
      token.clear();
      return Start(a);
    }
    a->done(Error{"etcd " + a->operation + " at " + url + ": " + why});
  }

  void GiveUp(const std::shared_ptr<Attempt>& a) {
    std::vector<std::string> untried;
    for (std::size_t k = a->tries; k < members.size(); ++k) {
      untried.push_back(members[(a->start + k) % members.size()].url + ": not tried (deadline)");
    }
    auto all = a->failures;
    all.insert(all.end(), untried.begin(), untried.end());
    a->done(Error{"etcd " + a->operation + ": no endpoint answered (" + Join(all, "; ") + ")"});
  }

  void Authenticate(SteadyClock::time_point deadline, std::function<void(Result<std::string>)> done) {
    auto a = std::make_shared<Attempt>();
    a->path = "/v3/auth/authenticate";
    a->body = EncodeAuthenticate(credentials->user, credentials->password);
    a->operation = "authenticate as user " + credentials->user;
    a->deadline = deadline;
    a->start = preferred;
    a->authenticating = true;
    auto weak = weak_from_this();
    a->done = [weak, done = std::move(done)](Result<std::string> body) {
      auto self = weak.lock();
      if (!self) return;
      if (!body) return done(body.error());
      auto parsed = ParseAuthenticateResponse(*body);
      if (!parsed || parsed->token.empty()) return done(Error{"etcd authenticate: the answer holds no token"});
      self->token = parsed->token;
      done(parsed->token);
    };
    Try(a);
  }
};

Transport::Transport(boost::asio::io_context& io, std::vector<Member> members, std::optional<Credentials> credentials,
                     std::shared_ptr<http::TlsContext> tls)
    : impl_(std::make_shared<Impl>(io, std::move(members), std::move(credentials), std::move(tls))) {}

Transport::~Transport() = default;

void Transport::Post(std::string path, std::string body, std::string operation, Duration timeout, Done done) {
  auto a = std::make_shared<Attempt>();
  a->path = std::move(path);
  a->body = std::move(body);
  a->operation = std::move(operation);
  a->deadline = SteadyClock::now() + timeout;
  a->start = impl_->preferred;
  a->done = std::move(done);
  impl_->Start(a);
}

void Transport::Token(Duration timeout, std::function<void(Result<std::string>)> done) {
  if (!impl_->credentials || !impl_->token.empty()) return done(impl_->token);
  impl_->Authenticate(SteadyClock::now() + timeout, std::move(done));
}

void Transport::ForgetToken() { impl_->token.clear(); }
boost::asio::io_context& Transport::io() { return impl_->io; }
const std::vector<Member>& Transport::members() const { return impl_->members; }
const std::shared_ptr<http::TlsContext>& Transport::tls() const { return impl_->tls; }
std::size_t Transport::preferred() const { return impl_->preferred; }
void Transport::Prefer(std::size_t index) { impl_->preferred = index % impl_->members.size(); }

std::string Transport::MemberList() const {
  std::vector<std::string> urls;
  for (const auto& m : impl_->members) urls.push_back(m.url);
  return Join(urls, ", ");
}

}  // namespace spotvisor::etcd
