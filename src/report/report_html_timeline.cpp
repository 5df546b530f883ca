// The run's timeline as inline SVG: a time axis, the machine's sessions, the notices with
// their warning windows drawn to the deadline, one lane per attempt (running, stopping,
// backoff, waiting), the checkpoints by verdict and the step reached over time. Every mark
// has a class and data attributes (tests count them), a shape or pattern besides its colour,
// and a <title> with its exact times.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "report_html_util.hpp"

namespace spotvisor::report::html {
namespace {

using nlohmann::json;

constexpr double kLeft = 130, kRight = 16, kLane = 26, kStepsHeight = 70;

struct Scale {
  std::int64_t start = 0, end = 1;
  double width = 1000;  // of the viewBox: narrower for half a page, so the text comes out larger
  double X(std::int64_t ms) const {
    const double f = static_cast<double>(ms - start) / static_cast<double>(std::max<std::int64_t>(end - start, 1));
    return kLeft + std::clamp(f, 0.0, 1.0) * (width - kLeft - kRight);
  }
  double W(std::int64_t a, std::int64_t b) const { return std::max(X(b) - X(a), 1.5); }
};

std::string Span(std::int64_t a, std::int64_t b) {
  return IsoMs(a) + " to " + IsoMs(b) + " (" + Duration((b - a) / 1000.0) + ")";
}

std::string Rect(double x, double y, double w, double h, const std::string& attrs, const std::string& title) {
  std::ostringstream o;
  o << "<rect x=\"" << Num(x, 1) << "\" y=\"" << Num(y, 1) << "\" width=\"" << Num(w, 1) << "\" height=\"" << Num(h, 1)
    << "\" " << attrs << "><title>" << Esc(title) << "</title></rect>\n";
  return o.str();
}

std::string Label(double y, const std::string& text) {
  return "<text class=\"lane-label\" x=\"" + Num(kLeft - 8, 1) + "\" y=\"" + Num(y + kLane / 2 + 4, 1) +
         "\" text-anchor=\"end\">" + Esc(text) + "</text>\n";
}

// Tick every 1, 2, 5, 10, 15, 30 s ... 1 d: at most about ten.
std::string Axis(const Scale& s, double bottom) {
  static constexpr std::int64_t kSteps[] = {1000,    2000,    5000,     10000,    15000,    30000,
                                            60000,   120000,  300000,   600000,   900000,   1800000,
                                            3600000, 7200000, 10800000, 21600000, 43200000, 86400000};
  std::int64_t step = kSteps[std::size(kSteps) - 1];
  for (auto k : kSteps) {
    if ((s.end - s.start) / k <= 10) {
      step = k;
      break;
    }
  }
  std::ostringstream o;
  for (std::int64_t t = 0; s.start + t <= s.end; t += step) {
    const double x = s.X(s.start + t);
    const std::int64_t sec = t / 1000;
    char buf[32];
    if (sec >= 3600) {
      std::snprintf(buf, sizeof buf, "+%lldh%02lld", static_cast<long long>(sec / 3600),
                    static_cast<long long>(sec % 3600 / 60));
    } else {
      std::snprintf(buf, sizeof buf, "+%lld:%02lld", static_cast<long long>(sec / 60),
                    static_cast<long long>(sec % 60));
    }
    o << "<line class=\"grid\" x1=\"" << Num(x, 1) << "\" x2=\"" << Num(x, 1) << "\" y1=\"18\" y2=\"" << Num(bottom, 1)
      << "\"/><text class=\"tick\" x=\"" << Num(x, 1) << "\" y=\"13\" text-anchor=\"middle\">" << buf << "<title>"
      << IsoMs(s.start + t) << "</title></text>\n";
  }
  return o.str();
}

std::string Defs(const std::string& id) {
  std::ostringstream o;
  o << "<defs>"
    << "<pattern id=\"" << id << "-stop\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
    << "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"" << kOrange
    << "\"/><rect width=\"2.5\" height=\"6\" fill=\"#fff\" opacity=\"0.55\"/></pattern>"
    << "<pattern id=\"" << id
    << "-backoff\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"><rect width=\"6\" "
    << "height=\"6\" fill=\"" << kVermillion << "\" opacity=\"0.35\"/><circle cx=\"3\" cy=\"3\" r=\"1.4\" fill=\""
    << kVermillion << "\"/></pattern>"
    << "<pattern id=\"" << id << "-wait\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"><rect width=\"6\" "
    << "height=\"6\" fill=\"#ddd\"/><rect y=\"2\" width=\"6\" height=\"1.5\" fill=\"" << kGrey << "\"/></pattern>"
    << "</defs>\n";
  return o.str();
}

// The notice's outcome and the seconds to its saved checkpoint, when the report has them.
std::pair<std::string, json> NoticeFacts(const json& report, std::size_t i) {
  const json& notices = report.value("notices", json::array());
  if (!notices.is_array() || i >= notices.size()) return {"", nullptr};
  const json& n = notices[i];
  return {Field(n, "outcome", ""), n.value("saved_after_s", json(nullptr))};
}

std::string NoticeMarks(const json& report, const Scale& s, double y, double bottom) {
  std::ostringstream o;
  const json& notices = report["timeline"]["notices"];
  for (std::size_t i = 0; i < notices.size(); ++i) {
    const json& n = notices[i];
    const auto received = n["received_ms"].get<std::int64_t>();
    const auto [outcome, saved_after] = NoticeFacts(report, i);
    std::string title = "notice " + std::to_string(i + 1) + " (" + n.value("provider", "") + " " + n.value("kind", "") +
                        ", " + n.value("action", "") + ", attempt " + std::to_string(n.value("attempt", 0)) +
                        "): seen " + IsoMs(received);
    if (n["deadline_ms"].is_number()) {
      const auto deadline = n["deadline_ms"].get<std::int64_t>();
      title += ", deadline " + IsoMs(deadline) + " (" + Duration((deadline - received) / 1000.0) + " warning)";
      o << Rect(s.X(received), y + 5, s.W(received, deadline), kLane - 10,
                "class=\"notice-window\" fill=\"" + std::string(kYellow) + "\" stroke=\"#000\" stroke-width=\"0.8\"",
                "warning window: " + Span(received, deadline) +
                    (deadline > s.end ? " (the deadline lies after the end of the run: cut at the right edge)" : ""));
      if (deadline > s.end) {
        const double x = s.X(s.end), cy = y + kLane / 2;
        o << "<path class=\"notice-window-cut\" d=\"M" << Num(x - 7, 1) << " " << Num(cy - 6, 1)
          << "l7 6l-7 6z\" fill=\"#000\"><title>deadline " << IsoMs(deadline)
          << ", after the end of the run</title></path>\n";
      }
    }
    if (n["signal_ms"].is_number()) title += ", trainer signalled " + IsoMs(n["signal_ms"].get<std::int64_t>());
    if (saved_after.is_number()) {
      const auto saved = received + static_cast<std::int64_t>(saved_after.get<double>() * 1000);
      title += ", checkpoint saved " + IsoMs(saved);
      const double x = s.X(saved), cy = y + kLane / 2;
      o << "<path class=\"notice-saved\" d=\"M" << Num(x, 1) << " " << Num(cy - 6, 1) << "l6 6l-6 6l-6 -6z\" fill=\""
        << (outcome == "saved" ? kGreen : kVermillion) << "\" stroke=\"#000\"><title>saved "
        << Esc(Num(saved_after.get<double>(), 3)) << " s after the notice: " << IsoMs(saved) << "</title></path>\n";
    }
    if (!outcome.empty()) title += "; outcome " + outcome;
    const double x = s.X(received);
    o << "<line class=\"notice-line\" x1=\"" << Num(x, 1) << "\" x2=\"" << Num(x, 1) << "\" y1=\"" << Num(y, 1)
      << "\" y2=\"" << Num(bottom, 1) << "\"/>";
    o << "<path class=\"notice-marker\" data-outcome=\"" << Esc(outcome) << "\" d=\"M" << Num(x - 7, 1) << " "
      << Num(y + 2, 1) << "h14l-7 12z\" fill=\"#000\"><title>" << Esc(title) << "</title></path>\n";
  }
  return o.str();
}

std::string AttemptLanes(const json& t, const Scale& s, double y, const std::string& id) {
  std::ostringstream o;
  for (const auto& a : t["attempts"]) {
    const int n = a["attempt"].get<int>();
    const auto start = a["start_ms"].get<std::int64_t>(), end = a["end_ms"].get<std::int64_t>();
    const std::string outcome = a.value("outcome", "");
    o << Label(y, "attempt " + std::to_string(n));
    o << Rect(s.X(start), y + 4, s.W(start, end), kLane - 8,
              "class=\"attempt-bar\" data-attempt=\"" + std::to_string(n) + "\" data-outcome=\"" + Esc(outcome) +
                  "\" fill=\"" + kBlue + "\"",
              "attempt " + std::to_string(n) + " running: " + Span(start, end) + ", outcome " + outcome +
                  (a["resume_step"].is_number() ? ", resumed at step " + Text(a["resume_step"]) : ", fresh start"));
    for (const auto& g : t["gaps"]) {
      if (g["attempt"] != a["attempt"]) continue;
      const std::string kind = g["kind"].get<std::string>();
      const auto gs = g["start_ms"].get<std::int64_t>(), ge = g["end_ms"].get<std::int64_t>();
      const std::string fill = kind == "stopping" ? "-stop" : kind == "backoff" ? "-backoff" : "-wait";
      o << Rect(s.X(gs), y + (kind == "stopping" ? 4 : 7), s.W(gs, ge), kLane - (kind == "stopping" ? 8 : 14),
                "class=\"gap-bar\" data-kind=\"" + Esc(kind) + "\" fill=\"url(#" + id + fill + ")\" stroke=\"#555\"",
                kind + ": " + Span(gs, ge));
    }
    double xe = s.X(end) + 4;  // the outcome after the bar and whatever follows it in the lane
    for (const auto& g : t["gaps"]) {
      if (g["attempt"] == a["attempt"]) xe = std::max(xe, s.X(g["end_ms"].get<std::int64_t>()) + 4);
    }
    if (xe < s.width - 60) {
      o << "<text class=\"bar-note\" x=\"" << Num(xe, 1) << "\" y=\"" << Num(y + kLane / 2 + 4, 1) << "\">"
        << Esc(outcome) << "</text>\n";
    }
    y += kLane;
  }
  return o.str();
}

// `shift`: up or down from the lane's middle, so that ticks at nearly the same time stay apart.
std::string Tick(const json& c, const Scale& s, double y, double shift) {
  const std::string verdict = c["verdict"].get<std::string>();
  const double x = s.X(c["ms"].get<std::int64_t>()), cy = y + kLane / 2 + shift;
  std::string shape;
  if (verdict == "good") {
    shape = "<circle cx=\"" + Num(x, 1) + "\" cy=\"" + Num(cy, 1) + "\" r=\"5\" fill=\"" + kGreen + "\"/>";
  } else if (verdict == "corrupt") {
    shape = "<path d=\"M" + Num(x - 5, 1) + " " + Num(cy - 5, 1) + "l10 10m0 -10l-10 10\" stroke=\"" + kVermillion +
            "\" stroke-width=\"3\"/>";
  } else {
    shape = "<rect x=\"" + Num(x - 5, 1) + "\" y=\"" + Num(cy - 5, 1) + "\" width=\"10\" height=\"10\" fill=\"" +
            kPurple + "\" stroke=\"#000\"/>";
  }
  const std::string title = "checkpoint " + c.value("name", "") + " (" + verdict +
                            (c["step"].is_number() ? ", step " + Text(c["step"]) : "") + "), seen " +
                            IsoMs(c["ms"].get<std::int64_t>()) + ": " + c.value("reason", "");
  return "<g class=\"ckpt-tick\" data-verdict=\"" + Esc(verdict) + "\">" + shape + "<title>" + Esc(title) +
         "</title></g>\n";
}

std::string StepLine(const json& t, const Scale& s, double y) {
  const json& steps = t["steps"];
  std::uint64_t top = 1;
  for (const auto& p : steps) top = std::max(top, p["step"].get<std::uint64_t>());
  const auto Y = [&](std::uint64_t step) { return y + kStepsHeight - 6 - (kStepsHeight - 12) * step / double(top); };
  std::ostringstream o;
  o << "<text class=\"lane-label\" x=\"" << Num(kLeft - 8, 1) << "\" y=\"" << Num(y + 14, 1)
    << "\" text-anchor=\"end\">step</text><text class=\"tick\" x=\"" << Num(kLeft - 8, 1) << "\" y=\"" << Num(y + 30, 1)
    << "\" text-anchor=\"end\">max " << top << "</text>\n";
  std::string points;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const double x = s.X(steps[i]["ms"].get<std::int64_t>());
    if (i > 0) points += Num(x, 1) + "," + Num(Y(steps[i - 1]["step"].get<std::uint64_t>()), 1) + " ";
    points += Num(x, 1) + "," + Num(Y(steps[i]["step"].get<std::uint64_t>()), 1) + " ";
  }
  o << "<polyline class=\"step-line\" points=\"" << points << "\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"/>";
  for (const auto& p : steps) {
    o << "<circle class=\"step-point\" cx=\"" << Num(s.X(p["ms"].get<std::int64_t>()), 1) << "\" cy=\""
      << Num(Y(p["step"].get<std::uint64_t>()), 1) << "\" r=\"2.5\" fill=\"" << kSky
      << "\" stroke=\"#000\"><title>step " << p["step"].get<std::uint64_t>() << " at "
      << IsoMs(p["ms"].get<std::int64_t>()) << "</title></circle>";
  }
  return o.str() + "\n";
}

}  // namespace

