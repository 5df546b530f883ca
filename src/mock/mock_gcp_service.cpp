// The GCE metadata server fake: `Metadata-Flavor: Google` required on requests and sent on
// answers, an ETag per value, `wait_for_change` held until the value's ETag differs from
// `last_etag` (or `timeout_sec` passes), 404 HTML for unknown keys, directory listings,
// `recursive=true` as JSON. With gke_workload_identity, the GKE metadata server's narrower
// instance/ (no preempted, no maintenance-event: 404).
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "mock_service.hpp"

namespace spotvisor::mock {
namespace {

constexpr const char* kBase = "/computeMetadata/v1";
constexpr std::chrono::hours kDefaultHold{1};  // wait_for_change without timeout_sec

std::string NotFoundPage() {
  return "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n"
         "  <title>Error 404 (Not Found)!!1</title>\n"
         "  <p><b>404.</b> <ins>That's an error.</ins>\n"
         "  <p>The requested URL was not found on this server.  <ins>That's all we know.</ins>\n";
}

class GcpMockService final : public MockService {
 public:
  explicit GcpMockService(const MockOptions& options) {
    values_ = {
        {"instance/preempted", "FALSE"},
        {"instance/maintenance-event", "NONE"},
        {"instance/scheduling/preemptible", "TRUE"},
        {"instance/scheduling/provisioning-model", "SPOT"},
        {"instance/scheduling/on-host-maintenance", "TERMINATE"},
        {"instance/scheduling/automatic-restart", "FALSE"},
        {"instance/id", "4520031799277581759"},
        {"instance/name", "spotvisor-mock"},
        {"instance/hostname", "spotvisor-mock.us-central1-a.c.spotvisor-mock.internal"},
        {"instance/machine-type", "projects/123456789012/machineTypes/a2-highgpu-1g"},
        {"instance/zone", "projects/123456789012/zones/us-central1-a"},
        {"project/project-id", "spotvisor-mock"},
        {"project/numeric-project-id", "123456789012"},
    };
    hidden_ = options.gke_workload_identity;
    if (hidden_) {  // what a pod sees behind the GKE metadata server
      std::erase_if(values_, [](const auto& kv) {
        const std::string& key = kv.first;
        return key.rfind("instance/", 0) == 0 && key != "instance/id" && key != "instance/hostname" &&
               key != "instance/zone";
      });
    }
    for (const auto& [key, value] : values_) versions_[key] = 1;
  }

  MockReply Handle(MockRequest& request) override {
    if (request.Header("x-forwarded-for") != nullptr) return Forbidden();
    const std::string* flavor = request.Header("metadata-flavor");
    if (flavor == nullptr || *flavor != "Google") return Forbidden();
    if (request.method != "GET" && request.method != "HEAD") {
      return Stamp(TextReply(405, "Method Not Allowed\n"), "");
    }
    std::string path = request.path;
    if (path.rfind(kBase, 0) != 0) return NotFound();
    path = path.substr(std::string(kBase).size());
    if (!path.empty() && path.front() == '/') path.erase(0, 1);
    const bool directory = path.empty() || path.back() == '/' || IsDirectory(path);
    const std::string key = StripSlash(path);
    const std::string* wait = request.Query("wait_for_change");
    const bool waiting = wait != nullptr && *wait == "true";
    if (directory) {
      const std::string* recursive = request.Query("recursive");
      if (waiting && (recursive == nullptr || *recursive != "true")) {
        return Stamp(TextReply(400,
                               "non-recursive directory listings do not support "
                               "wait_for_change\n"),
                     "");
      }
      return Directory(key == "/" ? "" : key, recursive != nullptr && *recursive == "true");
    }
    const auto it = values_.find(key);
    if (it == values_.end()) return NotFound();
    const std::string etag = Etag(key);
    if (waiting && !request.answer_now) {
      // Without last_etag the wait is for a change from the value as it is now.
      if (request.Query("last_etag") == nullptr) request.query["last_etag"] = etag;
      if (*request.Query("last_etag") == etag) {  // nothing new yet: hold it
        MockReply hold;
        hold.hold = true;
        hold.hold_for = HoldFor(request);
        return hold;
      }
    }
    return Stamp(TextReply(200, it->second, "application/text"), etag);
  }

