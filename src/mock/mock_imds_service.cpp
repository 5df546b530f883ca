// The AWS IMDS (v1 + v2) and Alibaba ECS metadata fakes. They share the shape: PUT
// /latest/api/token with a TTL header (1..21600 s) gives a token that expires; GETs carry
// it in a header; an invalid or expired token is 401, a missing one too when v2 is
// required; "no notice" is a 404 with an HTML body, as the real services answer.
#include <map>

#include "mock_service.hpp"
#include "spotvisor/preemption/time_format.hpp"

namespace spotvisor::mock {
namespace {

using preemption::FormatIso8601;
using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kMaxTokens = 4096;  // live tokens kept before pruning

constexpr const char* kAwsNotFound =
    "<?xml version=\"1.0\" encoding=\"iso-8859-1\"?>\n"
    "<!DOCTYPE html PUBLIC \"-//W3C//DTD XHTML 1.0 Transitional//EN\"\n"
    "\t\"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd\">\n"
    "<html xmlns=\"http://www.w3.org/1999/xhtml\" xml:lang=\"en\" lang=\"en\">\n"
    " <head>\n  <title>404 - Not Found</title>\n </head>\n"
    " <body>\n  <h1>404 - Not Found</h1>\n </body>\n</html>\n";

std::string AwsError(int status, const char* title) {
  std::string page = kAwsNotFound;
  const std::string from = "404 - Not Found";
  const std::string to = std::to_string(status) + " - " + title;
  for (auto at = page.find(from); at != std::string::npos; at = page.find(from, at + to.size())) {
    page.replace(at, from.size(), to);
  }
  return page;
}

struct Dialect {
  const char* ttl_header;                      // lower-case request header of the token PUT
  const char* token_header;                    // lower-case request header of GETs
  const char* notice_path;                     // where the termination notice appears
  Duration default_window;                     // notice time = flip + this
  std::map<std::string, std::string> statics;  // path -> value
};

Dialect AwsDialect() {
  return {"x-aws-ec2-metadata-token-ttl-seconds",
          "x-aws-ec2-metadata-token",
          "/latest/meta-data/spot/instance-action",
          std::chrono::minutes(2),
          {{"/latest/meta-data/instance-id", "i-0123456789abcdef0"},
           {"/latest/meta-data/instance-type", "g5.xlarge"},
           {"/latest/meta-data/instance-life-cycle", "spot"},
           {"/latest/meta-data/ami-id", "ami-0abcdef1234567890"},
           {"/latest/meta-data/hostname", "ip-10-0-0-12.ec2.internal"},
           {"/latest/meta-data/local-ipv4", "10.0.0.12"},
           {"/latest/meta-data/placement/availability-zone", "us-east-1a"},
           {"/latest/meta-data/placement/region", "us-east-1"},
           {"/latest/meta-data/instance-action", "none"},
           {"/latest/dynamic/instance-identity/document",
            "{\n  \"accountId\" : \"123456789012\",\n  \"availabilityZone\" : \"us-east-1a\",\n"
            "  \"instanceId\" : \"i-0123456789abcdef0\",\n  \"instanceType\" : \"g5.xlarge\",\n"
            "  \"region\" : \"us-east-1\",\n  \"version\" : \"2017-09-30\"\n}"}}};
}

Dialect AlibabaDialect() {
  return {"x-aliyun-ecs-metadata-token-ttl-seconds",
          "x-aliyun-ecs-metadata-token",
          "/latest/meta-data/instance/spot/termination-time",
          std::chrono::minutes(5),
          {{"/latest/meta-data/instance-id", "i-bp1234567890abcdefg"},
           {"/latest/meta-data/instance/instance-type", "ecs.gn7i-c8g1.2xlarge"},
           {"/latest/meta-data/region-id", "cn-hangzhou"},
           {"/latest/meta-data/zone-id", "cn-hangzhou-i"},
           {"/latest/meta-data/hostname", "iZbp1234567890abcdefgZ"}}};
}

class ImdsMockService final : public MockService {
 public:
  ImdsMockService(MockProvider provider, const MockOptions& options)
      : aws_(provider == MockProvider::kAws), dialect_(aws_ ? AwsDialect() : AlibabaDialect()), options_(options) {}

  MockReply Handle(MockRequest& request) override {
    if (request.Header("x-forwarded-for") != nullptr) return Error(403, "Forbidden");
    const std::string path = StripSlash(request.path);
    if (path == "/latest/api/token") return Token(request);
    if (request.method != "GET" && request.method != "HEAD") return Error(405, "Method Not Allowed");
    if (const auto* token = request.Header(dialect_.token_header)) {
      if (!Valid(*token)) return Error(401, "Unauthorized");
    } else if (options_.imdsv2_required) {
      return Error(401, "Unauthorized");
    }
    return Get(path);
  }

