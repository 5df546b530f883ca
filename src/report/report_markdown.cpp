// The report for people: Markdown rendered from the report JSON, and the side-by-side
// comparison with a baseline run. Missing values print as "unknown", never as 0.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "report_html_util.hpp"
#include "spotvisor/cost/cost_model.hpp"
#include "spotvisor/report/report.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::report {
namespace {

using html::Text;  // one way to print a report value, in Markdown as in HTML
using nlohmann::json;

std::string Percent(const json& v) {
  if (v.is_null()) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", v.get<double>() * 100.0);
  return buf;
}

std::string Bytes(const json& v) {
  if (v.is_null()) return "unknown";
  return FormatSize(v.get<std::uint64_t>());
}

std::string Range(const json& low, const json& high) {
  if (low.is_null()) return "unknown";
  if (high.is_null()) return "at least " + cost::FormatMoney(low.get<double>());
  const double lo = low.get<double>(), hi = high.get<double>();
  return lo == hi ? cost::FormatMoney(lo) : cost::FormatMoney(lo) + "-" + cost::FormatMoney(hi);
}

std::string PerThousand(const json& cost) {
  const json& p = cost.at("per_1000_steps");
  if (p.is_null()) return "unknown (no steps measured or no cost section)";
  std::string out = Range(p.at("low"), p.at("high")) + " " + cost.at("currency").get<std::string>();
  if (!cost.at("unknown").empty()) out += " + unknown components";
  return out;
}

std::string After(const json& v) { return v.is_null() ? "-" : Text(v) + " s"; }

// One row per notice: the times from its receipt to the signal, the checkpoint appearing,
// judged good and mirrored, the margin to the deadline and the outcome.
// With a mirror: per notice, the planner's prediction against what happened, and what a new
// VM (the disk gone with the old one) resumes from.
void DurabilityMarkdown(std::ostringstream& o, const json& r) {
  const auto in_window = [](const json& v) {
    return v.is_null() ? std::string() : v.get<bool>() ? " (in the window)" : " (too late)";
  };
  std::string rows;
  for (const auto& n : r.at("notices")) {
    if (!n.contains("durability")) continue;
    const json& d = n.at("durability");
    rows += "| " + Text(n.at("received")) + " | " + After(d.at("predicted_after_s")) +
            in_window(d.at("predicted_in_window")) + " | " +
            (d.at("observed_after_s").is_null() ? std::string("not durable") : After(d.at("observed_after_s"))) +
            in_window(d.at("observed_in_window")) + " | " + Text(d.at("new_vm_resumes_from_step"), "scratch") + " | " +
            Text(d.at("steps_lost_on_a_new_vm"), "unknown") + " |\n";
  }
  if (rows.empty()) return;
  o << "\n### Durable before the VM is gone\n\n"
       "| received | predicted durable after | durable after | a new VM resumes from step | steps lost on a new VM "
       "|\n|---|---|---|---|---|\n"
    << rows
    << "\nPredicted: the planner's save + upload at the notice. A new VM resumes from the newest checkpoint on the "
       "mirror at the deadline.\n";
}

void NoticesMarkdown(std::ostringstream& o, const json& r) {
  o << "\n## Notices\n\n";
  if (r.at("notices").empty()) {
    o << "None.\n";
    return;
  }
  const json& son = r.value("save_on_notice", json::object());
  if (!son.empty()) {
    o << "Saved in the window: " << Text(son.at("saved_in_window")) << " of " << Text(son.at("notices"))
      << " notices.\n\n";
  }
  o << "| received | provider / kind (action) | attempt | warning | signal | saved | validated | mirrored | "
       "margin | outcome | checkpoint |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& n : r.at("notices")) {
    std::string checkpoint = Text(n.value("checkpoint", json(nullptr)), "none");
    if (!n.value("step", json(nullptr)).is_null()) checkpoint += " (step " + Text(n.at("step")) + ")";
    if (!n.value("steps_lost", json(nullptr)).is_null()) checkpoint += ", ~" + Text(n.at("steps_lost")) + " steps lost";
    o << "| " << Text(n.at("received")) << " | " << Text(n.at("provider")) << " " << Text(n.at("kind")) << " ("
      << Text(n.at("action")) << ") | " << Text(n.at("attempt")) << " | "
      << (n.at("warning_s").is_null() ? "not given" : Text(n.at("warning_s")) + " s") << " | "
      << After(n.value("signal_after_s", n.at("notice_to_signal_s"))) << " | "
      << After(n.value("saved_after_s", json(nullptr))) << " | " << After(n.value("validated_after_s", json(nullptr)))
      << " | " << After(n.value("mirrored_after_s", json(nullptr))) << " | "
      << After(n.value("deadline_margin_s", json(nullptr))) << " | " << Text(n.value("outcome", json(nullptr))) << " | "
      << checkpoint << " |\n";
  }
  o << "\nTimes are from the notice being seen. Margin: the deadline minus the time the checkpoint was judged good "
       "(negative: it missed).\n";
  DurabilityMarkdown(o, r);
}

