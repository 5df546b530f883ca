// The report's numbers for a scripted run: a state dir written by hand with known times,
// checkpoints, a notice and prices, checked figure by figure; and the baseline comparison.
#include "spotvisor/report/report.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "support/test_support.hpp"

namespace spotvisor::report {
namespace {

using telemetry::CheckpointRecord;
using telemetry::DurableAt;
using telemetry::MatchMirrored;
using telemetry::NoticeRecord;
using telemetry::RunLedger;
using telemetry::SessionRecord;
using telemetry::SettleDurable;
using telemetry::StepsLostOnANewVm;

constexpr std::int64_t kT0 = 1'700'000'000'000;  // unix ms
constexpr std::int64_t kMin = 60'000;

void WriteScriptedRun(const std::filesystem::path& dir) {
  RunLedger l;
  l.job = "scripted";
  l.labels = {{"model", "m1"}};
  l.cost.configured = true;
  l.cost.node_hour = {true, 3.6, 3.6};
  l.cost.disk_gb = {true, 730, 730};
  l.cost.disk_gb_month = {true, 0.1, 0.1};
  l.cost.snapshot_gb = {true, 0, 0};
  l.cost.snapshot_gb_month = {true, 0.05, 0.05};
  l.cost.egress_gb = {true, 0, 2};
  l.cost.egress_per_gb = {true, 1, 1};
  l.cost.public_ip_hour = {true, 0, 0};
  l.cost.budget = 50;
  SessionRecord s;
  s.started_ms = kT0;
  s.last_seen_ms = s.started_ms;
  s.ended_ms = kT0 + 60 * kMin;
  s.exit_code = 0;
  s.exit_message = "the job finished";
  l.sessions.push_back(s);
  const auto ckpt = [&](std::uint64_t step, std::int64_t at, int attempt) {
    CheckpointRecord c;
    c.name = "ckpt_step" + std::to_string(step);
    c.step = step;
    c.bytes = 1000;
    c.mtime_ms = kT0 + at;
    c.write_ms = 6000;
    c.good = true;
    c.attempt = attempt;
    l.AddCheckpoint(c);
  };
  ckpt(100, 10 * kMin, 1);
  ckpt(200, 20 * kMin, 1);
  ckpt(300, 40 * kMin, 2);
  ckpt(400, 50 * kMin, 2);
  NoticeRecord n;
  n.received_ms = kT0 + 29 * kMin;
  n.deadline_ms = n.received_ms + 120'000;
  n.signal_ms = n.received_ms + 50;
  n.provider = "aws";
  n.kind = "terminate";
  n.action = "stop";
  n.attempt = 1;
  l.notices.push_back(n);
  ASSERT_TRUE(l.Save(dir));
  auto journal = state::Journal::Open(dir);
  ASSERT_TRUE(journal);
  state::AttemptRecord a1;
  a1.attempt = 1;
  a1.started_ms = kT0;
  a1.ended_ms = kT0 + 30 * kMin;
  a1.exit_code = 0;
  a1.outcome = "preempted";
  a1.next = "resume";
  ASSERT_TRUE(journal->AppendAttempt(a1));
  state::AttemptRecord a2 = a1;
  a2.attempt = 2;
  a2.started_ms = kT0 + 32 * kMin;
  a2.ended_ms = kT0 + 58 * kMin;
  a2.resume_from = "/ckpt/ckpt_step200";
  a2.resume_step = 200;
  a2.outcome = "done";
  a2.next = "exit 0";
  ASSERT_TRUE(journal->AppendAttempt(a2));
}

TEST(Report, NumbersOfAScriptedRun) {
  testing::TempDir dir;
  WriteScriptedRun(dir.path());
  auto r = BuildReport(dir.path(), kT0 + 61 * kMin);
  ASSERT_TRUE(r) << r.error().message;
  const auto& w = (*r)["work"];
  EXPECT_EQ(w["billed_hours"], 1.0);
  EXPECT_EQ(w["final_step"], 400);
  EXPECT_EQ(w["steps_done"], 400);
  EXPECT_DOUBLE_EQ(w["steps_per_second"].get<double>(), 0.1667);  // 200 steps in 1200 s
  EXPECT_EQ(w["lost_seconds"], 600.0);                            // 30 min end - 20 min checkpoint
  EXPECT_DOUBLE_EQ(w["steps_lost_estimated"].get<double>(), 100.0);
  EXPECT_EQ(w["trainer_seconds"], 3360.0);             // 30 + 26 minutes
  EXPECT_DOUBLE_EQ(w["goodput"].get<double>(), 0.76);  // (3360 - 600 - 24) / 3600
  const auto& c = (*r)["checkpoints"];
  EXPECT_EQ(c["count"], 4);
  EXPECT_EQ(c["bytes_total"], 4000);
  EXPECT_DOUBLE_EQ(c["overhead_percent"].get<double>(), 0.71);  // 24 / 3360
  const auto& k = (*r)["cost"];
  EXPECT_DOUBLE_EQ(k["total_low"].get<double>(), 3.7);  // 3.6 compute + 0.1 disk
  // support has no price: the upper bound is unknown, never a number (issue 12.4).
  EXPECT_TRUE(k["total_high"].is_null()) << k.dump();
  EXPECT_DOUBLE_EQ(k["known_high"].get<double>(), 5.7);  // + up to 2 egress
  EXPECT_EQ(k["unknown"], nlohmann::json::array({"support"}));
  EXPECT_DOUBLE_EQ(k["per_1000_steps"]["low"].get<double>(), 9.25);
  EXPECT_TRUE(k["per_1000_steps"]["high"].is_null());
  const auto& n = (*r)["notices"][0];
  EXPECT_EQ(n["warning_s"], 120.0);
  EXPECT_EQ(n["notice_to_signal_s"], 0.05);
  EXPECT_EQ((*r)["attempts"][0]["steps_lost_estimated"], 100.0);
  EXPECT_EQ((*r)["restarts"]["preempted"], 1);
  const std::string md = RenderMarkdown(*r);
  EXPECT_NE(md.find("3.70-5.70 USD + unknown (support)"), std::string::npos) << md;
  EXPECT_NE(md.find("Cost per 1000 steps: at least 9.25 USD + unknown components"), std::string::npos) << md;
  EXPECT_NE(md.find("| label model | m1 |"), std::string::npos);
}

// Version 2 (issue 24): the notice's path to a checkpoint (none here: stopped at 29 min,
// its attempt's newest checkpoint is from 20 min) and the goodput buckets, hand-computed.
TEST(Report, NoticeOutcomesAndGoodputBuckets) {
  testing::TempDir dir;
  WriteScriptedRun(dir.path());
  auto r = BuildReport(dir.path(), kT0 + 61 * kMin);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["report_version"], 2);
  const auto& n = (*r)["notices"][0];
  EXPECT_EQ(n["signal_after_s"], 0.05);
  EXPECT_TRUE(n["saved_after_s"].is_null()) << n.dump();
  EXPECT_TRUE(n["validated_after_s"].is_null());
  EXPECT_TRUE(n["mirrored_after_s"].is_null());
  EXPECT_TRUE(n["deadline_margin_s"].is_null());
  EXPECT_EQ(n["outcome"], "not-saved");
  EXPECT_TRUE(n["checkpoint"].is_null());
  EXPECT_EQ(n["steps_lost"], 100.0);  // 600 s since step 200 x 0.1667 steps/s
  EXPECT_EQ((*r)["save_on_notice"], (nlohmann::json{{"notices", 1}, {"saved_in_window", 0}}));
  const auto& g = (*r)["goodput"];
  EXPECT_EQ(g["billed_s"], 3600.0);
  EXPECT_EQ(g["first_progress_from"], "first_checkpoint");
  // Attempt 1 (0-30 min): startup to its first checkpoint (10 min), lost 20-29 min, the
  // notice to its end disrupted, 12 s writing. Gap 30-32 min: disrupted. Attempt 2: startup
  // 32-40 min (its first checkpoint beyond step 200), 12 s writing, done. Idle: 58-60 min.
  const auto& b = g["buckets"];
  EXPECT_EQ(b["startup_s"], 600.0 + 480.0);
  EXPECT_EQ(b["lost_s"], 540.0);
  EXPECT_EQ(b["disrupted_s"], 60.0 + 120.0);
  EXPECT_EQ(b["checkpointing_s"], 24.0);
  EXPECT_EQ(b["productive_s"], 588.0 + 1068.0);
  EXPECT_EQ(b["waiting_s"], 0.0);
  EXPECT_EQ(b["idle_s"], 120.0);
  double sum = 0;
  for (const auto& [name, v] : b.items()) sum += v.get<double>();
  EXPECT_NEAR(sum, g["billed_s"].get<double>(), 0.01);
  // Priced at the compute price, 3.6/h: 1 s = 0.001.
  EXPECT_DOUBLE_EQ(g["cost"]["lost"]["low"].get<double>(), 0.54);
  EXPECT_DOUBLE_EQ(g["cost"]["lost"]["high"].get<double>(), 0.54);
  const std::string md = RenderMarkdown(*r);
  EXPECT_NE(md.find("Saved in the window: 0 of 1 notices."), std::string::npos) << md;
  EXPECT_NE(md.find("| not-saved | none, ~100 steps lost |"), std::string::npos) << md;
  EXPECT_NE(md.find("| lost | 540 | 15.0 % | 0.54 |"), std::string::npos) << md;
  EXPECT_NE(md.find("First progress from: first_checkpoint."), std::string::npos) << md;
}

// Without prices the buckets' cost is unknown (null), never 0.
TEST(Report, GoodputCostIsNullWithoutPrices) {
  testing::TempDir dir;
  auto journal = state::Journal::Open(dir.path());
  ASSERT_TRUE(journal);
  state::AttemptRecord a;
  a.attempt = 1;
  a.started_ms = kT0;
  a.ended_ms = kT0 + kMin;
  a.outcome = "done";
  ASSERT_TRUE(journal->AppendAttempt(a));
  auto r = BuildReport(dir.path(), kT0 + 2 * kMin);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE((*r)["goodput"]["cost"].is_null()) << (*r)["goodput"].dump();
}

// Multi-node (issue 14): an attempt a peer stopped says which node stopped the group, and why.
TEST(Report, APeerStoppedAttemptNamesTheNodeThatStoppedIt) {
  testing::TempDir dir;
  auto journal = state::Journal::Open(dir.path());
  ASSERT_TRUE(journal);
  state::AttemptRecord a;
  a.attempt = 1;
  a.started_ms = kT0;
  a.ended_ms = kT0 + kMin;
  a.exit_code = 0;
  a.outcome = "peer-stopped";
  a.next = "rejoin the group";
  a.stopped_by = "node 0: notice: aws spot-itn";
  ASSERT_TRUE(journal->AppendAttempt(a));
  auto r = BuildReport(dir.path(), kT0 + 2 * kMin);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["attempts"][0]["stopped_by"], "node 0: notice: aws spot-itn");
  const std::string md = RenderMarkdown(*r);
  EXPECT_NE(md.find("| peer-stopped (by node 0: notice: aws spot-itn) |"), std::string::npos) << md;
}

