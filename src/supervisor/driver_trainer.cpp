// The driver's side of the trainer (see driver_impl.hpp): starting it, the Fsm's signals,
// its launcher's workers while they stop, and its end — the main process first, then the
// whole group (leftovers get SIGKILL up to signals.kill_timeout).
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <filesystem>

#include "child_environment.hpp"
#include "driver_impl.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/log/log.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;

constexpr auto kWorkersPoll = std::chrono::milliseconds(100);  // a launcher's workers, while they stop
// How long a cut-off node's trainer is watched before the Fsm judges it (GroupCutOffEvent).
constexpr auto kCutOffSample = std::chrono::seconds(2);

}  // namespace

void Driver::Impl::Perform(const SpawnAction& a) {
  // The attempt's record from the start: a start that fails is an attempt of its own too.
  current_ = state::AttemptRecord{};
  current_.attempt = a.attempt;
  current_.started_ms = WallMillis();
  current_.slurm_restart_count = slurm_restart_count_;
  current_.epoch = a.place.epoch;
  current_.nodes = a.place.world;
  if (a.resume) {
    current_.resume_from = a.resume->path.string();
    current_.resume_step = a.resume->step;
  }
  auto spec = BuildSpawnSpec(job_, a);
  if (!spec) {
    asio::post(io_, [this, message = spec.error().message] { Dispatch(SpawnFailedEvent{message}); });
    return;
  }
  files_->BeforeStart();  // a resumed trainer starts without a notice
  auto started = host_->Spawn(
      *spec, [this](ExitStatus status) { OnTrainerExited(status); },
      [this](std::string_view line) {
        for (auto& o : observers_) o->OnTrainerLine(line);
      });
  if (!started) {
    asio::post(io_, [this, message = started.error().message] { Dispatch(SpawnFailedEvent{message}); });
    return;
  }
  trainer_ = std::move(*started);
  const pid_t pid = trainer_->pid();
  trainer_started_ = host_->clock().Now();
  persisted_.child = trainer_->Identity();
  persisted_.last_epoch = a.place.epoch;
  persisted_.last_epoch_step = a.resume ? a.resume->step : 0;
  current_.pid = pid;
  // The start and the child's identity are on disk before anyone hears of it: a supervisor
  // SIGKILLed now still counts this attempt and finds its trainer when it comes back.
  SaveState();
  std::string argv;
  for (const auto& arg : spec->argv) argv += (argv.empty() ? "" : " ") + arg;
  Log(LogLevel::kInfo, "event=trainer_started attempt=" + std::to_string(a.attempt) + " pid=" + std::to_string(pid) +
                           " resume=" + Quote(a.resume ? a.resume->path.string() : "none") + " argv=" + Quote(argv) +
                           " signal_target=" + config::ToString(job_.signals.Recipients()) +
                           " signal_target_why=" + Quote(job_.signals.target_why));
  for (auto& o : observers_) o->OnAttemptStarted(a, pid);
}

void Driver::Impl::Perform(const SignalAction& a) {
  if (!trainer_) return;
  const std::size_t reached = trainer_->Send(a.signo, a.to, a.only_to_handlers);
  const char* none = a.to == config::SignalTarget::kWorkers ? " result=\"the launcher has no worker now\""
                                                            : " result=\"no such process\"";
  const std::size_t skipped = trainer_->LastSkipped();
  Log(reached > 0 ? LogLevel::kInfo : LogLevel::kWarning,
      "event=signal_sent signal=" + config::SignalName(a.signo) + " target=" + config::ToString(a.to) +
          " pid=" + std::to_string(trainer_->pid()) + " processes=" + std::to_string(reached) +
          (a.to == config::SignalTarget::kWorkers ? " workers=" + trainer_->LastPids() : "") +
          (skipped > 0 ? " skipped=" + std::to_string(skipped) + " skipped_why=\"no handler for it\"" : "") +
          (reached > 0 ? "" : none));
  if (reached > 0) {
    for (auto& o : observers_) o->OnSignalSent(a.signo, a.to);
  }
}

void Driver::Impl::Perform(const FreezeTrainerAction&) {
  if (!trainer_) return;
  const std::size_t n = trainer_->Pause(true);
  Log(LogLevel::kInfo, "event=signal_sent signal=SIGSTOP target=trainer pid=" + std::to_string(trainer_->pid()) +
                           " processes=" + std::to_string(n) + " detail=\"paused while its checkpoint is judged\"");
}

void Driver::Impl::Perform(const ThawTrainerAction&) {
  if (!trainer_) return;
  const std::size_t n = trainer_->Pause(false);
  Log(LogLevel::kInfo, "event=signal_sent signal=SIGCONT target=trainer pid=" + std::to_string(trainer_->pid()) +
                           " processes=" + std::to_string(n));
}