void GoodputMarkdown(std::ostringstream& o, const json& r) {
  if (!r.contains("goodput")) return;
  const json& g = r.at("goodput");
  const double billed = g.at("billed_s").get<double>();
  o << "\n## Goodput\n\n| bucket | seconds | share | cost |\n|---|---|---|---|\n";
  for (const char* name : {"productive", "lost", "checkpointing", "startup", "disrupted", "waiting", "idle"}) {
    const double v = g.at("buckets").at(std::string(name) + "_s").get<double>();
    char share[32];
    std::snprintf(share, sizeof share, "%.1f %%", billed > 0 ? v / billed * 100.0 : 0.0);
    const json& c = g.at("cost");
    o << "| " << name << " | " << Text(json(v)) << " | " << share << " | "
      << (c.is_null() ? std::string("unknown") : Range(c.at(name).at("low"), c.at(name).at("high"))) << " |\n";
  }
  o << "| **billed** | **" << Text(g.at("billed_s")) << "** | 100 % | |\n\n";
  o << "First progress from: " << Text(g.at("first_progress_from")) << ".\n";
}

}  // namespace

std::string RenderMarkdown(const json& r) {
  std::ostringstream o;
  o << "# Run report: " << Text(r.at("job")) << "\n\n";
  o << "| | |\n|---|---|\n";
  o << "| result | exit " << Text(r.at("result").at("exit_code"), "none (still running or killed)") << ": "
    << Text(r.at("result").at("message"), "") << " |\n";
  o << "| start / stop | " << Text(r.at("start")) << " / " << Text(r.at("stop")) << " |\n";
  o << "| spotvisor | " << Text(r.at("spotvisor_version")) << ", config hash " << Text(r.at("config_hash")) << " |\n";
  const auto& h = r.at("host");
  o << "| host | " << Text(h.at("hostname")) << ", provider " << Text(h.at("provider")) << ", instance type "
    << Text(h.at("instance_type")) << ", zone " << Text(h.at("zone")) << ", region " << Text(h.value("region", ""))
    << " (" << Text(h.at("source")) << ") |\n";
  const auto& g = r.at("gpu");
  if (g.at("available").get<bool>()) {
    std::string models;
    for (const auto& m : g.at("models")) models += (models.empty() ? "" : ", ") + m.get<std::string>();
    o << "| GPU | " << models << " (driver " << Text(g.at("driver")) << "), peak VRAM "
      << Bytes(g.at("peak_vram_bytes")) << " |\n";
  } else {
    o << "| GPU | none seen: " << Text(g.at("reason"), "not sampled") << " |\n";
  }
  for (const auto& [k, v] : r.at("labels").items()) o << "| label " << k << " | " << Text(v) << " |\n";
  for (const auto& f : r.at("fingerprints")) {
    o << "| file " << Text(f.at("path")) << " | "
      << (f.at("error").get<std::string>().empty() ? Text(f.at("hash")) + ", " + Bytes(f.at("bytes"))
                                                   : "not fingerprinted: " + Text(f.at("error")))
      << " |\n";
  }

  const auto& w = r.at("work");
  o << "\n## Work\n\n| | |\n|---|---|\n";
  o << "| steps done (durable) | " << Text(w.at("steps_done")) << " (from step " << Text(w.at("initial_step")) << " to "
    << Text(w.at("final_step")) << ") |\n";
  o << "| steps lost | " << Text(w.at("steps_lost_measured")) << " measured, about "
    << Text(w.at("steps_lost_estimated")) << " estimated (" << Text(w.at("lost_seconds")) << " s of work) |\n";
  o << "| throughput | " << Text(w.at("steps_per_second")) << " steps/s |\n";
  o << "| trainer time / billed time | " << Text(w.at("trainer_seconds")) << " s / " << Text(w.at("billed_hours"))
    << " h |\n";
  o << "| goodput | " << Percent(w.at("goodput")) << " |\n";

  const auto& c = r.at("checkpoints");
  o << "\n## Checkpoints\n\n"
    << Text(c.at("count")) << " seen (" << Text(c.at("good")) << " good, " << Text(c.at("corrupt")) << " corrupt), "
    << Bytes(c.at("bytes_total")) << " in total, mean " << Bytes(c.at("bytes_mean")) << "; write time "
    << (c.at("write_seconds_total").is_null() ? "not measured" : Text(c.at("write_seconds_total")) + " s")
    << ", overhead " << (c.at("overhead_percent").is_null() ? "unknown" : Text(c.at("overhead_percent")) + " %")
    << "; newest good step " << Text(c.at("newest_good_step"), "none") << ".\n";

  o << "\n## Attempts\n\n| # | start | end | outcome | status | resumed from | group | reached | steps lost | next |\n"
       "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& a : r.at("attempts")) {
    o << "| " << Text(a.at("attempt")) << " | " << Text(a.at("start")) << " | " << Text(a.at("end"), "running") << " | "
      << Text(a.at("outcome"))
      << (a.at("stopped_by").is_null() ? std::string() : " (by " + Text(a.at("stopped_by")) + ")") << " | "
      << Text(a.at("status"), "") << " | " << Text(a.at("resumed_from"), "fresh start") << " | " << html::GroupCell(a)
      << " | " << Text(a.at("reached_step"), "-") << " | " << Text(a.at("steps_lost_measured")) << " measured, ~"
      << Text(a.at("steps_lost_estimated")) << " estimated | " << Text(a.at("next"), "") << " |\n";
  }
  NoticesMarkdown(o, r);
  GoodputMarkdown(o, r);

  const auto& k = r.at("cost");
  o << "\n## Cost\n\n";
  if (!k.at("configured").get<bool>()) {
    o << "Unknown: no `cost` section was configured, so no component has a price.\n";
  } else {
    o << "| component | amount (" << Text(k.at("currency")) << ") | basis |\n|---|---|---|\n";
    for (const auto& comp : k.at("components")) {
      o << "| " << Text(comp.at("name")) << " | " << Range(comp.at("low"), comp.at("high")) << " | "
        << Text(comp.at("basis"), "") << " |\n";
    }
    o << "| **total** | **" << Text(k.at("total_text")) << "** | |\n\n";
    o << "Cost per 1000 steps: " << PerThousand(k) << ".\n";
    if (!k.at("budget").is_null()) {
      o << "Budget " << Text(k.at("budget")) << " " << Text(k.at("currency"))
        << (k.at("budget_exhausted").get<std::string>().empty() ? ""
                                                                : ", exhausted at " + Text(k.at("budget_exhausted")))
        << ".\n";
    }
  }
  const auto& hooks = r.at("hooks");
  if (!hooks.at("runs").empty()) {
    o << "\n## Hooks\n\n";
    for (const auto& run : hooks.at("runs")) {
      o << "- " << Text(run.at("start")) << " " << Text(run.at("hook")) << ": " << Text(run.at("outcome")) << " ("
        << Text(run.at("message"), "") << ", " << Text(run.at("duration_ms")) << " ms)\n";
    }
  }
  o << "\n## How these numbers were obtained\n\n";
  for (const auto& m : r.at("measurement")) o << "- " << m.get<std::string>() << "\n";
  return o.str();
}

