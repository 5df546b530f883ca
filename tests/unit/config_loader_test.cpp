// The job file: defaults, every key of MISSION.md's fixed core, and one test per class of
// error (unknown key, wrong type, bad duration, bad signal, missing command, paths,
// templates), each asserting the message names the file, the line and the key.
#include <gtest/gtest.h>

#include <csignal>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/config/templates.hpp"
#include "spotvisor/util/units.hpp"
#include "support/test_support.hpp"

namespace spotvisor::config {
namespace {

using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;

constexpr const char* kFixedCore = R"(job:
  name: llama-ft
  command: ["/usr/bin/python3", "train.py", "--ckpt-dir", "{checkpoint_dir}"]
  resume_args: ["--resume_from={checkpoint}"]
  workdir: .
  env: {OMP_NUM_THREADS: "1"}
  success_exit_codes: [0]
  result_file: ./result.txt
provider:
  kind: aws
  endpoint: http://127.0.0.1:1338
  poll_interval: 1s
signals:
  on_notice: SIGTERM
  checkpoint: SIGUSR1
  target: group
  grace: 90s
checkpoints:
  dir: ./ckpt
  pattern: "ckpt_step{step}"
  validate: full
  keep: 3
restart:
  max_restarts: 50
  max_hangs: 10
  no_progress_limit: 5
  backoff: {initial: 1s, max: 5m, multiplier: 2, jitter: 0.2}
  crash_loop: {failures: 5, window: 10m}
cadence:
  every: 10m
health:
  heartbeat_file: ./heartbeat
  hang_timeout: 10m
telemetry:
  state_dir: ./state
  metrics: {listen: "127.0.0.1:9187", token_file: ./metrics.token}
  log_format: text
)";

// Loads `yaml` as the file job.yaml in a temp dir and finalizes it.
Result<JobConfig> Load(const TempDir& dir, const std::string& yaml) {
  WriteFile(dir / "job.yaml", yaml);
  auto job = LoadJobFile(dir / "job.yaml");
  if (!job) return job;
  if (Status s = Finalize(*job); !s) return s.error();
  return job;
}

TEST(ConfigLoader, ReadsEveryKeyOfTheFixedCore) {
  TempDir dir;
  auto job = Load(dir, kFixedCore);
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->job.name, "llama-ft");
  EXPECT_EQ(job->job.command.at(3), "{checkpoint_dir}");
  EXPECT_EQ(job->job.resume_args.at(0), "--resume_from={checkpoint}");
  EXPECT_EQ(job->job.workdir, dir.path());
  EXPECT_EQ(job->job.env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(*job->job.result_file, dir / "result.txt");
  EXPECT_EQ(job->provider.kind, ProviderKind::kAws);
  EXPECT_EQ(job->provider.endpoint, "http://127.0.0.1:1338");
  EXPECT_EQ(job->provider.poll_interval, std::chrono::seconds(1));
  EXPECT_EQ(job->signals.on_notice, SIGTERM);
  EXPECT_EQ(job->signals.checkpoint, SIGUSR1);
  EXPECT_EQ(job->signals.target, SignalTarget::kGroup);
  EXPECT_EQ(job->signals.grace, std::chrono::seconds(90));
  EXPECT_EQ(*job->checkpoints.dir, dir / "ckpt");
  EXPECT_EQ(job->checkpoints.pattern, "ckpt_step{step}");
  EXPECT_EQ(job->checkpoints.validate, ValidateLevel::kFull);
  EXPECT_EQ(job->checkpoints.keep, 3);
  EXPECT_EQ(job->restart.backoff.max, std::chrono::minutes(5));
  EXPECT_DOUBLE_EQ(job->restart.backoff.jitter, 0.2);
  EXPECT_EQ(job->restart.crash_loop.window, std::chrono::minutes(10));
  EXPECT_EQ(job->cadence.mode, CadenceMode::kFixed);
  EXPECT_EQ(job->cadence.every, std::chrono::minutes(10));
  EXPECT_EQ(*job->health.heartbeat_file, dir / "heartbeat");
  EXPECT_EQ(job->telemetry.state_dir, dir / "state");
  EXPECT_EQ(job->telemetry.metrics.listen, "127.0.0.1:9187");
  EXPECT_EQ(*job->telemetry.metrics.token_file, dir / "metrics.token");
}

TEST(ConfigLoader, DefaultsWhenOnlyACommandIsGiven) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->job.name, "job");  // the file's stem
  // kind: auto by default, resolved on load from DMI (a spot VM is watched by default): the
  // evidence is kept, and the kind is never left at auto.
  EXPECT_FALSE(job->provider.detected_from.empty());
  EXPECT_NE(job->provider.kind, ProviderKind::kAuto);
  EXPECT_EQ(job->signals.grace, std::chrono::seconds(90));
  EXPECT_EQ(job->restart.max_restarts, 50);
  EXPECT_EQ(job->checkpoints.validate, ValidateLevel::kFull);
  EXPECT_EQ(job->telemetry.state_dir, dir / ".spotvisor" / "job");
  EXPECT_EQ(job->job.success_exit_codes, std::vector<int>{0});
}

