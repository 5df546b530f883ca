// The HTML report's tables: the same facts as the Markdown report (report_markdown.cpp),
// as HTML tables. Every string from the run is escaped; a field an older report lacks
// prints as "unknown" or is left out.
#include <sstream>

#include "report_html_util.hpp"
#include "spotvisor/cost/cost_model.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::report::html {
namespace {

using nlohmann::json;

std::string Row(const std::string& key, const std::string& value) {
  return "<tr><th scope=\"row\">" + Esc(key) + "</th><td>" + Esc(value) + "</td></tr>\n";
}

std::string Cells(std::initializer_list<std::string> cells, const char* tag = "td") {
  std::string out = "<tr>";
  for (const auto& c : cells) out += std::string("<") + tag + ">" + Esc(c) + "</" + tag + ">";
  return out + "</tr>\n";
}

std::string Bytes(const json& v) { return v.is_number() ? FormatSize(v.get<std::uint64_t>()) : "unknown"; }

std::string Percent(const json& v) { return v.is_number() ? Num(v.get<double>() * 100.0, 1) + " %" : "unknown"; }

std::string Range(const json& low, const json& high) {
  if (!low.is_number()) return "unknown";
  if (!high.is_number()) return "at least " + cost::FormatMoney(low.get<double>());
  const double lo = low.get<double>(), hi = high.get<double>();
  return lo == hi ? cost::FormatMoney(lo) : cost::FormatMoney(lo) + "-" + cost::FormatMoney(hi);
}

std::string Summary(const json& r) {
  std::ostringstream o;
  o << "<table class=\"kv\">\n";
  const json& res = r.value("result", json::object());
  o << Row("result",
           "exit " + Field(res, "exit_code", "none (still running or killed)") + ": " + Field(res, "message", ""));
  o << Row("start / stop", Field(r, "start") + " / " + Field(r, "stop"));
  o << Row("spotvisor", Field(r, "spotvisor_version") + ", config hash " + Field(r, "config_hash"));
  const json& h = r.value("host", json::object());
  o << Row("host", Field(h, "hostname") + ", provider " + Field(h, "provider") + ", instance type " +
                       Field(h, "instance_type") + ", zone " + Field(h, "zone") + ", region " + Field(h, "region") +
                       " (" + Field(h, "source") + ")");
  const json& g = r.value("gpu", json::object());
  if (g.value("available", false)) {
    std::string models;
    for (const auto& m : g.value("models", json::array())) models += (models.empty() ? "" : ", ") + Text(m);
    o << Row("GPU", models + " (driver " + Field(g, "driver") + "), peak VRAM " +
                        Bytes(g.value("peak_vram_bytes", json(nullptr))));
  } else {
    o << Row("GPU", "none seen: " + Field(g, "reason", "not sampled"));
  }
  const json labels = r.value("labels", json::object());  // items() of a temporary would dangle
  for (const auto& [k, v] : labels.items()) o << Row("label " + k, Text(v));
  for (const auto& f : r.value("fingerprints", json::array())) {
    o << Row("file " + Field(f, "path"), Field(f, "error", "").empty()
                                             ? Field(f, "hash") + ", " + Bytes(f.value("bytes", json(nullptr)))
                                             : "not fingerprinted: " + Field(f, "error"));
  }
  return o.str() + "</table>\n";
}

std::string Work(const json& r) {
  const json& w = r.value("work", json::object());
  std::ostringstream o;
  o << "<h3>Work</h3>\n<table class=\"kv\">\n";
  o << Row("steps done (durable)",
           Field(w, "steps_done") + " (from step " + Field(w, "initial_step") + " to " + Field(w, "final_step") + ")");
  o << Row("steps lost", Field(w, "steps_lost_measured") + " measured, about " + Field(w, "steps_lost_estimated") +
                             " estimated (" + Field(w, "lost_seconds") + " s of work)");
  o << Row("throughput", Field(w, "steps_per_second") + " steps/s");
  o << Row("trainer time / billed time", Field(w, "trainer_seconds") + " s / " + Field(w, "billed_hours") + " h");
  o << Row("goodput", Percent(w.value("goodput", json(nullptr))));
  const json& c = r.value("checkpoints", json::object());
  o << Row("checkpoints", Field(c, "count") + " seen (" + Field(c, "good") + " good, " + Field(c, "corrupt") +
                              " corrupt), " + Bytes(c.value("bytes_total", json(nullptr))) +
                              " in total, newest good step " + Field(c, "newest_good_step", "none"));
  o << Row("checkpoint write time",
           c.value("write_seconds_total", json(nullptr)).is_null()
               ? "not measured"
               : Field(c, "write_seconds_total") + " s, overhead " + Field(c, "overhead_percent") + " %");
  return o.str() + "</table>\n";
}

std::string Attempts(const json& r) {
  std::ostringstream o;
  o << "<h3>Attempts</h3>\n<table class=\"attempts\">\n"
    << Cells({"#", "start", "end", "outcome", "status", "resumed from", "group", "reached", "steps lost", "next"},
             "th");
  for (const auto& a : r.value("attempts", json::array())) {
    const std::string by = a.value("stopped_by", json(nullptr)).is_null() ? "" : " (by " + Field(a, "stopped_by") + ")";
    o << Cells({Field(a, "attempt"), Field(a, "start"), Field(a, "end", "running"), Field(a, "outcome") + by,
                Field(a, "status", ""), Field(a, "resumed_from", "fresh start"), GroupCell(a),
                Field(a, "reached_step", "-"),
                Field(a, "steps_lost_measured") + " measured, ~" + Field(a, "steps_lost_estimated") + " estimated",
                Field(a, "next", "")});
  }
  return o.str() + "</table>\n";
}

// With a mirror: per notice, the planner's prediction against what happened, and what a new
// VM resumes from.
std::string NoticeDurability(const json& notices) {
  const auto yes_no = [](const json& d, const char* key) {
    const json& v = d.value(key, json(nullptr));
    return v.is_null() ? std::string("-") : v.get<bool>() ? std::string("yes") : std::string("no");
  };
  std::ostringstream rows;
  for (const auto& n : notices) {
    if (!n.contains("durability")) continue;
    const json& d = n.at("durability");
    rows << Cells({Field(n, "received"), Field(d, "predicted_after_s", "-"), yes_no(d, "predicted_in_window"),
                   Field(d, "observed_after_s", "not durable"), yes_no(d, "observed_in_window"),
                   Field(d, "new_vm_resumes_from_step", "scratch"), Field(d, "steps_lost_on_a_new_vm", "unknown")});
  }
  if (rows.str().empty()) return "";
  return "<h4>Durable before the VM is gone</h4>\n<table class=\"notices\">\n" +
         Cells({"received", "predicted durable after (s)", "predicted in the window", "durable after (s)",
                "in the window", "a new VM resumes from step", "steps lost on a new VM"},
               "th") +
         rows.str() + "</table>\n";
}

std::string Notices(const json& r) {
  std::ostringstream o;
  o << "<h3>Notices</h3>\n";
  const json& notices = r.value("notices", json::array());
  if (notices.empty()) return o.str() + "<p>None.</p>\n";
  o << "<table class=\"notices\">\n"
    << Cells(
           {"received", "provider / kind", "action", "warning (s)", "signal after (s)", "saved after (s)",
            "validated after (s)", "mirrored after (s)", "deadline margin (s)", "outcome", "checkpoint", "steps lost"},
           "th");
  for (const auto& n : notices) {
    o << Cells({Field(n, "received"), Field(n, "provider") + " " + Field(n, "kind"), Field(n, "action"),
                Field(n, "warning_s", "not given"), Field(n, "notice_to_signal_s", "-"), Field(n, "saved_after_s", "-"),
                Field(n, "validated_after_s", "-"), Field(n, "mirrored_after_s", "-"),
                Field(n, "deadline_margin_s", "-"), Field(n, "outcome", "-"), Field(n, "checkpoint", "-"),
                Field(n, "steps_lost", "-")});
  }
  o << "</table>\n";
  if (r.contains("save_on_notice")) {
    const json& s = r["save_on_notice"];
    o << "<p>Saved inside the warning window: " << Esc(Field(s, "saved_in_window")) << " of "
      << Esc(Field(s, "notices")) << " notices.</p>\n";
  }
  return o.str() + NoticeDurability(notices);
}

std::string Cost(const json& r) {
  const json& k = r.value("cost", json::object());
  std::ostringstream o;
  o << "<h3>Cost</h3>\n";
  if (!k.value("configured", false)) return o.str() + "<p>Unknown: no cost section was configured.</p>\n";
  o << "<table>\n" << Cells({"component", "amount (" + Field(k, "currency") + ")", "basis"}, "th");
  for (const auto& c : k.value("components", json::array())) {
    o << Cells({Field(c, "name"), Range(c.value("low", json(nullptr)), c.value("high", json(nullptr))),
                Field(c, "basis", "")});
  }
  o << Cells({"total", Field(k, "total_text"), ""}) << "</table>\n";
  const json& p = k.value("per_1000_steps", json(nullptr));
  o << "<p>Cost per 1000 steps: "
    << Esc(p.is_object()
               ? Range(p.value("low", json(nullptr)), p.value("high", json(nullptr))) + " " + Field(k, "currency")
               : "unknown")
    << ".</p>\n";
  return o.str();
}

std::string Hooks(const json& r) {
  const json& runs = r.value("hooks", json::object()).value("runs", json::array());
  if (runs.empty()) return "";
  std::ostringstream o;
  o << "<h3>Hooks</h3>\n<table>\n" << Cells({"start", "hook", "outcome", "message", "ms"}, "th");
  for (const auto& h : runs) {
    o << Cells(
        {Field(h, "start"), Field(h, "hook"), Field(h, "outcome"), Field(h, "message", ""), Field(h, "duration_ms")});
  }
  return o.str() + "</table>\n";
}

}  // namespace

std::string Tables(const json& r) {
  std::ostringstream o;
  o << Summary(r) << Work(r) << Attempts(r) << Notices(r) << Cost(r) << Hooks(r);
  o << "<h3>How these numbers were obtained</h3>\n<ul class=\"measurement\">\n";
  for (const auto& m : r.value("measurement", json::array())) o << "<li>" << Esc(Text(m)) << "</li>\n";
  return o.str() + "</ul>\n";
}

}  // namespace spotvisor::report::html
