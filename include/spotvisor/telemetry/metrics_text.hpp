// Builds one Prometheus text exposition (format 0.0.4): families with HELP and TYPE, then
// their samples, label values escaped. Rendered fresh on every scrape. Not thread-safe;
// one builder per scrape.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spotvisor::telemetry {

using Labels = std::vector<std::pair<std::string, std::string>>;

class MetricsText {
 public:
  // Starts a family; `type` is counter, gauge or untyped. Samples that follow belong to it.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // A sample of the current family (`suffix` e.g. "_total" is appended to its name).
  void Sample(double value, const Labels& labels = {}, std::string_view suffix = "");

  const std::string& text() const { return out_; }

  static std::string EscapeLabelValue(std::string_view value);
  static std::string FormatValue(double value);

 private:
  std::string out_;     // the exposition so far
  std::string family_;  // name of the current family
};

}  // namespace spotvisor::telemetry