std::string TimelineSvg(const json& report, const std::string& id, double width) {
  if (!report.contains("timeline") || report["timeline"]["start_ms"].get<std::int64_t>() <= 0) {
    return "<p class=\"note\">No timeline in this report (written by an older spotvisor, or nothing happened).</p>";
  }
  const json& t = report["timeline"];
  Scale s{t["start_ms"].get<std::int64_t>(),
          std::max(t["end_ms"].get<std::int64_t>(), t["start_ms"].get<std::int64_t>() + 1000), width};
  const double lanes_top = 22, attempts_top = lanes_top + 2 * kLane;
  const double ckpt_top = attempts_top + kLane * static_cast<double>(t["attempts"].size());
  const double steps_top = ckpt_top + kLane, bottom = steps_top + kStepsHeight;
  std::ostringstream o;
  o << "<svg class=\"timeline\" viewBox=\"0 0 " << s.width << " " << Num(bottom + 4, 0)
    << "\" role=\"img\" aria-label=\"timeline of the run\" xmlns=\"http://www.w3.org/2000/svg\">\n"
    << Defs(id) << Axis(s, bottom);
  o << Label(lanes_top, "machine");
  for (const auto& m : t["sessions"]) {
    const auto a = m["start_ms"].get<std::int64_t>(), b = m["end_ms"].get<std::int64_t>();
    o << Rect(s.X(a), lanes_top + 8, s.W(a, b), kLane - 16, "class=\"session-bar\" fill=\"" + std::string(kGrey) + "\"",
              "machine session on " + m.value("hostname", "") + ": " + Span(a, b) +
                  (m["exit_code"].is_number() ? ", spotvisor exit " + Text(m["exit_code"]) : ", no clean exit"));
  }
  o << Label(lanes_top + kLane, "notices") << AttemptLanes(t, s, attempts_top, id) << Label(ckpt_top, "checkpoints");
  double last_x = -100;
  int crowd = 0;  // ticks in a row closer than a tick's width: middle, up, down, middle, ...
  for (const auto& c : t["checkpoints"]) {
    const double x = s.X(c["ms"].get<std::int64_t>());
    crowd = std::abs(x - last_x) < 9 ? crowd + 1 : 0;
    last_x = x;
    o << Tick(c, s, ckpt_top, crowd % 3 == 0 ? 0.0 : crowd % 3 == 1 ? -7.0 : 7.0);
  }
  o << StepLine(t, s, steps_top) << NoticeMarks(report, s, lanes_top + kLane, bottom);
  o << "</svg>\n";
  return o.str();
}

}  // namespace spotvisor::report::html