// provider.kind: auto is resolved once, when the job is finalized: every reader of the job
// (the watcher, the instance facts, the report, preflight, cadence) sees the same kind.
TEST(ConfigLoader, ProviderAutoIsResolvedFromDmiWhenFinalized) {
  TempDir dir;
  std::filesystem::create_directories(dir / "dmi");
  WriteFile(dir / "dmi" / "sys_vendor", "Google\n");
  WriteFile(dir / "dmi" / "product_name", "Google Compute Engine\n");
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nprovider:\n  dmi_root: ./dmi\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->provider.kind, ProviderKind::kGcp);
  EXPECT_NE(job->provider.detected_from.find("Google"), std::string::npos) << job->provider.detected_from;

  auto written = Load(dir, "job:\n  command: [\"/bin/true\"]\nprovider:\n  kind: aws\n  dmi_root: ./dmi\n");
  ASSERT_TRUE(written) << written.error().message;
  EXPECT_EQ(written->provider.kind, ProviderKind::kAws);  // a written kind is never second-guessed
  EXPECT_TRUE(written->provider.detected_from.empty());
}

TEST(ConfigLoader, UnknownKeyNamesFileLineKeyAndSuggestion) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nrestart:\n  max_restart: 3\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:4"), std::string::npos) << job.error().message;
  EXPECT_NE(job.error().message.find("unknown key 'restart.max_restart'"), std::string::npos);
  EXPECT_NE(job.error().message.find("did you mean 'max_restarts'"), std::string::npos);
}

TEST(ConfigLoader, UnknownSectionListsKnownOnes) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\ncheckpoint_settings: {}\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:3"), std::string::npos) << job.error().message;
  EXPECT_NE(job.error().message.find("known keys"), std::string::npos);
}

TEST(ConfigLoader, WrongTypeNamesWhatWasExpected) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nrestart:\n  max_restarts: many\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:4: restart.max_restarts: 'many' is not an integer"), std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, SignalsDeferStopIsAutoByDefaultAndNeverWhenSaid) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_TRUE(job->signals.defer_stop);
  auto never = Load(dir, "job:\n  command: [\"/bin/true\"]\nsignals:\n  defer_stop: never\n");
  ASSERT_TRUE(never) << never.error().message;
  EXPECT_FALSE(never->signals.defer_stop);
  auto bad = Load(dir, "job:\n  command: [\"/bin/true\"]\nsignals:\n  defer_stop: always\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("signals.defer_stop"), std::string::npos) << bad.error().message;
}

TEST(ConfigLoader, CommandAsShellStringIsRefused) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: python train.py\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:2: job.command: expected an argv list"), std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, BadDurationNamesTheValue) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nsignals:\n  grace: 90 seconds\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:4: signals.grace: '90 seconds' is not a duration"), std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, BadSignalName) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nsignals:\n  on_notice: SIGTREM\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:4: signals.on_notice: 'SIGTREM' is not a signal name"),
            std::string::npos)
      << job.error().message;
}