  void Preempt(const PreemptSpec& spec) override {
    preempted_ = true;
    Set(spec.maintenance ? "instance/maintenance-event" : "instance/preempted",
        spec.maintenance ? "TERMINATE_ON_HOST_MAINTENANCE" : "TRUE");
  }

  void Clear() override {
    preempted_ = false;
    Set("instance/preempted", "FALSE");
    Set("instance/maintenance-event", "NONE");
  }

  bool preempted() const override { return preempted_; }

 private:
  void Set(const std::string& key, const std::string& value) {
    if (hidden_ && key.rfind("instance/", 0) == 0 && !values_.contains(key)) return;  // still 404
    if (values_[key] == value) return;
    values_[key] = value;
    ++versions_[key];
  }

  // 16 hex digits that change whenever the value does.
  std::string Etag(const std::string& key) const {
    const std::uint64_t h =
        std::hash<std::string>{}(key + "#" + std::to_string(versions_.at(key)) + "=" + values_.at(key));
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }

  static Duration HoldFor(const MockRequest& request) {
    const std::string* timeout = request.Query("timeout_sec");
    if (timeout == nullptr || timeout->empty() || timeout->size() > 6 ||
        timeout->find_first_not_of("0123456789") != std::string::npos) {
      return kDefaultHold;
    }
    return std::chrono::seconds(std::stol(*timeout));
  }

  bool IsDirectory(const std::string& path) const {
    const std::string prefix = StripSlash(path) + "/";
    for (const auto& [key, value] : values_) {
      if (key.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }

  MockReply Directory(const std::string& dir, bool recursive) const {
    const std::string prefix = dir.empty() ? "" : dir + "/";
    if (recursive) {
      nlohmann::json doc = nlohmann::json::object();
      for (const auto& [key, value] : values_) {
        if (key.rfind(prefix, 0) != 0) continue;
        nlohmann::json* node = &doc;
        std::string rest = key.substr(prefix.size());
        for (auto slash = rest.find('/'); slash != std::string::npos; slash = rest.find('/')) {
          node = &(*node)[CamelCase(rest.substr(0, slash))];
          rest = rest.substr(slash + 1);
        }
        (*node)[CamelCase(rest)] = value;
      }
      return Stamp(TextReply(200, doc.dump(), "application/json"), "");
    }
    std::string listing;
    for (const auto& [key, value] : values_) {
      if (key.rfind(prefix, 0) != 0) continue;
      std::string rest = key.substr(prefix.size());
      const auto slash = rest.find('/');
      if (slash != std::string::npos) rest = rest.substr(0, slash + 1);
      if (listing.find(rest + "\n") == std::string::npos) listing += rest + "\n";
    }
    if (listing.empty()) return NotFound();
    return Stamp(TextReply(200, listing, "application/text"), "");
  }

  // "maintenance-event" -> "maintenanceEvent", as recursive JSON names keys.
  static std::string CamelCase(const std::string& name) {
    std::string out;
    bool upper = false;
    for (const char c : name) {
      if (c == '-') {
        upper = true;
        continue;
      }
      out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
      upper = false;
    }
    return out;
  }

  static MockReply Stamp(MockReply reply, const std::string& etag) {
    reply.headers.emplace_back("Metadata-Flavor", "Google");
    reply.headers.emplace_back("Server", "Metadata Server for VM");
    if (!etag.empty()) reply.headers.emplace_back("ETag", etag);
    return reply;
  }

  static MockReply NotFound() { return Stamp(TextReply(404, NotFoundPage(), "text/html"), ""); }

  static MockReply Forbidden() {
    return TextReply(403,
                     "<!DOCTYPE html>\n<html lang=en>\n  <title>Error 403 (Forbidden)!!1"
                     "</title>\n  <p>Your client does not have permission to get URL. "
                     "Missing Metadata-Flavor:Google header.\n",
                     "text/html");
  }

  std::map<std::string, std::string> values_;      // key -> value
  std::map<std::string, std::uint64_t> versions_;  // key -> change count (feeds the ETag)
  bool hidden_ = false;                            // GKE metadata server: most of instance/ is 404
  bool preempted_ = false;
};

}  // namespace

std::unique_ptr<MockService> MakeGcpMockService(const MockOptions& options) {
  return std::make_unique<GcpMockService>(options);
}

}  // namespace spotvisor::mock
