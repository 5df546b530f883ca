// InstanceFactsQuery: a short chain of GETs on the watcher's HTTP client (after a session
// token PUT for AWS and Alibaba), one per fact, each with the provider's own headers. io
// thread only; the client's destructor cancels a request in flight.
#include "spotvisor/preemption/instance_facts.hpp"

#include <vector>

#include "spotvisor/http/http_client.hpp"
#include "spotvisor/preemption/metadata_endpoint.hpp"
#include "spotvisor/preemption/notice_parsers.hpp"

namespace spotvisor::preemption {
namespace {

using config::ProviderKind;

// One question: the path, which fact it answers, and whether only the last '/' component
// counts (GCP answers "projects/123/zones/us-central1-a").
struct Question {
  std::string path;
  std::string InstanceFacts::*fact;
  bool last_component = false;
};

struct Dialect {
  std::vector<http::HttpHeader> headers;  // sent with every GET
  std::string token_path;                 // empty: no session token
  std::string ttl_header;                 // header of the token PUT
  std::string token_header;               // header carrying the token on GETs
  std::vector<Question> questions;
};

Dialect DialectFor(ProviderKind kind) {
  constexpr const char* kAzureQuery = "?api-version=2021-02-01&format=text";
  switch (kind) {
    case ProviderKind::kAws:
      return {{},
              "/latest/api/token",
              "X-aws-ec2-metadata-token-ttl-seconds",
              "X-aws-ec2-metadata-token",
              {{"/latest/meta-data/instance-type", &InstanceFacts::instance_type},
               {"/latest/meta-data/placement/availability-zone", &InstanceFacts::zone},
               {"/latest/meta-data/placement/region", &InstanceFacts::region}}};
    case ProviderKind::kAlibaba:
      return {{},
              "/latest/api/token",
              "X-aliyun-ecs-metadata-token-ttl-seconds",
              "X-aliyun-ecs-metadata-token",
              {{"/latest/meta-data/instance/instance-type", &InstanceFacts::instance_type},
               {"/latest/meta-data/zone-id", &InstanceFacts::zone},
               {"/latest/meta-data/region-id", &InstanceFacts::region}}};
    case ProviderKind::kGcp:
      return {{{"Metadata-Flavor", "Google"}},
              "",
              "",
              "",
              {{"/computeMetadata/v1/instance/machine-type", &InstanceFacts::instance_type, true},
               {"/computeMetadata/v1/instance/zone", &InstanceFacts::zone, true}}};
    case ProviderKind::kAzure:
      return {{{"Metadata", "true"}},
              "",
              "",
              "",
              {{std::string("/metadata/instance/compute/vmSize") + kAzureQuery, &InstanceFacts::instance_type},
               {std::string("/metadata/instance/compute/zone") + kAzureQuery, &InstanceFacts::zone},
               {std::string("/metadata/instance/compute/location") + kAzureQuery, &InstanceFacts::region}}};
    default:
      return {};
  }
}

// A plausible one-line fact: printable, short; anything else is not an answer.
bool Plausible(std::string_view value) {
  if (value.empty() || value.size() > 128) return false;
  for (const char c : value) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

class Query final : public InstanceFactsQuery {
 public:
  Query(boost::asio::io_context& io, http::Endpoint endpoint, Dialect dialect, Duration timeout, bool gcp)
      : client_(io, std::move(endpoint)), dialect_(std::move(dialect)), timeout_(timeout), gcp_(gcp) {}

  void Start(Done done) override {
    done_ = std::move(done);
    if (dialect_.token_path.empty()) {
      Ask(0);
      return;
    }
    http::HttpRequest put;
    put.method = "PUT";
    put.target = dialect_.token_path;
    put.headers.push_back({dialect_.ttl_header, "60"});
    put.timeout = timeout_;
    client_.Send(std::move(put), [this](http::HttpOutcome outcome) {
      if (outcome.ok() && outcome.response.status == 200) {
        token_ = std::string(TrimSpace(outcome.response.body));
      } else {
        Trouble(dialect_.token_path, outcome);  // IMDSv1 may still answer
      }
      Ask(0);
    });
  }

 private:
  void Ask(std::size_t index) {
    if (index >= dialect_.questions.size()) {
      if (gcp_ && facts_.region.empty() && facts_.zone.size() > 2) {
        facts_.region = facts_.zone.substr(0, facts_.zone.rfind('-'));  // us-central1-a -> us-central1
      }
      Done done = std::move(done_);
      done(std::move(facts_));
      return;
    }
    const Question& q = dialect_.questions[index];
    http::HttpRequest get;
    get.target = q.path;
    get.headers = dialect_.headers;
    if (!token_.empty()) get.headers.push_back({dialect_.token_header, token_});
    get.timeout = timeout_;
    client_.Send(std::move(get), [this, index](http::HttpOutcome outcome) {
      const Question& asked = dialect_.questions[index];
      std::string value = outcome.ok() && outcome.response.status == 200 ? std::string(TrimSpace(outcome.response.body))
                                                                         : std::string();
      if (asked.last_component) value = value.substr(value.rfind('/') + 1);
      if (Plausible(value)) {
        facts_.*asked.fact = value;
      } else {
        Trouble(asked.path, outcome);
      }
      Ask(index + 1);
    });
  }

  void Trouble(const std::string& path, const http::HttpOutcome& outcome) {
    if (!facts_.trouble.empty()) return;
    facts_.trouble = path + ": " + (outcome.ok() ? "HTTP " + std::to_string(outcome.response.status) : outcome.message);
  }

  http::HttpClient client_;  // one connection for the whole chain
  Dialect dialect_;          // what to ask and how
  Duration timeout_;         // per request
  bool gcp_;                 // derive the region from the zone
  std::string token_;        // AWS/Alibaba session token; empty = none (IMDSv1)
  InstanceFacts facts_;
  Done done_;
};

}  // namespace

std::unique_ptr<InstanceFactsQuery> InstanceFactsQuery::Make(boost::asio::io_context& io,
                                                             const config::ProviderSection& provider) {
  const ProviderKind kind = provider.kind;  // never auto: resolved when the job was finalized
  Dialect dialect = DialectFor(kind);
  if (dialect.questions.empty()) return nullptr;
  auto endpoint = ParseMetadataEndpoint(provider.endpoint.empty() ? DefaultEndpoint(kind) : provider.endpoint);
  if (!endpoint) return nullptr;
  return std::make_unique<Query>(io, std::move(*endpoint), std::move(dialect), provider.request_timeout,
                                 kind == ProviderKind::kGcp);
}

}  // namespace spotvisor::preemption
