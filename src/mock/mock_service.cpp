// Provider names, the control-body parser, and helpers shared by the mock services.
#include "mock_service.hpp"

#include <nlohmann/json.hpp>
#include <random>

namespace spotvisor::mock {

const std::string* MockRequest::Header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? nullptr : &it->second;
}

const std::string* MockRequest::Query(const std::string& name) const {
  const auto it = query.find(name);
  return it == query.end() ? nullptr : &it->second;
}

Result<MockProvider> ParseMockProvider(std::string_view name) {
  if (name == "aws") return MockProvider::kAws;
  if (name == "gcp") return MockProvider::kGcp;
  if (name == "azure") return MockProvider::kAzure;
  if (name == "alibaba") return MockProvider::kAlibaba;
  return Error{"unknown provider '" + std::string(name.substr(0, 40)) + "' (expected aws, gcp, azure or alibaba)"};
}

const char* ToString(MockProvider provider) {
  switch (provider) {
    case MockProvider::kAws:
      return "aws";
    case MockProvider::kGcp:
      return "gcp";
    case MockProvider::kAzure:
      return "azure";
    case MockProvider::kAlibaba:
      return "alibaba";
  }
  return "?";
}

Result<PreemptSpec> ParsePreemptSpec(std::string_view body) {
  PreemptSpec spec;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return spec;
  using nlohmann::json;
  const json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Error{"preempt body: not a JSON object"};
  for (const auto& [key, value] : doc.items()) {
    if (key == "action" && value.is_string()) {
      const auto action = value.get<std::string>();
      if (action != "terminate" && action != "stop" && action != "hibernate") {
        return Error{"preempt body: action must be terminate, stop or hibernate"};
      }
      spec.action = action;
    } else if (key == "deadline_in_s" && value.is_number()) {
      const double secs = value.get<double>();
      if (!(secs >= -86400.0 && secs <= 86400.0)) {
        return Error{"preempt body: deadline_in_s must be within a day"};
      }
      spec.deadline_in = Duration(static_cast<Duration::rep>(secs * 1000.0));
    } else if (key == "notice" && value.is_boolean()) {
      spec.notice = value.get<bool>();
    } else if (key == "rebalance" && value.is_boolean()) {
      spec.rebalance = value.get<bool>();
    } else if (key == "maintenance" && value.is_boolean()) {
      spec.maintenance = value.get<bool>();
    } else if (key == "other_vm_only" && value.is_boolean()) {
      spec.other_vm_only = value.get<bool>();
    } else if (key == "event_type" && value.is_string()) {
      spec.event_type = value.get<std::string>();
      if (spec.event_type.empty() || spec.event_type.size() > 32) {
        return Error{"preempt body: event_type must be a short name such as Preempt"};
      }
    } else {
      return Error{"preempt body: unknown key or wrong type: '" + key.substr(0, 40) + "'"};
    }
  }
  return spec;
}

std::unique_ptr<MockService> MakeMockService(MockProvider provider, const MockOptions& options) {
  switch (provider) {
    case MockProvider::kAws:
    case MockProvider::kAlibaba:
      return MakeImdsMockService(provider, options);
    case MockProvider::kGcp:
      return MakeGcpMockService(options);
    case MockProvider::kAzure:
      return MakeAzureMockService(options);
  }
  return nullptr;
}

MockReply TextReply(int status, std::string body, std::string content_type) {
  MockReply reply;
  reply.status = status;
  reply.body = std::move(body);
  reply.headers.emplace_back("Content-Type", std::move(content_type));
  return reply;
}

std::string StripSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

namespace {
std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng;
}
}  // namespace

std::string RandomToken(std::size_t length) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string out;
  for (std::size_t i = 0; i < length; ++i) out.push_back(kAlphabet[pick(Rng())]);
  return out;
}

std::string RandomGuid() {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::uniform_int_distribution<int> pick(0, 15);
  std::string out;
  for (const int len : {8, 4, 4, 4, 12}) {
    if (!out.empty()) out.push_back('-');
    for (int i = 0; i < len; ++i) out.push_back(kHex[pick(Rng())]);
  }
  return out;
}

}  // namespace spotvisor::mock
