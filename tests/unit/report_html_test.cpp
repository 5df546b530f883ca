// The report's timeline for a scripted run (two sessions, a crash and its backoff, a notice,
// checkpoints good / corrupt / quarantined), and the HTML page rendered from a report: every
// string from the run escaped, one mark per attempt, notice and checkpoint, the fields of
// newer reports drawn when present and their absence said plainly. (The page in a real
// browser: tests/browser/test_report_html.py.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "spotvisor/report/report.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "support/test_support.hpp"

namespace spotvisor::report {
namespace {

using nlohmann::json;
using telemetry::CheckpointRecord;
using telemetry::NoticeRecord;
using telemetry::RunLedger;
using telemetry::SessionRecord;

constexpr std::int64_t kT0 = 1'700'000'000'000;  // unix ms
constexpr std::int64_t kMin = 60'000;

struct Scripted {
  RunLedger ledger;
  std::vector<state::AttemptRecord> attempts;
};

state::AttemptRecord Attempt(int n, std::int64_t start_min, std::int64_t end_min, const char* outcome) {
  state::AttemptRecord a;
  a.attempt = n;
  a.started_ms = kT0 + start_min * kMin;
  a.ended_ms = kT0 + end_min * kMin;
  a.outcome = outcome;
  if (n > 1) a.resume_step = 100, a.resume_from = "/ckpt/ckpt_step100";
  return a;
}

// Session 1 (0-31 min): attempt 1 crashes at 10, backoff, attempt 2 from 11 gets a notice at
// 29 and stops at 30, drained until 31. Session 2 (40-51): attempt 3 from 41, done at 50.
Scripted ScriptedRun() {
  Scripted s;
  RunLedger& l = s.ledger;
  l.job = "a<b&c";
  l.labels = {{"note", "<script>alert('x')</script> & \"q\""}};
  for (const auto& [a, b] : {std::pair<std::int64_t, std::int64_t>{0, 31}, {40, 51}}) {
    SessionRecord r;
    r.started_ms = kT0 + a * kMin;
    r.last_seen_ms = r.started_ms;
    r.ended_ms = kT0 + b * kMin;
    r.hostname = "vm<1>";
    l.sessions.push_back(r);
  }
  const auto ckpt = [&](const std::string& name, std::uint64_t step, std::int64_t at_min, bool good, int attempt) {
    CheckpointRecord c;
    c.name = name;
    c.step = step;
    c.bytes = good || step > 0 ? 1000 : 0;
    c.mtime_ms = step > 0 ? kT0 + at_min * kMin : 0;
    c.seen_ms = kT0 + at_min * kMin + 500;
    c.good = good;
    c.reason = good ? "ok" : "bad <crc>";
    c.attempt = attempt;
    l.AddCheckpoint(c);
  };
  ckpt("ckpt_step100", 100, 5, true, 1);
  ckpt("ckpt_step150", 150, 8, false, 1);  // judged corrupt while the run went on
  ckpt("ckpt_step150", 0, 11, false, 1);   // rejected at the next selection: quarantined
  ckpt("ckpt_step200", 200, 20, true, 2);
  ckpt("ckpt_step300", 300, 45, true, 3);
  NoticeRecord n;
  n.received_ms = kT0 + 29 * kMin;
  n.deadline_ms = kT0 + 60 * kMin;  // after the run: must not stretch the picture
  n.signal_ms = n.received_ms + 50;
  n.provider = "aws";
  n.kind = "terminate";
  n.action = "stop";
  n.attempt = 2;
  l.notices.push_back(n);
  s.attempts = {Attempt(1, 0, 10, "failed"), Attempt(2, 11, 30, "preempted"), Attempt(3, 41, 50, "done")};
  return s;
}

std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ReportTimeline, GapsVerdictsAndStepsOfAScriptedRun) {
  const Scripted s = ScriptedRun();
  const json t = BuildTimeline(s.ledger, s.attempts, kT0 + 99 * kMin);
  EXPECT_EQ(t["start_ms"], kT0);
  EXPECT_EQ(t["end_ms"], kT0 + 51 * kMin);  // the last session's end, not the notice's deadline
  ASSERT_EQ(t["attempts"].size(), 3u);
  EXPECT_EQ(t["attempts"][2]["outcome"], "done");
  EXPECT_EQ(t["attempts"][1]["resume_step"], 100);
  const auto gap = [](const char* kind, std::int64_t a, std::int64_t b, int attempt) {
    return json{{"kind", kind}, {"start_ms", kT0 + a * kMin}, {"end_ms", kT0 + b * kMin}, {"attempt", attempt}};
  };
  std::vector<json> want{gap("backoff", 10, 11, 1), gap("stopping", 29, 30, 2), gap("waiting", 40, 41, 3),
                         gap("waiting", 30, 31, 2), gap("waiting", 50, 51, 3)};
  EXPECT_EQ(t["gaps"], json(want)) << t["gaps"].dump(1);
  std::vector<std::string> verdicts;
  for (const auto& c : t["checkpoints"]) verdicts.push_back(c["verdict"]);
  EXPECT_EQ(verdicts, (std::vector<std::string>{"good", "corrupt", "quarantined", "good", "good"}));
  EXPECT_TRUE(t["checkpoints"][2]["step"].is_null());
  EXPECT_EQ(t["checkpoints"][0]["ms"], kT0 + 5 * kMin + 500);
  ASSERT_EQ(t["notices"].size(), 1u);
  EXPECT_EQ(t["notices"][0]["deadline_ms"], kT0 + 60 * kMin);
  // The step reached: each attempt's start at its resume step, each good checkpoint, in time order.
  std::vector<std::pair<std::int64_t, std::uint64_t>> steps;
  for (const auto& p : t["steps"]) steps.emplace_back(p["ms"], p["step"]);
  EXPECT_EQ(steps, (std::vector<std::pair<std::int64_t, std::uint64_t>>{{kT0, 0},
                                                                        {kT0 + 5 * kMin, 100},
                                                                        {kT0 + 11 * kMin, 100},
                                                                        {kT0 + 20 * kMin, 200},
                                                                        {kT0 + 41 * kMin, 100},
                                                                        {kT0 + 45 * kMin, 300}}));
}

json Report() {
  testing::TempDir dir;
  Scripted s = ScriptedRun();
  EXPECT_TRUE(s.ledger.Save(dir.path()));
  auto journal = state::Journal::Open(dir.path());
  EXPECT_TRUE(journal);
  for (const auto& a : s.attempts) EXPECT_TRUE(journal->AppendAttempt(a));
  auto r = BuildReport(dir.path(), kT0 + 99 * kMin);
  EXPECT_TRUE(r) << r.error().message;
  return *r;
}

TEST(ReportHtml, SelfContainedEscapedAndOneMarkPerThing) {
  const json r = Report();
  ASSERT_TRUE(r.contains("timeline"));
  const std::string html = RenderHtml(r);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "the label came through as markup";
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // only SVG's namespace name
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"), std::string::npos);
  EXPECT_NE(html.find("<title>Run report: a&lt;b&amp;c</title>"), std::string::npos);
  EXPECT_EQ(html.find("vm<1>"), std::string::npos);
  EXPECT_EQ(Count(html, "class=\"attempt-bar\""), 3u);
  EXPECT_EQ(Count(html, "class=\"notice-marker\""), 1u);
  EXPECT_EQ(Count(html, "class=\"notice-window\""), 1u);
  EXPECT_EQ(Count(html, "class=\"notice-window-cut\""), 1u);  // its deadline lies after the run
  EXPECT_EQ(Count(html, "class=\"ckpt-tick\""), 5u);
  EXPECT_EQ(Count(html, "class=\"ckpt-tick\" data-verdict=\"good\""), 3u);
  EXPECT_EQ(Count(html, "class=\"ckpt-tick\" data-verdict=\"corrupt\""), 1u);
  EXPECT_EQ(Count(html, "class=\"ckpt-tick\" data-verdict=\"quarantined\""), 1u);
  EXPECT_EQ(Count(html, "class=\"gap-bar\" data-kind=\"backoff\""), 1u);
  EXPECT_EQ(Count(html, "class=\"gap-bar\" data-kind=\"waiting\""), 3u);
  // Exact times on hover: the crash of attempt 1, to the millisecond.
  EXPECT_NE(html.find("attempt 1 running: 2023-11-14T22:13:20.000Z to 2023-11-14T22:23:20.000Z (10 min 00 s)"),
            std::string::npos);
  // This run's notice was never saved: no saved mark.
  EXPECT_EQ(Count(html, "class=\"notice-saved\""), 0u);
}

// A report.json of version 1 (spotvisor before issue 24) has no goodput buckets and no
// per-notice saves: the page says so rather than drawing zeros.
TEST(ReportHtml, AVersionOneReportSaysWhatItLacks) {
  json r = Report();
  r["report_version"] = 1;
  r.erase("goodput");
  r.erase("save_on_notice");
  for (auto& n : r["notices"]) {
    for (const char* key : {"saved_after_s", "validated_after_s", "mirrored_after_s", "deadline_margin_s", "outcome"}) {
      n.erase(key);
    }
  }
  const std::string html = RenderHtml(r);
  EXPECT_NE(html.find("No goodput buckets in this report"), std::string::npos);
  EXPECT_EQ(Count(html, "class=\"goodput-segment\""), 0u);
  EXPECT_EQ(Count(html, "class=\"notice-saved\""), 0u);
  EXPECT_EQ(Count(html, "class=\"notice-marker\""), 1u);
}

TEST(ReportHtml, DrawsGoodputBucketsAndTheSaveOfANoticeWhenTheReportHasThem) {
  json r = Report();
  r["goodput"] = {{"billed_s", 100.0},
                  {"buckets",
                   {{"productive_s", 60.0},
                    {"lost_s", 10.0},
                    {"checkpointing_s", 5.0},
                    {"startup_s", 5.0},
                    {"disrupted_s", 15.0},
                    {"waiting_s", 0.0},
                    {"idle_s", 5.0}}},
                  {"cost", {{"productive", {{"low", 1.5}, {"high", nullptr}}}}},
                  {"first_progress_from", "first_checkpoint"}};
  r["notices"][0]["saved_after_s"] = 12.5;
  r["notices"][0]["outcome"] = "saved";
  const std::string html = RenderHtml(r);
  EXPECT_EQ(Count(html, "class=\"goodput-segment\""), 6u);  // waiting is 0 s: no segment
  EXPECT_NE(html.find("data-bucket=\"productive\""), std::string::npos);
  EXPECT_NE(html.find("productive: 60.000 s (60.0 % of 100.000 s billed)"), std::string::npos);
  EXPECT_NE(html.find("first progress from first_checkpoint"), std::string::npos);
  EXPECT_EQ(Count(html, "class=\"notice-saved\""), 1u);
  EXPECT_NE(html.find("class=\"notice-marker\" data-outcome=\"saved\""), std::string::npos);
  EXPECT_NE(html.find("saved 12.500 s after the notice: 2023-11-14T22:42:32.500Z"), std::string::npos);
}

TEST(ReportHtml, ABaselineIsDrawnBesideTheRun) {
  const json r = Report();
  const std::string html = RenderHtml(r, &r);
  EXPECT_EQ(Count(html, "<section class=\"run\""), 2u);
  EXPECT_EQ(Count(html, "class=\"attempt-bar\""), 6u);
  EXPECT_EQ(Count(html, "<table class=\"comparison\">"), 1u);
  EXPECT_NE(html.find("id=\"baseline-stop\""), std::string::npos);  // pattern ids kept apart
  EXPECT_NE(html.find("id=\"run-stop\""), std::string::npos);
}

// Where the first attempt bar after `from` starts on its timeline's x axis.
double FirstAttemptX(const std::string& html, std::size_t from) {
  const std::size_t bar = html.find("class=\"attempt-bar\"", from);
  const std::size_t rect = html.rfind("<rect x=\"", bar);
  return std::stod(html.substr(rect + 9));
}

// Every number of the timeline in unix ms moved `by` later.
void Shift(json& j, std::int64_t by) {
  for (auto& [key, v] : j.items()) {
    if (v.is_structured()) {
      Shift(v, by);
    } else if (v.is_number_integer() && v.get<std::int64_t>() > 0 &&
               (key == "ms" || (key.size() > 3 && key.compare(key.size() - 3, 3, "_ms") == 0))) {
      v = v.get<std::int64_t>() + by;
    }
  }
}

TEST(ReportHtml, AGroupsNodesShareOneTimeAxis) {
  json node0 = Report();
  node0["host"]["hostname"] = "vm<1>";
  json node1 = node0;
  Shift(node1["timeline"], 30 * 60 * 1000);  // it started half an hour later
  node1["host"]["hostname"] = "node-b";
  const std::string html = RenderGroupHtml({node0, node1});
  EXPECT_NE(html.find("<title>Group report: a&lt;b&amp;c</title>"), std::string::npos);
  EXPECT_EQ(Count(html, "<section class=\"run\""), 2u);
  EXPECT_EQ(Count(html, "class=\"attempt-bar\""), 6u);
  EXPECT_NE(html.find("Node 0 (vm&lt;1&gt;): "), std::string::npos);
  EXPECT_NE(html.find("Node 1 (node-b): "), std::string::npos);
  const std::size_t second = html.find("data-run=\"node-1\"");
  ASSERT_NE(second, std::string::npos);
  // Alone, each would start at the left edge; on the group's axis the later node starts later.
  EXPECT_GT(FirstAttemptX(html, second), FirstAttemptX(html, 0) + 50);
  const std::string alone = RenderHtml(node1);
  EXPECT_DOUBLE_EQ(FirstAttemptX(alone, 0), FirstAttemptX(RenderHtml(node0), 0));
}

}  // namespace
}  // namespace spotvisor::report
