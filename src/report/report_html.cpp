// The run report as one self-contained HTML page: inline CSS and SVG only, no script, no
// font or image from anywhere, and a Content-Security-Policy that forbids every load, so it
// opens offline and shows the same wherever it is opened. The timeline (report_html_timeline),
// the goodput buckets as a stacked bar, then the report's tables (report_html_tables); with
// a baseline, the comparison table and the two runs side by side.
#include <algorithm>
#include <sstream>
#include <vector>

#include "report_html_util.hpp"
#include "spotvisor/cost/cost_model.hpp"
#include "spotvisor/report/report.hpp"

namespace spotvisor::report {
namespace html {
namespace {

using nlohmann::json;

constexpr const char* kCss = R"(
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0 auto;
 padding:16px 24px;max-width:1500px;color:#111;background:#fff}
h1{font-size:22px;margin:4px 0 12px}h2{font-size:19px;margin:22px 0 8px}h3{font-size:16px;margin:18px 0 6px}
.runs{display:grid;grid-template-columns:1fr 1fr;gap:24px}.runs>section{min-width:0}
svg{width:100%;height:auto;display:block}
svg text{font-size:12px;fill:#111}svg .tick{font-size:11px;fill:#444}svg .lane-label{font-weight:600}
svg .grid{stroke:#e4e4e4}svg .notice-line{stroke:#000;stroke-dasharray:4 3;stroke-width:1}
svg .bar-note{font-size:11px;fill:#333}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13.5px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
tr>th{background:#f3f3f3}table.kv th{width:14em;font-weight:600}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:13px;margin:6px 0}
.legend span{display:inline-flex;align-items:center;gap:5px}.legend svg{width:22px;height:14px;display:inline}
.note{color:#444;font-size:13.5px}
)";

std::string Swatch(const std::string& shape, const std::string& label) {
  return "<span><svg viewBox=\"0 0 22 14\" aria-hidden=\"true\">" + shape + "</svg>" + Esc(label) + "</span>";
}

std::string Legend() {
  using std::string;
  return "<div class=\"legend\">" +
         Swatch("<rect x=\"1\" y=\"2\" width=\"20\" height=\"10\" fill=\"" + string(kBlue) + "\"/>", "running") +
         Swatch("<rect x=\"1\" y=\"2\" width=\"20\" height=\"10\" fill=\"" + string(kOrange) +
                    "\" stroke=\"#555\"/><path d=\"M3 12l8-10M11 12l8-10\" stroke=\"#fff\" stroke-width=\"2\"/>",
                "stopping (notice to exit; striped)") +
         Swatch("<rect x=\"1\" y=\"4\" width=\"20\" height=\"6\" fill=\"" + string(kVermillion) +
                    "\" opacity=\"0.35\" stroke=\"#555\"/><circle cx=\"7\" cy=\"7\" r=\"1.5\"/><circle cx=\"14\" "
                    "cy=\"7\" r=\"1.5\"/>",
                "backoff (dotted)") +
         Swatch(
             "<rect x=\"1\" y=\"4\" width=\"20\" height=\"6\" fill=\"#ddd\" stroke=\"#555\"/><path d=\"M1 7h20\" "
             "stroke=\"" +
                 string(kGrey) + "\" stroke-width=\"1.5\"/>",
             "waiting (lined)") +
         Swatch("<path d=\"M4 2h14l-7 11z\"/>", "notice") +
         Swatch("<rect x=\"1\" y=\"3\" width=\"20\" height=\"8\" fill=\"" + string(kYellow) + "\" stroke=\"#000\"/>",
                "warning window to the deadline") +
         Swatch("<path d=\"M11 1l6 6l-6 6l-6-6z\" fill=\"" + string(kGreen) + "\" stroke=\"#000\"/>",
                "saved after the notice (vermillion: late)") +
         Swatch("<circle cx=\"11\" cy=\"7\" r=\"5\" fill=\"" + string(kGreen) + "\"/>", "good checkpoint") +
         Swatch("<path d=\"M6 2l10 10m0-10l-10 10\" stroke=\"" + string(kVermillion) + "\" stroke-width=\"3\"/>",
                "corrupt checkpoint") +
         Swatch("<rect x=\"6\" y=\"2\" width=\"10\" height=\"10\" fill=\"" + string(kPurple) + "\" stroke=\"#000\"/>",
                "quarantined at resume") +
         Swatch("<path d=\"M1 11h7v-5h7v-4h6\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"/>", "step reached") +
         "</div>\n";
}

struct Bucket {
  const char* name;
  const char* colour;
};
constexpr Bucket kBuckets[] = {{"productive", kGreen}, {"checkpointing", kSky}, {"startup", kYellow},
                               {"lost", kVermillion},  {"disrupted", kOrange},  {"waiting", kPurple},
                               {"idle", kGrey}};

std::string BucketCost(const json& goodput, const char* name) {
  const json& cost = goodput.value("cost", json(nullptr));
  if (!cost.is_object() || !cost.contains(name)) return "unknown";
  const json& c = cost[name];
  if (!c.is_object() || !c.value("low", json(nullptr)).is_number()) return "unknown";
  const double low = c["low"].get<double>();
  const json& high = c.value("high", json(nullptr));
  if (!high.is_number()) return "at least " + cost::FormatMoney(low);
  return high.get<double>() == low ? cost::FormatMoney(low)
                                   : cost::FormatMoney(low) + "-" + cost::FormatMoney(high.get<double>());
}

std::string Goodput(const json& r) {
  std::ostringstream o;
  o << "<h3>Where the billed time went</h3>\n";
  const json& g = r.value("goodput", json(nullptr));
  if (!g.is_object() || !g.value("buckets", json(nullptr)).is_object()) {
    const json goodput = r.value("work", json::object()).value("goodput", json(nullptr));
    return o.str() + "<p class=\"note\">No goodput buckets in this report; goodput " +
           (goodput.is_number() ? Num(goodput.get<double>() * 100, 1) + " %" : std::string("unknown")) +
           " of billed time.</p>\n";
  }
  const json& buckets = g["buckets"];
  double billed = 0;
  for (const auto& b : kBuckets) {
    const json& v = buckets.value(std::string(b.name) + "_s", json(nullptr));
    if (v.is_number()) billed += v.get<double>();
  }
  if (g.value("billed_s", json(nullptr)).is_number()) billed = std::max(billed, g["billed_s"].get<double>());
  o << "<svg class=\"goodput\" viewBox=\"0 0 1000 40\" role=\"img\" aria-label=\"goodput buckets\" "
       "xmlns=\"http://www.w3.org/2000/svg\">\n";
  double x = 0;
  std::ostringstream table;
  table << "<table><tr><th>bucket</th><th>time</th><th>share of billed</th><th>cost</th></tr>\n";
  for (const auto& b : kBuckets) {
    const std::string key = std::string(b.name) + "_s";
    if (!buckets.contains(key) || !buckets[key].is_number()) continue;
    const double v = buckets[key].get<double>(), share = billed > 0 ? v / billed : 0, w = 1000 * share;
    const std::string pct = Num(share * 100, 1) + " %";
    if (w > 0) {
      o << "<rect class=\"goodput-segment\" data-bucket=\"" << b.name << "\" x=\"" << Num(x, 1) << "\" y=\"2\" width=\""
        << Num(w, 1) << "\" height=\"36\" fill=\"" << b.colour << "\" stroke=\"#fff\"><title>" << b.name << ": "
        << Num(v, 3) << " s (" << pct << " of " << Num(billed, 3) << " s billed)</title></rect>";
      if (w > 90) {
        o << "<text x=\"" << Num(x + 5, 1) << "\" y=\"25\">" << b.name << " " << pct << "</text>";
      }
      o << "\n";
    }
    table << "<tr><td><svg viewBox=\"0 0 12 12\" style=\"width:12px;display:inline\" aria-hidden=\"true\"><rect "
             "width=\"12\" height=\"12\" fill=\""
          << b.colour << "\"/></svg> " << b.name << "</td><td>" << Esc(Duration(v)) << " (" << Num(v, 3)
          << " s)</td><td>" << pct << "</td><td>" << Esc(BucketCost(g, b.name)) << "</td></tr>\n";
    x += w;
  }
  o << "</svg>\n" << table.str() << "</table>\n";
  o << "<p class=\"note\">Billed " << Esc(Duration(billed)) << "; first progress from "
    << Esc(Field(g, "first_progress_from")) << ". Narrow segments: hover for their figures.</p>\n";
  return o.str();
}

std::string RunSection(const json& r, const std::string& id, const std::string& role, int width) {
  std::ostringstream o;
  o << "<section class=\"run\" data-run=\"" << Esc(id) << "\">\n";
  if (!role.empty()) o << "<h2>" << Esc(role) << Esc(Field(r, "job")) << "</h2>\n";
  o << "<p class=\"note\">" << Esc(Field(r, "start")) << " to " << Esc(Field(r, "stop"))
    << ". Times on the axis are from the first session's start; hover any mark for its exact times (UTC).</p>\n";
  o << TimelineSvg(r, id, width) << Legend() << Goodput(r) << Tables(r) << "</section>\n";
  return o.str();
}

std::string Page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
         "img-src data:; base-uri 'none'; form-action 'none'\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
         Esc(title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n" + body + "</body>\n</html>\n";
}

std::string ComparisonTable(const json& c) {
  std::ostringstream o;
  o << "<table class=\"comparison\"><tr><th>metric</th><th>run</th><th>baseline</th><th>run / baseline</th></tr>\n";
  for (const auto& row : c.value("rows", json::array())) {
    o << "<tr><td>" << Esc(Field(row, "metric")) << "</td><td>" << Esc(Field(row, "run")) << "</td><td>"
      << Esc(Field(row, "baseline")) << "</td><td>" << Esc(Field(row, "ratio", "-")) << "</td></tr>\n";
  }
  return o.str() + "</table>\n";
}

}  // namespace
}  // namespace html

std::string RenderHtml(const nlohmann::json& report, const nlohmann::json* baseline) {
  using namespace html;
  if (!baseline) {
    return Page("Run report: " + Field(report, "job"),
                "<h1>Run report: " + Esc(Field(report, "job")) + "</h1>\n" + RunSection(report, "run", "", 1000));
  }
  const std::string title = Field(report, "job") + " vs baseline " + Field(*baseline, "job");
  return Page(title, "<h1>" + Esc(title) + "</h1>\n" + ComparisonTable(CompareReports(report, *baseline)) +
                         "<div class=\"runs\">\n" + RunSection(report, "run", "Run: ", 680) +
                         RunSection(*baseline, "baseline", "Baseline: ", 680) + "</div>\n");
}

std::string RenderGroupHtml(const std::vector<nlohmann::json>& nodes) {
  using namespace html;
  // One time axis for every node: the first start and the last end of any of them.
  std::int64_t start = 0, end = 0;
  for (const auto& r : nodes) {
    const json& t = r.value("timeline", json::object());
    const std::int64_t s = t.value("start_ms", std::int64_t{0}), e = t.value("end_ms", std::int64_t{0});
    if (s > 0 && (start == 0 || s < start)) start = s;
    end = std::max(end, e);
  }
  const std::string job = nodes.empty() ? std::string() : Field(nodes.front(), "job");
  std::string body = "<h1>Group report: " + Esc(job) + "</h1>\n<p class=\"note\">" + std::to_string(nodes.size()) +
                     " nodes, each from its own state dir, on one time axis: a node's attempts are the epochs it "
                     "trained in, whichever rank it had.</p>\n";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    json r = nodes[i];
    if (start > 0 && r.contains("timeline") && r["timeline"].value("start_ms", std::int64_t{0}) > 0) {
      r["timeline"]["start_ms"] = start;
      r["timeline"]["end_ms"] = end;
    }
    const std::string host = Field(r.value("host", json::object()), "hostname", "");
    body += RunSection(r, "node-" + std::to_string(i),
                       "Node " + std::to_string(i) + (host.empty() ? "" : " (" + host + ")") + ": ", 1000);
  }
  return Page("Group report: " + job, body);
}

}  // namespace spotvisor::report