TEST(Report, BaselineComparison) {
  testing::TempDir a, b;
  WriteScriptedRun(a.path());
  WriteScriptedRun(b.path());
  auto ra = BuildReport(a.path(), kT0 + 61 * kMin);
  auto rb = BuildReport(b.path(), kT0 + 61 * kMin);
  ASSERT_TRUE(ra && rb);
  const auto c = CompareReports(*ra, *rb);
  int saw = 0;
  for (const auto& row : c["rows"]) {
    if (row["metric"] == "cost_per_1000_steps_low") {
      ++saw;
      EXPECT_EQ(row["ratio"], 1.0);
    }
    if (row["metric"] == "cost_per_1000_steps_high") {  // support is unknown: no upper end, no ratio
      ++saw;
      EXPECT_TRUE(row["run"].is_null()) << row.dump();
      EXPECT_FALSE(row.contains("ratio")) << row.dump();
    }
  }
  EXPECT_EQ(saw, 2);
  bool saved_row = false, bucket_row = false;
  for (const auto& row : c["rows"]) {
    saved_row = saved_row || row["metric"] == "saved_in_window";
    bucket_row = bucket_row || row["metric"] == "goodput_productive_s";
  }
  EXPECT_TRUE(saved_row && bucket_row) << c.dump();
  EXPECT_NE(RenderComparison(c).find("| goodput | 0.76 | 0.76 | 1 |"), std::string::npos) << RenderComparison(c);
}