// yaml-cpp recurses per nesting level: absurd nesting is refused before parsing.
TEST(ConfigLoader, AbsurdNestingIsRefusedNotOverflowed) {
  TempDir dir;
  std::string dashes = "    ";
  for (int i = 0; i < 5000; ++i) dashes += "- ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  env: " + std::string(100000, '[') + "\n", "job.yaml:3: nested deeper than 64 levels"},
      {"  args:\n" + dashes + "x\n", "job.yaml:4: nested deeper than 64 levels"},
  };
  for (const auto& [deep, expected] : cases) {
    auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\n" + deep);
    ASSERT_FALSE(job);
    EXPECT_NE(job.error().message.find(expected), std::string::npos) << job.error().message.substr(0, 200);
  }
  // Ordinary files are nowhere near it.
  EXPECT_TRUE(Load(dir, "job:\n  command: [\"/bin/true\", \"[[[not nesting]]]\"]\n  env: {A: \"{x}\"}\n"));
}

TEST(ConfigLoader, BadProgressPatternIsRefusedAtLoad) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nhealth:\n  progress_pattern: \"step=(\\\\d+\"\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:4: health.progress_pattern: not a valid regular expression"),
            std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, UncatchableSignalIsRefused) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nsignals:\n  checkpoint: SIGKILL\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:4: signals.checkpoint: SIGKILL and SIGSTOP cannot be caught"),
            std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, MissingCommand) {
  TempDir dir;
  auto job = Load(dir, "job:\n  name: x\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml: job.command: no command to run"), std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, RelativePathsStartAtTheJobFilesDirectory) {
  TempDir dir;
  std::filesystem::create_directories(dir / "sub" / "work");
  WriteFile(dir / "sub" / "job.yaml",
            "job:\n  command: [\"/bin/true\"]\n  workdir: work\ncheckpoints:\n  dir: ../ckpt\n");
  auto job = LoadJobFile(dir / "sub" / "job.yaml");
  ASSERT_TRUE(job) << job.error().message;
  ASSERT_TRUE(Finalize(*job));
  EXPECT_EQ(job->job.workdir, dir / "sub" / "work");
  EXPECT_EQ(*job->checkpoints.dir, dir / "ckpt");
}

TEST(ConfigLoader, WorkdirThatIsNotADirectory) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\n  workdir: ./nowhere\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:3: job.workdir: " + (dir / "nowhere").string() + " is not a directory"),
            std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, CheckpointPlaceholderOnlyInResumeArgs) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\", \"{checkpoint}\"]\ncheckpoints:\n  dir: ck\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:2: job.command: placeholder {checkpoint} cannot be used here"),
            std::string::npos)
      << job.error().message;
}

TEST(ConfigLoader, UnknownPlaceholder) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\", \"{checkpiont_dir}\"]\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("placeholder {checkpiont_dir}"), std::string::npos) << job.error().message;
}

// A name without {step} is a fixed name saved in place (ckpt.pt); a glob without {step}
// names no one file and is refused with the file, line and key.
TEST(ConfigLoader, PatternWithoutStepIsAFixedNameButNotAGlob) {
  TempDir dir;
  auto fixed = Load(dir, "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  pattern: ckpt.pt\n");
  ASSERT_TRUE(fixed) << fixed.error().message;
  EXPECT_EQ(fixed->checkpoints.pattern, "ckpt.pt");
  auto glob = Load(dir, "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  pattern: \"ckpt-*.pt\"\n");
  ASSERT_FALSE(glob);
  EXPECT_NE(glob.error().message.find("job.yaml:4: checkpoints.pattern: pattern 'ckpt-*.pt' has '*' but no {step}"),
            std::string::npos)
      << glob.error().message;
}

TEST(ConfigLoader, BackoffBoundsMustRelate) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\nrestart:\n  backoff: {initial: 10m, max: 1m}\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("restart.backoff.initial: 10m is larger than restart.backoff.max (1m)"),
            std::string::npos)
      << job.error().message;
}