  void Preempt(const PreemptSpec& spec) override {
    // A recommendation already showing keeps its noticeTime, as a real one does.
    if (!(preempted_ && spec_.rebalance)) rebalance_time_ = std::chrono::system_clock::now();
    spec_ = spec;
    preempted_ = true;
    notice_time_ = std::chrono::system_clock::now() + spec.deadline_in.value_or(dialect_.default_window);
  }
  void Clear() override { preempted_ = false; }
  bool preempted() const override { return preempted_; }

 private:
  MockReply Error(int status, const char* title) const {
    if (aws_) return TextReply(status, AwsError(status, title), "text/html");
    return TextReply(status, std::to_string(status) + " " + title + "\n", "text/plain");
  }

  MockReply Token(const MockRequest& request) {
    if (request.method != "PUT") return Error(405, "Method Not Allowed");
    const std::string* ttl_text = request.Header(dialect_.ttl_header);
    long ttl = 0;
    if (ttl_text != nullptr && !ttl_text->empty() && ttl_text->size() <= 5 &&
        ttl_text->find_first_not_of("0123456789") == std::string::npos) {
      ttl = std::stol(*ttl_text);
    }
    if (ttl < 1 || ttl > 21600) return Error(400, "Bad Request");
    if (tokens_.size() >= kMaxTokens) Prune();
    const std::string token = RandomToken(56);
    tokens_[token] = SteadyClock::now() + std::chrono::seconds(ttl);
    MockReply reply = TextReply(200, token);
    reply.headers.emplace_back(
        aws_ ? "X-aws-ec2-metadata-token-ttl-seconds" : "X-aliyun-ecs-metadata-token-ttl-seconds", std::to_string(ttl));
    return reply;
  }

  void Prune() {
    const auto now = SteadyClock::now();
    for (auto it = tokens_.begin(); it != tokens_.end();) {
      it = now >= it->second ? tokens_.erase(it) : std::next(it);
    }
    if (tokens_.size() >= kMaxTokens) tokens_.clear();  // a token flood: start over
  }

  bool Valid(const std::string& token) {
    const auto it = tokens_.find(token);
    if (it == tokens_.end()) return false;
    if (SteadyClock::now() >= it->second) {
      tokens_.erase(it);  // expired tokens are forgotten, as AEMM does
      return false;
    }
    return true;
  }

  MockReply Get(const std::string& path) const {
    const bool notice = preempted_ && spec_.notice;
    if (path == dialect_.notice_path && aws_) {
      if (!notice) return Error(404, "Not Found");
      return TextReply(200,
                       "{\n\t\"action\": \"" + spec_.action.value_or(options_.action) + "\",\n\t\"time\": \"" +
                           FormatIso8601(notice_time_) + "\"\n}",
                       "application/json");
    }
    if (path == dialect_.notice_path || (aws_ && path == "/latest/meta-data/spot/termination-time")) {
      if (!notice) return Error(404, "Not Found");
      return TextReply(200, FormatIso8601(notice_time_));
    }
    if (aws_ && path == "/latest/meta-data/events/recommendations/rebalance") {
      if (!preempted_ || !spec_.rebalance) return Error(404, "Not Found");
      return TextReply(200, "{\"noticeTime\": \"" + FormatIso8601(rebalance_time_) + "\"}", "application/json");
    }
    const auto it = dialect_.statics.find(path);
    if (it != dialect_.statics.end()) {
      return TextReply(200, it->second, path.find("document") != std::string::npos ? "application/json" : "text/plain");
    }
    if (path == "/latest/meta-data") return TextReply(200, Listing());
    return Error(404, "Not Found");
  }

  std::string Listing() const {
    std::string out;
    const std::string prefix = "/latest/meta-data/";
    for (const auto& [path, value] : dialect_.statics) {
      if (path.rfind(prefix, 0) != 0) continue;
      std::string rest = path.substr(prefix.size());
      const auto slash = rest.find('/');
      if (slash != std::string::npos) rest = rest.substr(0, slash + 1);
      if (out.find(rest + "\n") == std::string::npos) out += rest + "\n";
    }
    out += aws_ ? "spot/\nevents/\n" : "instance/\n";
    return out;
  }

  bool aws_;             // AWS, else Alibaba
  Dialect dialect_;      // header names, paths, static values
  MockOptions options_;  // action, imdsv2_required
  PreemptSpec spec_;     // the current flip
  bool preempted_ = false;
  std::chrono::system_clock::time_point notice_time_;      // "time" of the notice
  std::chrono::system_clock::time_point rebalance_time_;   // "noticeTime" of the recommendation
  std::map<std::string, SteadyClock::time_point> tokens_;  // token -> expiry
};

}  // namespace

std::unique_ptr<MockService> MakeImdsMockService(MockProvider provider, const MockOptions& options) {
  return std::make_unique<ImdsMockService>(provider, options);
}

}  // namespace spotvisor::mock
