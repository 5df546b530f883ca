// state.json + attempts.jsonl; see journal.hpp. JSON via nlohmann-json, kept to this file.
#include "spotvisor/state/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::state {
namespace {

using nlohmann::json;

template <class T>
void PutOptional(json& j, const char* key, const std::optional<T>& v) {
  j[key] = v ? json(*v) : json(nullptr);
}
template <class T>
std::optional<T> GetOptional(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

json ToJson(const PersistedState& s) {
  json j{{"version", 1},
         {"job", s.job},
         {"attempts", s.attempts},
         {"failures", s.failures},
         {"hangs", s.hangs},
         {"preemptions", s.preemptions},
         {"consecutive_failures", s.consecutive_failures},
         {"no_progress_streak", s.no_progress_streak},
         {"recent_failures_ms", s.recent_failures_ms},
         {"phase", s.phase},
         {"last_exit_message", s.last_exit_message}};
  PutOptional(j, "last_resume_step", s.last_resume_step);
  PutOptional(j, "last_epoch", s.last_epoch);
  j["last_epoch_step"] = s.last_epoch_step;
  if (s.child) {
    j["child"] = {{"pid", s.child->pid}, {"start_ticks", s.child->start_ticks}, {"boot_id", s.child->boot_id}};
  } else {
    j["child"] = nullptr;
  }
  return j;
}

PersistedState FromJson(const json& j) {
  PersistedState s;
  s.job = j.value("job", "");
  s.attempts = j.value("attempts", 0);
  s.failures = j.value("failures", 0);
  s.hangs = j.value("hangs", 0);
  s.preemptions = j.value("preemptions", 0);
  s.consecutive_failures = j.value("consecutive_failures", 0);
  s.no_progress_streak = j.value("no_progress_streak", 0);
  s.last_resume_step = GetOptional<std::uint64_t>(j, "last_resume_step");
  s.last_epoch = GetOptional<std::uint64_t>(j, "last_epoch");
  s.last_epoch_step = j.value("last_epoch_step", std::uint64_t{0});
  s.recent_failures_ms = j.value("recent_failures_ms", std::vector<std::int64_t>{});
  s.phase = j.value("phase", "");
  s.last_exit_message = j.value("last_exit_message", "");
  if (j.contains("child") && j["child"].is_object()) {
    const auto& c = j["child"];
    s.child =
        process::ChildIdentity{c.value("pid", 0), c.value("start_ticks", std::uint64_t{0}), c.value("boot_id", "")};
  }
  return s;
}

json ToJson(const AttemptRecord& r) {
  json j{{"attempt", r.attempt}, {"started_ms", r.started_ms}, {"ended_ms", r.ended_ms},
         {"pid", r.pid},         {"outcome", r.outcome},       {"next", r.next}};
  PutOptional(j, "resume_from", r.resume_from);
  PutOptional(j, "resume_step", r.resume_step);
  PutOptional(j, "exit_code", r.exit_code);
  PutOptional(j, "signal", r.signal);
  PutOptional(j, "slurm_restart_count", r.slurm_restart_count);
  PutOptional(j, "stopped_by", r.stopped_by);
  PutOptional(j, "epoch", r.epoch);
  PutOptional(j, "nodes", r.nodes);
  return j;
}

AttemptRecord AttemptFromJson(const json& j) {
  AttemptRecord r;
  r.attempt = j.value("attempt", 0);
  r.started_ms = j.value("started_ms", std::int64_t{0});
  r.ended_ms = j.value("ended_ms", std::int64_t{0});
  r.pid = j.value("pid", 0);
  r.resume_from = GetOptional<std::string>(j, "resume_from");
  r.resume_step = GetOptional<std::uint64_t>(j, "resume_step");
  r.exit_code = GetOptional<int>(j, "exit_code");
  r.signal = GetOptional<int>(j, "signal");
  r.slurm_restart_count = GetOptional<int>(j, "slurm_restart_count");
  r.stopped_by = GetOptional<std::string>(j, "stopped_by");
  r.epoch = GetOptional<std::uint64_t>(j, "epoch");
  r.nodes = GetOptional<int>(j, "nodes");
  r.outcome = j.value("outcome", "");
  r.next = j.value("next", "");
  return r;
}

}  // namespace

Result<Journal> Journal::Open(const std::filesystem::path& state_dir) {
  Journal journal(state_dir);
  const auto path = state_dir / "state.json";
  std::ifstream in(path);
  if (!in) return journal;  // a new job
  std::ostringstream text;
  text << in.rdbuf();
  try {
    journal.state_ = FromJson(json::parse(text.str()));
  } catch (const json::exception& e) {
    return Error{path.string() + " is corrupt (" + e.what() + "); move it away to start the job's counters afresh"};
  }
  return journal;
}

Status Journal::Save(const PersistedState& state, Durability durability) {
  if (Status s = WriteFileAtomically(dir_ / "state.json", ToJson(state).dump(2) + "\n", durability); !s) return s;
  state_ = state;
  return Ok{};
}

Status Journal::AppendAttempt(const AttemptRecord& record) {
  unwritten_.push_back(ToJson(record).dump() + "\n");
  return FlushAttempts();
}

Status Journal::FlushAttempts() {
  if (unwritten_.empty()) return Ok{};
  std::string lines;
  for (const auto& line : unwritten_) lines += line;
  if (Status s = AppendLineDurably(dir_ / "attempts.jsonl", lines); !s) return s;
  unwritten_.clear();
  return Ok{};
}

std::vector<AttemptRecord> Journal::ReadAttempts() const { return ReadAttemptRecords(dir_); }

std::vector<AttemptRecord> ReadAttemptRecords(const std::filesystem::path& state_dir) {
  std::vector<AttemptRecord> out;
  std::ifstream in(state_dir / "attempts.jsonl");
  for (std::string line; std::getline(in, line);) {
    try {
      out.push_back(AttemptFromJson(json::parse(line)));
    } catch (const json::exception&) {
      // A torn line from a power cut mid-append: the attempt it described is unrecorded.
    }
  }
  return out;
}

}  // namespace spotvisor::state