// checkpoints.mirror: one form at a time, a remote rclone can parse, flags only for it.
TEST(ConfigLoader, MirrorMistakesNameTheKey) {
  TempDir dir;
  const std::string head = "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./ckpt\n  mirror:\n";
  const std::pair<std::string, std::string> cases[] = {
      {"    path: /mnt/b\n    remote: \"s3:b/j\"\n",
       "checkpoints.mirror: set one of path, command and remote (2 are set)"},
      {"    remote: my-bucket/jobs\n", "checkpoints.mirror.remote: 'my-bucket/jobs' is not an rclone remote"},
      {"    path: /mnt/b\n    rclone_flags: [\"-v\"]\n", "checkpoints.mirror.rclone_flags: only the remote form"},
  };
  for (const auto& [yaml, want] : cases) {
    auto job = Load(dir, head + yaml);
    ASSERT_FALSE(job) << yaml;
    EXPECT_NE(job.error().message.find(want), std::string::npos) << job.error().message;
  }
  auto ok = Load(dir, head + "    remote: \"s3:my-bucket/jobs\"\n    rclone_flags: [\"--fast-list\"]\n");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->checkpoints.mirror.remote, "s3:my-bucket/jobs");
  EXPECT_EQ(ok->checkpoints.mirror.rclone_flags, std::vector<std::string>{"--fast-list"});
  auto no_dir = Load(dir, "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  mirror:\n    remote: \"s3:b\"\n");
  ASSERT_FALSE(no_dir);
  EXPECT_NE(no_dir.error().message.find("set checkpoints.dir too"), std::string::npos) << no_dir.error().message;
}

// coordination: a multi-node job (issue 14); its templates work anywhere in the command.
TEST(ConfigLoader, CoordinationReadsItsKeysAndFillsTheAdvertisedAddress) {
  TempDir dir;
  auto job =
      Load(dir,
           "job:\n  command: [\"/bin/true\", \"--node_rank={node_rank}\", \"--nnodes={nnodes}\",\n"
           "            \"--master_addr={master_addr}\", \"--master_port={master_port}\", \"--rdzv_id={epoch}\"]\n"
           "coordination:\n  etcd: [\"http://10.0.0.5:2379\", \"http://10.0.0.6:2379\"]\n  nodes: 4\n"
           "  node_rank: 2\n  prefix: /jobs/\n  lease_ttl: 5s\n  join_timeout: 20m\n  master_port: 29600\n");
  ASSERT_TRUE(job) << job.error().message;
  const auto& c = job->coordination;
  EXPECT_TRUE(c.enabled());
  EXPECT_EQ(c.etcd.size(), 2u);
  EXPECT_EQ(c.nodes, 4);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.prefix, "/jobs");
  EXPECT_EQ(c.lease_ttl, std::chrono::seconds(5));
  EXPECT_EQ(c.join_timeout, std::chrono::minutes(20));
  EXPECT_EQ(c.master_port, 29600);
  EXPECT_FALSE(c.advertise.empty());  // the host name
  const std::string yaml = ToYaml(*job);
  EXPECT_NE(yaml.find("node_rank: 2"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("lease_ttl: 5s"), std::string::npos) << yaml;
  EXPECT_EQ(c.min_nodes, 4);  // off: the group never trains with fewer than `nodes`
  EXPECT_NE(yaml.find("min_nodes: 4"), std::string::npos) << yaml;

  auto shrinking = Load(dir,
                        "job:\n  command: [\"/bin/true\"]\ncoordination:\n  etcd: [\"http://e:2379\"]\n  nodes: 3\n"
                        "  min_nodes: 2\n  shrink_after: 10s\n  grow_wait: 20m\n");
  ASSERT_TRUE(shrinking) << shrinking.error().message;
  EXPECT_EQ(shrinking->coordination.min_nodes, 2);
  EXPECT_EQ(shrinking->coordination.shrink_after, std::chrono::seconds(10));
  EXPECT_EQ(shrinking->coordination.grow_wait, std::chrono::minutes(20));
  EXPECT_NE(ToYaml(*shrinking).find("shrink_after: 10s"), std::string::npos);
  EXPECT_NE(ToYaml(*shrinking).find("grow_wait: 20m"), std::string::npos);
  EXPECT_EQ(c.grow_wait, std::chrono::minutes(30));  // the default

  auto single = Load(dir, "job:\n  command: [\"/bin/true\"]\n");
  ASSERT_TRUE(single);
  EXPECT_FALSE(single->coordination.enabled());
  EXPECT_EQ(single->coordination.node_rank, kAutoRank);
  EXPECT_NE(ToYaml(*single).find("node_rank: auto"), std::string::npos);
}

