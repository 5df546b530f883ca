// How every etcd request travels: a POST to the JSON gateway of one of several members,
// the one that answered last first, the others on a connection error, a timeout or an
// "unavailable" answer; an auth token fetched with the user's credentials and renewed when
// the server no longer takes it. Runs on the caller's io_context thread; handlers run there.
// Owns its HTTP connections; destroying it drops every pending handler.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/http/endpoint.hpp"
#include "spotvisor/http/tls.hpp"
#include "spotvisor/util/result.hpp"
#include "spotvisor/util/units.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::etcd {

// etcd's user and password (a secret: never logged).
struct Credentials {
  std::string user;
  std::string password;
};

// "name:password" on the first line of a file readable by its owner alone (the mode is
// checked on what was opened); the error names the file, never its content.
Result<Credentials> ReadCredentialsFile(const std::string& path);

// One member: where to connect (https: over TLS), and its URL for messages.
using Member = http::Endpoint;

// "http://10.0.0.5:2379" or "https://etcd-0.example:2379" -> Member.
Result<Member> ParseMember(const std::string& url);

class Transport {
 public:
  // The body of a 200 answer, or an Error naming the operation and each endpoint tried.
  using Done = std::function<void(Result<std::string>)>;

  // `tls` is required when the members are https (and unused when they are http).
  Transport(boost::asio::io_context& io, std::vector<Member> members, std::optional<Credentials> credentials,
            std::shared_ptr<http::TlsContext> tls = nullptr);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // POSTs `body` to `path` ("/v3/kv/put"), trying the members in turn until one answers or
  // `timeout` passes (each try gets an equal share of what is left). `operation` names the
  // request in errors ("put key /job/x"). A non-retryable gateway error (a failed
  // precondition, a compacted revision, ...) ends the request at once.
  void Post(std::string path, std::string body, std::string operation, Duration timeout, Done done);

  // The auth token ("" without credentials), authenticating first when there is none.
  void Token(Duration timeout, std::function<void(Result<std::string>)> done);
  // Drops the token (the server refused it); the next request authenticates again.
  void ForgetToken();

  boost::asio::io_context& io();
  const std::vector<Member>& members() const;
  // The TLS context of https members (streams use it too); null for http.
  const std::shared_ptr<http::TlsContext>& tls() const;
  // The index of the member that answered last (streams start there too).
  std::size_t preferred() const;
  void Prefer(std::size_t index);
  // "http://a:2379, http://b:2379" for messages.
  std::string MemberList() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared (weakly) with in-flight completion handlers
};

}  // namespace spotvisor::etcd