// With a mirror (issue 36): two notices, one whose checkpoint went up inside its window as
// the planner said, one the planner said would not fit and that did not: a new VM resumes
// from the newest checkpoint on the mirror by that deadline, and the steps lost are exact.
TEST(Report, PerNoticeThePlannersPredictionAndWhatANewVmResumesFrom) {
  RunLedger l;
  l.job = "mirrored";
  SessionRecord s;
  s.started_ms = s.last_seen_ms = kT0;
  s.ended_ms = kT0 + 60 * kMin;
  s.exit_code = 0;
  l.sessions.push_back(s);
  const auto notice = [&](std::int64_t at, int attempt, std::uint64_t step, std::int64_t predicted_ms) {
    NoticeRecord n;
    n.received_ms = kT0 + at;
    n.deadline_ms = n.received_ms + 120'000;
    n.signal_ms = n.received_ms + 20;
    n.provider = "aws";
    n.kind = "terminate";
    n.action = "stop";
    n.attempt = attempt;
    n.saved_ms = n.received_ms + 5'000;
    n.validated_ms = n.received_ms + 6'000;
    n.checkpoint = "ckpt_step" + std::to_string(step);
    n.step = step;
    n.outcome = "saved";
    n.mirror = true;
    n.predicted_durable_ms = predicted_ms;
    return n;
  };
  l.notices.push_back(notice(10 * kMin, 1, 500, 40'000));
  l.notices.push_back(notice(30 * kMin, 2, 900, 300'000));
  MatchMirrored(l, "ckpt_step500", kT0 + 10 * kMin + 45'000);   // 45 s after its notice
  MatchMirrored(l, "ckpt_step900", kT0 + 30 * kMin + 400'000);  // after its deadline
  const std::vector<DurableAt> durable{{400, kT0 + 5 * kMin},
                                       {500, kT0 + 10 * kMin + 45'000},
                                       {700, kT0 + 25 * kMin},
                                       {800, kT0 + 30 * kMin + 60'000},       // inside the second window
                                       {900, kT0 + 30 * kMin + 400'000}};     // too late
  SettleDurable(l, {durable.begin(), durable.begin() + 2}, kT0 + 13 * kMin);  // the first deadline passed
  EXPECT_EQ(l.notices[0].durable_step, 500u);
  EXPECT_FALSE(l.notices[1].durable_step) << "settled before its deadline";
  SettleDurable(l, durable, std::nullopt);  // the run ends
  EXPECT_EQ(l.notices[1].durable_step, 800u);
  EXPECT_EQ(StepsLostOnANewVm(l.notices[0]), 0u);
  EXPECT_EQ(StepsLostOnANewVm(l.notices[1]), 100u);
  NoticeRecord none = l.notices[1];
  none.durable_step.reset();
  none.mirrored_ms.reset();
  EXPECT_EQ(StepsLostOnANewVm(none), 900u) << "nothing on the mirror: a new VM starts from scratch";
  none.mirror = false;
  EXPECT_FALSE(StepsLostOnANewVm(none)) << "no mirror, no such number";

  testing::TempDir dir;
  ASSERT_TRUE(l.Save(dir.path()));
  auto r = BuildReport(dir.path(), kT0 + 60 * kMin);
  ASSERT_TRUE(r) << r.error().message;
  const auto& first = (*r)["notices"][0]["durability"];
  EXPECT_EQ(first["predicted_after_s"], 40.0);
  EXPECT_EQ(first["predicted_in_window"], true);
  EXPECT_EQ(first["observed_after_s"], 45.0);
  EXPECT_EQ(first["observed_in_window"], true);
  EXPECT_EQ(first["new_vm_resumes_from_step"], 500);
  EXPECT_EQ(first["steps_lost_on_a_new_vm"], 0);
  const auto& second = (*r)["notices"][1]["durability"];
  EXPECT_EQ(second["predicted_in_window"], false);
  EXPECT_EQ(second["observed_after_s"], 400.0);
  EXPECT_EQ(second["observed_in_window"], false);
  EXPECT_EQ(second["new_vm_resumes_from_step"], 800);
  EXPECT_EQ(second["steps_lost_on_a_new_vm"], 100);
  const std::string md = RenderMarkdown(*r);
  EXPECT_NE(md.find("| 40 s (in the window) | 45 s (in the window) | 500 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 300 s (too late) | 400 s (too late) | 800 | 100 |"), std::string::npos) << md;
}

TEST(Report, AnEmptyDirIsAClearError) {
  testing::TempDir dir;
  auto r = BuildReport(dir.path(), kT0);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("holds no run"), std::string::npos);
}

}  // namespace
}  // namespace spotvisor::report