void Driver::Impl::Perform(const HoldLaunchersAction&) {
  if (!trainer_) return;
  const std::size_t held = trainer_->HoldLaunchers();
  Log(LogLevel::kInfo,
      "event=signal_sent signal=SIGSTOP target=launcher pid=" + std::to_string(trainer_->pid()) +
          " processes=" + std::to_string(held) +
          " detail=\"the launcher waits, paused, while its workers stop: it neither restarts nor kills them\"");
}

void Driver::Impl::Perform(const ReleaseLaunchersAction& a) {
  if (!trainer_) return;
  const std::size_t released = trainer_->ReleaseLaunchers(a.signo);
  const std::string sent = a.signo != 0 ? config::SignalName(a.signo) + "+SIGCONT" : "SIGCONT";
  Log(LogLevel::kInfo, "event=signal_sent signal=" + sent + " target=launcher pid=" + std::to_string(trainer_->pid()) +
                           " processes=" + std::to_string(released));
}

void Driver::Impl::Perform(const WatchWorkersAction&) { PollWorkers(); }

void Driver::Impl::PollWorkers() {
  workers_poll_->After(kWorkersPoll, [this] {
    if (!trainer_ || fsm_->phase() != Phase::kStopping) return;
    if (trainer_->WorkersGone()) {
      Dispatch(WorkersGoneEvent{});
      return;
    }
    const WorkersActivity workers = trainer_->Workers();
    Dispatch(WorkersSampledEvent{workers.cpu_ticks, workers.all_in_socket_waits});  // the Fsm judges a stall
    PollWorkers();
  });
}

void Driver::Impl::SampleCutOffTrainer() {
  if (!trainer_) {
    Dispatch(GroupCutOffEvent{std::nullopt, std::chrono::milliseconds(0)});
    return;
  }
  const pid_t pid = trainer_->pid();
  const std::uint64_t before = trainer_->GroupCpuTicks();
  cut_off_sample_->After(kCutOffSample, [this, pid, before] {
    std::optional<std::chrono::milliseconds> used;
    if (trainer_ && trainer_->pid() == pid) {
      const std::uint64_t after = trainer_->GroupCpuTicks();
      // A process that exited takes its ticks along: less than before counts as none.
      const std::uint64_t ticks = after > before ? after - before : 0;
      used = std::chrono::milliseconds(ticks * 1000 / static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK)));
    }
    Dispatch(GroupCutOffEvent{used, std::chrono::duration_cast<std::chrono::milliseconds>(kCutOffSample)});
  });
}

void Driver::Impl::Perform(const KillGroupAction&) {
  if (!trainer_) return;
  const std::size_t n = trainer_->KillGroup();
  // What each process was doing when it would not stop: the first clue to a hung save.
  Log(LogLevel::kWarning, "event=signal_sent signal=SIGKILL target=group pid=" + std::to_string(trainer_->pid()) +
                              " processes=" + std::to_string(n) +
                              (n > 0 ? " states=" + Quote(trainer_->KilledStates()) : ""));
}

// The main process is gone; its group may not be (a worker that ignores SIGTERM, a
// daemonized grandchild): those get SIGKILL, and the attempt ends once all are gone.
void Driver::Impl::OnTrainerExited(ExitStatus status) {
  if (!trainer_ || main_status_ || finished_) return;
  main_status_ = status;
  Log(LogLevel::kInfo,
      "event=trainer_exited pid=" + std::to_string(trainer_->pid()) + " status=" + Quote(Describe(status)) +
          " uptime_ms=" +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(host_->clock().Now() - trainer_started_).count()));
  if (!trainer_->GroupGone()) {
    Log(LogLevel::kWarning, "event=group_leftovers pgid=" + std::to_string(trainer_->pid()) +
                                " detail=\"processes of the trainer's group outlived it: SIGKILL\"");
  }
  trainer_->AwaitGroupGone(job_.signals.kill_timeout, [this](bool gone) {
    if (finished_ || !trainer_) return;
    if (!gone) {
      Dispatch(GroupSurvivedKillEvent{trainer_->pid()});
      return;
    }
    TrainerGone();
  });
}

// The trainer's group is gone, so its pipes are near EOF: its last lines are relayed (within
// kOutputDrain) before anyone hears of the exit, and the log reads in the order it happened.
void Driver::Impl::TrainerGone() {
  if (!trainer_->OutputDone()) {
    trainer_->DrainOutput(kOutputDrain, [this] {
      if (!finished_ && trainer_) TrainerGone();
    });
    return;
  }
  const ExitStatus status = *main_status_;
  trainer_.reset();
  workers_poll_->Cancel();
  main_status_.reset();
  persisted_.child.reset();
  Dispatch(ChildExitedEvent{status});
}

}  // namespace spotvisor::supervisor
