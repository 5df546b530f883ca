// The plain-Python example trainer (examples/plain_trainer/train.py: deterministic, exact
// resume, no torch) as the real trainer of integration and fault tests: its uninterrupted
// result, a job file around it, and the pid of an attempt from spotvisor's log.
#pragma once

#include <sys/types.h>

#include <string>

#include "support/test_support.hpp"

namespace spotvisor::testing {

// What the trainer's job file varies.
struct PlainJob {
  std::string steps = "120";
  std::string step_sleep = "0.02";  // seconds per step
  std::string resume_extra;         // more resume_args, each `, "arg"`
  std::string extra;                // more YAML sections at the end
  std::string checkpoint_dir = "./ckpt";
  std::string state_dir = "./state";
};

// The digest an uninterrupted run of `steps` steps writes (checkpoints in dir/ref-ckpt).
std::string UninterruptedDigest(const TempDir& dir, const std::string& steps);

// A job file (YAML text) running the trainer with a checkpoint every 10 steps, its
// heartbeat in dir/heartbeat and its result in dir/result.
std::string TrainerJob(const TempDir& dir, const PlainJob& job);

// The pid of attempt `attempt`, from spotvisor's log; 0 when not started yet.
pid_t TrainerPid(const std::string& log, int attempt);

}  // namespace spotvisor::testing