TEST(ConfigLoader, CoordinationMistakesNameTheKey) {
  TempDir dir;
  const std::string head = "job:\n  command: [\"/bin/true\"]\ncoordination:\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  nodes: 2\n", "coordination.nodes: a group of several nodes needs coordination.etcd"},
      {"  etcd: [\"10.0.0.5:2379\"]\n", "'10.0.0.5:2379' is not an etcd URL"},
      {"  etcd: http://10.0.0.5:2379\n", "job.yaml:4: coordination.etcd: expected a list of etcd member URLs"},
      {"  etcd: [\"http://e:2379\"]\n  nodes: 2\n  node_rank: 2\n",
       "coordination.node_rank: 2 is not below coordination.nodes (2)"},
      {"  etcd: [\"http://e:2379\"]\n  lease_ttl: 1500ms\n", "coordination.lease_ttl: must be whole seconds"},
      {"  etcd: [\"http://e:2379\"]\n  prefix: spotvisor\n", "coordination.prefix: must start with '/'"},
      {"  etcd: [\"http://e:2379\"]\n  node_rank: first\n", "coordination.node_rank"},
      {"  spares: 1\n", "coordination.spares: spares wait in a group: they need coordination.etcd"},
      {"  etcd: [\"http://e:2379\"]\n  nodes: 2\n  node_rank: 1\n  spares: 1\n",
       "coordination.node_rank: must be auto with coordination.spares"},
      {"  etcd: [\"http://e:2379\"]\n  spares: 65\n", "coordination.spares"},
      {"  etcd: [\"http://e:2379\"]\n  nodes: 2\n  min_nodes: 3\n",
       "coordination.min_nodes: 3 is more than coordination.nodes (2)"},
      {"  etcd: [\"http://e:2379\"]\n  nodes: 3\n  min_nodes: 2\n  shrink_after: 30m\n",
       "coordination.shrink_after: 30m is not shorter than coordination.join_timeout (30m)"},
      {"  etcd: [\"http://e:2379\"]\n  nodes: 3\n  min_nodes: 2\n  shrink_after: 0s\n",
       "coordination.shrink_after: must be longer than 0"},
      {"  etcd: [\"http://e:2379\"]\n  nodes: 3\n  min_nodes: 2\n  grow_wait: 0s\n",
       "coordination.grow_wait: must be longer than 0"},
      {"  etcd: [\"http://e:2379\"]\n  min_nodes: 0\n", "coordination.min_nodes"},
  };
  for (const auto& [yaml, expected] : cases) {
    auto job = Load(dir, head + yaml);
    ASSERT_FALSE(job) << yaml;
    EXPECT_NE(job.error().message.find(expected), std::string::npos) << yaml << " -> " << job.error().message;
  }
}

TEST(ConfigLoader, InvalidYamlNamesTheLine) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"\n  name: x\n");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("job.yaml:"), std::string::npos);
  EXPECT_NE(job.error().message.find("not valid YAML"), std::string::npos) << job.error().message;
}

TEST(ConfigLoader, MissingFile) {
  auto job = LoadJobFile("/nonexistent/job.yaml");
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("/nonexistent/job.yaml: cannot read the job file"), std::string::npos);
}

TEST(ConfigLoader, PrintedConfigRedactsSecretsAndReloads) {
  TempDir dir;
  auto job = Load(dir, std::string(kFixedCore) + "");
  ASSERT_TRUE(job);
  job->job.env["HF_TOKEN"] = "hf_abcdef";
  const std::string yaml = ToYaml(*job);
  EXPECT_EQ(yaml.find("hf_abcdef"), std::string::npos);
  EXPECT_NE(yaml.find("<redacted>"), std::string::npos);
  WriteFile(dir / "again.yaml", yaml);
  auto again = LoadJobFile(dir / "again.yaml");
  ASSERT_TRUE(again) << again.error().message << "\n" << yaml;
  EXPECT_EQ(again->signals.grace, job->signals.grace);
  EXPECT_EQ(again->restart.backoff.multiplier, job->restart.backoff.multiplier);
}

