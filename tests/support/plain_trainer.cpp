// See plain_trainer.hpp.
#include "support/plain_trainer.hpp"

#include <regex>

namespace spotvisor::testing {
namespace {

const std::string kPython = "/usr/bin/python3";
const std::string kTrainer = std::string(SPOTVISOR_SOURCE_DIR) + "/examples/plain_trainer/train.py";

}  // namespace

std::string UninterruptedDigest(const TempDir& dir, const std::string& steps) {
  auto run = Spawn({kPython, kTrainer, "--ckpt-dir", (dir / "ref-ckpt").string(), "--steps", steps,
                    "--checkpoint-every", "10", "--result-file", (dir / "ref-result").string()},
                   dir / "ref-out.txt");
  if (WaitExit(run.pid) != 0) return "";
  return ReadFile(dir / "ref-result");
}

std::string TrainerJob(const TempDir& dir, const PlainJob& j) {
  return "job:\n  name: h\n  command: [\"" + kPython + "\", \"" + kTrainer +
         "\", \"--ckpt-dir\", \"{checkpoint_dir}\", " + "\"--steps\", \"" + j.steps + "\", \"--step-sleep\", \"" +
         j.step_sleep + "\", \"--checkpoint-every\", \"10\", " + "\"--heartbeat-file\", \"" +
         (dir / "heartbeat").string() + "\", \"--result-file\", \"{result_file}\"]\n" +
         "  resume_args: [\"--resume_from={checkpoint}\"" + j.resume_extra + "]\n  result_file: ./result\n" +
         "checkpoints:\n  dir: " + j.checkpoint_dir + "\n  pattern: \"ckpt_step{step}\"\n" +
         "signals:\n  grace: 1s\n  kill_timeout: 5s\n" + "telemetry:\n  state_dir: " + j.state_dir + "\n" + j.extra;
}

pid_t TrainerPid(const std::string& log, int attempt) {
  const std::regex re("event=trainer_started attempt=" + std::to_string(attempt) + " pid=([0-9]+)");
  std::smatch m;
  return std::regex_search(log, m, re) ? static_cast<pid_t>(std::stol(m[1])) : 0;
}

}  // namespace spotvisor::testing