json CompareReports(const json& run, const json& baseline) {
  const auto row = [&](const char* name, const json& a, const json& b) {
    json item{{"metric", name}, {"run", a}, {"baseline", b}};
    if (a.is_number() && b.is_number() && b.get<double>() != 0) item["ratio"] = a.get<double>() / b.get<double>();
    return item;
  };
  const auto per1000 = [](const json& r, const char* bound) {
    const json& p = r.at("cost").at("per_1000_steps");
    return p.is_null() ? json(nullptr) : p.at(bound);
  };
  json rows = json::array({
      row("steps_per_second", run.at("work").at("steps_per_second"), baseline.at("work").at("steps_per_second")),
      row("goodput", run.at("work").at("goodput"), baseline.at("work").at("goodput")),
      row("cost_per_1000_steps_low", per1000(run, "low"), per1000(baseline, "low")),
      row("cost_per_1000_steps_high", per1000(run, "high"), per1000(baseline, "high")),
      row("steps_lost_measured", run.at("work").at("steps_lost_measured"),
          baseline.at("work").at("steps_lost_measured")),
      row("steps_lost_estimated", run.at("work").at("steps_lost_estimated"),
          baseline.at("work").at("steps_lost_estimated")),
      row("steps_done", run.at("work").at("steps_done"), baseline.at("work").at("steps_done")),
      row("billed_hours", run.at("work").at("billed_hours"), baseline.at("work").at("billed_hours")),
      row("cost_total_high", run.at("cost").at("total_high"), baseline.at("cost").at("total_high")),
      row("attempts", json(run.at("attempts").size()), json(baseline.at("attempts").size())),
      row("notices", json(run.at("notices").size()), json(baseline.at("notices").size())),
  });
  // Version 2 reports: saves on notice and the goodput buckets (a version 1 report has none).
  const auto v2 = [](const json& r, const char* section, const std::string& key) {
    return r.contains(section) ? r.at(section).at(key) : json(nullptr);
  };
  rows.push_back(row("saved_in_window", v2(run, "save_on_notice", "saved_in_window"),
                     v2(baseline, "save_on_notice", "saved_in_window")));
  for (const char* name : {"productive", "lost", "checkpointing", "startup", "disrupted", "waiting", "idle"}) {
    const std::string key = std::string(name) + "_s";
    const auto bucket = [&](const json& r) {
      return r.contains("goodput") ? r.at("goodput").at("buckets").at(key) : json(nullptr);
    };
    rows.push_back(row(("goodput_" + key).c_str(), bucket(run), bucket(baseline)));
  }
  return json{{"run", run.at("job")},
              {"baseline", baseline.at("job")},
              {"rows", rows},
              {"run_unknown_costs", run.at("cost").at("unknown")},
              {"baseline_unknown_costs", baseline.at("cost").at("unknown")}};
}

std::string RenderComparison(const json& c) {
  std::ostringstream o;
  o << "# " << Text(c.at("run")) << " vs baseline " << Text(c.at("baseline")) << "\n\n";
  o << "| metric | run | baseline | run / baseline |\n|---|---|---|---|\n";
  for (const auto& r : c.at("rows")) {
    o << "| " << Text(r.at("metric")) << " | " << Text(r.at("run")) << " | " << Text(r.at("baseline")) << " | "
      << (r.contains("ratio") ? Text(r.at("ratio")) : "-") << " |\n";
  }
  const auto names = [](const json& list) {
    std::string s;
    for (const auto& n : list) s += (s.empty() ? "" : ", ") + n.get<std::string>();
    return s.empty() ? std::string("none") : s;
  };
  o << "\nUnknown cost components: run " << names(c.at("run_unknown_costs")) << "; baseline "
    << names(c.at("baseline_unknown_costs")) << ".\n";
  return o.str();
}

}  // namespace spotvisor::report