// `key:` or `key: ~` is an error naming the key's line, never a quiet default; a section
// with nothing under it is all defaults.
TEST(ConfigLoader, AKeyWithoutAValueIsAnErrorNotTheDefault) {
  TempDir dir;
  for (const char* value : {"", " ~", " null"}) {
    auto job = Load(
        dir, std::string("job:\n  command: [\"/bin/true\"]\nsignals:\n  grace:") + value + "\n  on_notice: SIGTERM\n");
    ASSERT_FALSE(job) << "grace:" << value;
    EXPECT_NE(job.error().message.find("job.yaml:4: signals.grace: has no value (nothing, or ~, after the colon); "
                                       "expected a duration such as 90s, or remove the line to keep the default"),
              std::string::npos)
        << job.error().message;
  }
  auto dir_unset = Load(dir, "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ~\n");
  ASSERT_FALSE(dir_unset);
  EXPECT_NE(dir_unset.error().message.find("job.yaml:4: checkpoints.dir: has no value"), std::string::npos);
  auto sections = Load(dir, "job:\n  command: [\"/bin/true\"]\ncost:\nhooks: ~\n");
  ASSERT_TRUE(sections) << sections.error().message;
  EXPECT_FALSE(sections->cost.configured);
}

// Unset optional values print as comments, so a printed config with all of them unset
// reads back (it holds no `~`).
TEST(ConfigLoader, PrintedDefaultsReloadWithUnsetValuesAsComments) {
  TempDir dir;
  auto job = Load(dir, "job:\n  command: [\"/bin/true\"]\n");
  ASSERT_TRUE(job) << job.error().message;
  const std::string yaml = ToYaml(*job);
  EXPECT_NE(yaml.find("# job.result_file: not set"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("# cost: not set"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("~"), std::string::npos) << yaml;
  WriteFile(dir / "again.yaml", yaml);
  auto again = LoadJobFile(dir / "again.yaml");
  ASSERT_TRUE(again) << again.error().message << "\n" << yaml;
  EXPECT_FALSE(again->job.result_file);
  EXPECT_FALSE(again->cost.configured);
}

TEST(Units, Durations) {
  EXPECT_EQ(*ParseDuration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(*ParseDuration("90s"), std::chrono::seconds(90));
  EXPECT_EQ(*ParseDuration("5m"), std::chrono::minutes(5));
  EXPECT_EQ(*ParseDuration("1h"), std::chrono::hours(1));
  EXPECT_EQ(*ParseDuration("1h30m"), std::chrono::minutes(90));
  EXPECT_EQ(*ParseDuration("1.5s"), std::chrono::milliseconds(1500));
  EXPECT_EQ(*ParseDuration("0"), std::chrono::milliseconds(0));
  EXPECT_FALSE(ParseDuration("90"));
  EXPECT_FALSE(ParseDuration("s"));
  EXPECT_FALSE(ParseDuration("-1s"));
  EXPECT_FALSE(ParseDuration("5 parsecs"));
  EXPECT_EQ(FormatDuration(std::chrono::minutes(90)), "1h30m");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(250)), "250ms");
}

TEST(Units, Sizes) {
  EXPECT_EQ(*ParseSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1.5GB"), 1500000000ull);
  EXPECT_EQ(*ParseSize("4096"), 4096ull);
  EXPECT_FALSE(ParseSize("lots"));
  EXPECT_FALSE(ParseSize("12 parsecs"));
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
}

TEST(Signals, NamesAndNumbers) {
  EXPECT_EQ(*ParseSignal("SIGTERM"), SIGTERM);
  EXPECT_EQ(*ParseSignal("usr1"), SIGUSR1);
  EXPECT_EQ(*ParseSignal("15"), 15);
  EXPECT_FALSE(ParseSignal("SIGNOPE"));
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
}

TEST(Templates, ExpandPerArgumentWithoutAShell) {
  auto out = ExpandArgv({"--resume={checkpoint}", "{{literal}}", "a b; rm -rf /"},
                        {{"checkpoint", "/ck/ckpt_step5; echo pwned"}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->at(0), "--resume=/ck/ckpt_step5; echo pwned");
  EXPECT_EQ(out->at(1), "{literal}");
  EXPECT_EQ(out->at(2), "a b; rm -rf /");
  EXPECT_FALSE(ExpandTemplate("{unclosed", {}));
  EXPECT_FALSE(ExpandTemplate("{nope}", {}));
}

}  // namespace
}  // namespace spotvisor::config
