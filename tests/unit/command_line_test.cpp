// Launchers recognized by their argv (what signals.target: auto decides on), as users type
// them and as /proc shows them once a console script runs under its interpreter.
#include "spotvisor/command/command_line.hpp"

#include <gtest/gtest.h>

#include "spotvisor/config/loader.hpp"

namespace spotvisor::command {
namespace {

struct Case {
  std::vector<std::string> argv;
  std::string launcher;  // "" = none
};

TEST(RecognizeLauncher, LaunchersAsUsersTypeThemAndAsProcShowsThem) {
  const std::vector<Case> cases{
      {{"torchrun", "--nproc_per_node=8", "train.py"}, "torchrun"},
      {{"/usr/bin/torchrun", "--standalone", "train.py"}, "torchrun"},
      {{"/usr/bin/python3.11", "/usr/bin/torchrun", "--standalone", "train.py"}, "torchrun"},  // /proc of the above
      {{"python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"}, "torchrun"},
      {{"/usr/bin/python3", "-u", "-X", "faulthandler", "-m", "torch.distributed.launch", "t.py"}, "torchrun"},
      {{"python", "-mtorch.distributed.run", "t.py"}, "torchrun"},
      {{"env", "OMP_NUM_THREADS=1", "-u", "HOME", "torchrun", "t.py"}, "torchrun"},
      {{"accelerate", "launch", "--num_processes=2", "t.py"}, "accelerate"},
      {{"python3", "-m", "accelerate.commands.launch", "t.py"}, "accelerate"},
      {{"deepspeed", "--num_gpus=8", "t.py"}, "deepspeed"},
      {{"/usr/bin/python3", "-u", "-m", "deepspeed.launcher.launch", "--world_info=x", "t.py"}, "deepspeed"},
      {{"mpirun", "-np", "4", "python3", "t.py"}, "mpirun"},
      {{"/opt/openmpi/bin/mpiexec", "-n", "2", "t"}, "mpirun"},
      // Not launchers: a trainer, a trainer named like one in its arguments, other modules.
      {{"/usr/bin/python3", "train.py", "--launcher", "torchrun"}, ""},
      {{"python3", "-m", "torch.utils.bottleneck", "t.py"}, ""},
      {{"python3", "-c", "import torch.distributed.run"}, ""},
      {{"accelerate", "config"}, ""},
      {{"bash", "run_torchrun.sh"}, ""},
      {{"pythonista", "torchrun"}, ""},
      {{}, ""},
  };
  for (const auto& c : cases) {
    const auto got = RecognizeLauncher(c.argv);
    std::string line;
    for (const auto& a : c.argv) line += a + " ";
    EXPECT_EQ(got ? got->name : "", c.launcher) << line;
    if (got) {
      EXPECT_FALSE(got->evidence.empty()) << line;
    }
  }
}

TEST(RecognizeLauncher, EvidenceSaysWhatInTheArgvDecided) {
  EXPECT_EQ(RecognizeLauncher({"torchrun", "t.py"})->evidence, "argv[0] is torchrun");
  EXPECT_EQ(RecognizeLauncher({"python3", "-m", "torch.distributed.run"})->evidence,
            "python3 -m torch.distributed.run");
  EXPECT_EQ(RecognizeLauncher({"/usr/bin/python3.11", "/usr/bin/torchrun"})->evidence, "python3.11 runs torchrun");
}

// How many processes a launch on this machine starts, by the launcher's own options, and
// when they do not say.
TEST(RecognizeLauncher, ProcessesOfAOneMachineLaunch) {
  const std::vector<std::pair<std::vector<std::string>, int>> cases{
      {{"torchrun", "--standalone", "--nproc_per_node=2", "train.py"}, 2},
      {{"torchrun", "--nproc-per-node", "4", "--nnodes", "1", "train.py", "--nproc_per_node", "9"}, 4},
      {{"python3", "-m", "torch.distributed.run", "--nnodes=1:1", "--nproc_per_node", "8", "t.py"}, 8},
      {{"/usr/bin/python3.11", "/usr/bin/torchrun", "--nproc_per_node", "3", "t.py"}, 3},  // nnodes defaults to 1
      {{"accelerate", "launch", "--multi_gpu", "--mixed_precision", "no", "--num_processes", "2", "t.py"}, 2},
      {{"accelerate", "launch", "--num_processes=2", "--num_machines=1", "t.py"}, 2},
      // Not known: several machines, a placeholder, "auto", a config file, other launchers.
      {{"torchrun", "--nnodes", "2", "--nproc_per_node", "8", "t.py"}, 0},
      {{"torchrun", "--nnodes", "{nnodes}", "--nproc_per_node", "8", "t.py"}, 0},
      {{"torchrun", "--standalone", "--nproc_per_node", "auto", "t.py"}, 0},
      {{"torchrun", "--standalone", "t.py", "--nproc_per_node", "2"}, 0},  // the script's own option
      {{"accelerate", "launch", "--num_processes", "8", "--num_machines", "2", "t.py"}, 0},
      {{"accelerate", "launch", "--config_file", "c.yaml", "t.py"}, 0},
      {{"deepspeed", "--num_gpus", "2", "t.py"}, 0},
      {{"mpirun", "-np", "4", "python3", "t.py"}, 0},
  };
  for (const auto& [argv, processes] : cases) {
    std::string line;
    for (const auto& a : argv) line += a + " ";
    const auto got = RecognizeLauncher(argv);
    ASSERT_TRUE(got) << line;
    EXPECT_EQ(got->processes, processes) << line;
    EXPECT_EQ(got->processes_evidence.empty(), processes == 0) << line;
  }
  EXPECT_EQ(RecognizeLauncher({"torchrun", "--nproc_per_node=2", "t.py"})->processes_evidence, "--nproc_per_node 2");
}

// What Finalize makes of signals.target: auto, and what --print-config says of it.
TEST(SignalTargetAuto, WorkersForALauncherGroupOtherwiseAndSaysWhy) {
  auto job = config::DefaultConfig("/tmp");
  EXPECT_EQ(job.signals.target, config::SignalTarget::kAuto);
  job.job.command = {"/usr/bin/env", "torchrun", "--nproc_per_node=2", "train.py"};
  ASSERT_TRUE(config::Finalize(job));
  EXPECT_EQ(job.signals.Recipients(), config::SignalTarget::kWorkers);
  EXPECT_EQ(job.signals.target_why, "auto: torchrun is a launcher (argv[1] is torchrun)");
  EXPECT_NE(config::ToYaml(job).find("target: auto  # signals go to: workers (auto: torchrun is a launcher"),
            std::string::npos)
      << config::ToYaml(job);

  auto plain = config::DefaultConfig("/tmp");
  plain.job.command = {"/bin/true"};
  ASSERT_TRUE(config::Finalize(plain));
  EXPECT_EQ(plain.signals.Recipients(), config::SignalTarget::kGroup);
  EXPECT_NE(plain.signals.target_why.find("starts no launcher"), std::string::npos);

  auto chosen = config::DefaultConfig("/tmp");
  chosen.job.command = {"/usr/bin/env", "torchrun"};
  chosen.signals.target = config::SignalTarget::kGroup;  // the user's word wins
  ASSERT_TRUE(config::Finalize(chosen));
  EXPECT_EQ(chosen.signals.Recipients(), config::SignalTarget::kGroup);
  EXPECT_EQ(chosen.signals.target_why, "signals.target is group");
}

// What Finalize makes of checkpoints.processes: auto, and what --print-config says of it.
TEST(ProcessesAuto, TheLaunchersCountUnlessTheJobSaysAndSaysWhy) {
  auto job = config::DefaultConfig("/tmp");
  job.job.command = {"/usr/bin/env", "accelerate", "launch", "--num_processes", "2", "t.py"};
  ASSERT_TRUE(config::Finalize(job));
  EXPECT_EQ(job.checkpoints.Processes(), 2);
  EXPECT_NE(config::ToYaml(job).find("processes: auto  # auto: 2 processes (accelerate --num_processes 2)"),
            std::string::npos)
      << config::ToYaml(job);

  auto plain = config::DefaultConfig("/tmp");
  plain.job.command = {"/bin/true"};
  ASSERT_TRUE(config::Finalize(plain));
  EXPECT_EQ(plain.checkpoints.Processes(), 0);
  EXPECT_NE(plain.checkpoints.processes_why.find("auto: unknown (job.command starts no launcher)"), std::string::npos);

  auto chosen = config::DefaultConfig("/tmp");
  chosen.job.command = {"/usr/bin/env", "torchrun", "--standalone", "--nproc_per_node", "2", "t.py"};
  chosen.checkpoints.processes = 4;  // the user's word wins
  ASSERT_TRUE(config::Finalize(chosen));
  EXPECT_EQ(chosen.checkpoints.Processes(), 4);
  EXPECT_NE(config::ToYaml(chosen).find("processes: 4"), std::string::npos);
}

}  // namespace
}  // namespace spotvisor::command
