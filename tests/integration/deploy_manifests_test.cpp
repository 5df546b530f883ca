// deploy/kubernetes/ checked as a cluster would (tests/npm/validate_manifests.js): the Job,
// PyTorchJob, JobSet and etcd against the Kubernetes OpenAPI schemas (kubernetes-models) and
// the CRDs' JSON schemas (ajv), and spotvisor's contract: terminationGracePeriodSeconds above
// the job file's grace, the stop exit code ignored or retried, and for the multi-node JobSet
// coordination.nodes + coordination.spares = its pods, a state dir per pod, shared checkpoints,
// DNS host names, and with spares a lost pod replaced alone and a Job that completes without them.
// Each broken copy must fail, naming the manifest and the field.
// Skipped, saying why, when Node.js or tests/npm/node_modules is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const fs::path kSource = fs::path(SPOTVISOR_SOURCE_DIR);
const fs::path kNpmDir = kSource / "tests" / "npm";
const fs::path kDeploy = kSource / "deploy" / "kubernetes";

fs::path FindNode() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir) / "node";
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// `text` with the first `from` replaced by `to` (which must be there).
std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

class DeployManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = FindNode();
    if (node_.empty()) GTEST_SKIP() << "Node.js is not on PATH; the manifest validation needs it";
    if (!fs::exists(kNpmDir / "node_modules" / "kubernetes-models") || !fs::exists(kNpmDir / "node_modules" / "ajv")) {
      GTEST_SKIP() << "tests/npm/node_modules is missing: run tests/npm/setup.sh (npm ci) to install "
                      "kubernetes-models and ajv";
    }
  }

  int Validate(const std::vector<fs::path>& files, std::string* out) {
    std::vector<std::string> argv{node_.string(), (kNpmDir / "validate_manifests.js").string(), "--spotvisor",
                                  SPOTVISOR_BINARY};
    for (const auto& f : files) argv.push_back(f.string());
    fs::remove(dir_ / "validate.log");  // Spawn appends: each case reads its own output only
    auto child = testing::Spawn(argv, dir_ / "validate.log");
    const int rc = testing::WaitExit(child.pid, 60s);
    *out = testing::ReadFile(dir_ / "validate.log");
    return rc;
  }

  // deploy/kubernetes/`file` with `from` replaced by `to`, validated (with job.yaml's
  // ConfigMap) and refused; its output.
  std::string BrokenJob(const std::string& file, const std::string& from, const std::string& to) {
    const fs::path copy = dir_ / file;
    testing::WriteFile(copy, Replace(testing::ReadFile(kDeploy / file), from, to));
    std::vector<fs::path> files{copy};
    if (file != "job.yaml") files.push_back(kDeploy / "job.yaml");  // the ConfigMap
    std::string out;
    EXPECT_EQ(Validate(files, &out), 1) << out;
    return out;
  }

  fs::path node_;
  testing::TempDir dir_;
};

TEST_F(DeployManifestsTest, ShippedManifestsAreValid) {
  std::string out;
  ASSERT_EQ(
      Validate({kDeploy / "job.yaml", kDeploy / "pytorchjob.yaml", kDeploy / "jobset.yaml", kDeploy / "etcd.yaml"},
               &out),
      0)
      << out;
  EXPECT_NE(out.find("valid: 11 documents in 4 files"), std::string::npos) << out;
}

TEST_F(DeployManifestsTest, AGracePeriodBelowTheJobFilesGraceFails) {
  for (const std::string file : {"job.yaml", "pytorchjob.yaml", "jobset.yaml"}) {
    const std::string out = BrokenJob(file, "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 39");
    EXPECT_NE(out.find("terminationGracePeriodSeconds 39 is below signals.grace 25s"), std::string::npos) << out;
  }
  // The job file's side: a longer grace in the ConfigMap than the pod allows.
  const std::string out = BrokenJob("job.yaml", "grace: 25s", "grace: 1m");
  EXPECT_NE(out.find("terminationGracePeriodSeconds 45 is below signals.grace 1m"), std::string::npos) << out;
  // The JobSet's own ConfigMap is the one read for its pods.
  const std::string jobset = BrokenJob("jobset.yaml", "grace: 25s", "grace: 1m");
  EXPECT_NE(
      jobset.find("jobset.yaml document 3 (JobSet llama-70b) replicatedJob trainer: terminationGracePeriodSeconds 45 "
                  "is below signals.grace 1m"),
      std::string::npos)
      << jobset;
  // Left out, Kubernetes' default of 30 s is too short as well.
  const std::string unset = BrokenJob("job.yaml", "terminationGracePeriodSeconds: 45", "");
  EXPECT_NE(unset.find("terminationGracePeriodSeconds 30 is below"), std::string::npos) << unset;
}

TEST_F(DeployManifestsTest, SchemaErrorsFail) {
  EXPECT_NE(BrokenJob("job.yaml", "restartPolicy: Never", "restartPolicy: Sometimes").find("restartPolicy"),
            std::string::npos);
  EXPECT_NE(BrokenJob("job.yaml", "backoffLimit: 3", "backoffLimit: three").find("backoffLimit must be integer"),
            std::string::npos);
  EXPECT_NE(BrokenJob("pytorchjob.yaml", "restartPolicy: ExitCode", "restartPolicy: Sometimes")
                .find("must be equal to one of the allowed values"),
            std::string::npos);
  EXPECT_NE(BrokenJob("pytorchjob.yaml", "cleanPodPolicy: None", "cleanPodPolice: None")
                .find("must NOT have additional properties"),
            std::string::npos);
  EXPECT_NE(BrokenJob("jobset.yaml", "maxRestarts: 3 ", "maxRestarts: three ").find("maxRestarts must be integer"),
            std::string::npos);
  EXPECT_NE(BrokenJob("jobset.yaml", "parallelism: 5 ", "parallelism: five ").find("parallelism must be integer"),
            std::string::npos);
  EXPECT_NE(BrokenJob("jobset.yaml", "- succeededCount: 4 ", "- succeededCount: four ")
                .find("succeededCount must be integer"),
            std::string::npos);
  EXPECT_NE(BrokenJob("etcd.yaml", "replicas: 3\n", "replicas: three\n").find("replicas must be integer"),
            std::string::npos);
}

TEST_F(DeployManifestsTest, AStopExitCodeTheControllerCountsAsFailureFails) {
  const std::string ignored = BrokenJob("job.yaml", "values: [143]", "values: [75]");
  EXPECT_NE(ignored.find("no onExitCodes rule for 143"), std::string::npos) << ignored;
  const std::string permanent = BrokenJob("job.yaml", "stop_exit_code: 143", "stop_exit_code: 75");
  EXPECT_NE(permanent.find("no onExitCodes rule for 75"), std::string::npos) << permanent;
  const std::string jobset = BrokenJob("jobset.yaml", "stop_exit_code: 143", "stop_exit_code: 75");
  EXPECT_NE(jobset.find("(JobSet llama-70b) replicatedJob trainer: podFailurePolicy has no onExitCodes rule for 75"),
            std::string::npos)
      << jobset;
}

// The multi-node JobSet: each way of breaking the group is refused with the manifest, the
// field and the reason.
TEST_F(DeployManifestsTest, AMultiNodeJobSetThatCannotHoldTogetherFails) {
  const std::string where = "jobset.yaml document 3 (JobSet llama-70b) replicatedJob trainer: ";
  const auto expect = [&](const std::string& from, const std::string& to, const std::string& message) {
    const std::string out = BrokenJob("jobset.yaml", from, to);
    EXPECT_NE(out.find(where + message), std::string::npos) << "replacing " << from << "\n" << out;
  };
  // coordination.nodes + coordination.spares is the pod count, both ways.
  const std::string pods = "parallelism: 5                # coordination.nodes 4 + coordination.spares 1\n";
  expect(pods + "          completions: 5\n", "parallelism: 6\n          completions: 6\n",
         "coordination.nodes 4 + coordination.spares 1 in ConfigMap llama-70b-spotvisor key job.yaml is not the 6 "
         "pods that run it (replicas 1 x parallelism 6): 2 pods would wait as spares, more than the job file says");
  expect("nodes: 4 ", "nodes: 8 ",
         "coordination.nodes 8 + coordination.spares 1 in ConfigMap llama-70b-spotvisor key job.yaml is not the 5 pods "
         "that run it (replicas 1 x parallelism 5): every start would wait for nodes that never come");
  // Two replicated Jobs of 5: 10 pods, and the completion index alone repeats in each Job.
  const std::string replicas = BrokenJob("jobset.yaml", "replicas: 1\n", "replicas: 2\n");
  EXPECT_NE(replicas.find(
                where + "coordination.nodes 4 + coordination.spares 1 in ConfigMap llama-70b-spotvisor key job.yaml is "
                        "not the 10 pods"),
            std::string::npos)
      << replicas;
  EXPECT_NE(replicas.find("does not tell the 10 pods apart: it names no env var (in container trainer's env, expanded "
                          "as $(NAME)) from the downward API's metadata.labels['jobset.sigs.k8s.io/job-index']"),
            std::string::npos)
      << replicas;
  // spotvisor itself refuses a group without etcd: the validator says which ConfigMap.
  const std::string etcd =
      "etcd: [\"http://spotvisor-etcd-0.spotvisor-etcd:2379\", "
      "\"http://spotvisor-etcd-1.spotvisor-etcd:2379\",\n"
      "             \"http://spotvisor-etcd-2.spotvisor-etcd:2379\"]\n";
  expect(etcd, "etcd: []\n",
         "the job file in ConfigMap llama-70b-spotvisor is refused by spotvisor: spotvisor: configuration error: "
         "/etc/spotvisor/job.yaml:22: coordination.nodes: a group of several nodes needs coordination.etcd");
  // One state dir for every pod: the default, in the read-only ConfigMap mount.
  const std::string shared =
      BrokenJob("jobset.yaml", "args: [\"--state-dir\", \"/data/spotvisor-state/pod-$(POD_INDEX)\"]", "args: []");
  EXPECT_NE(shared.find(where + "the state dir /etc/spotvisor/.spotvisor/llama-70b (telemetry.state_dir in ConfigMap "
                                "llama-70b-spotvisor key job.yaml) does not tell the 5 pods apart"),
            std::string::npos)
      << shared;
  EXPECT_NE(shared.find("is on volume job-file, which is not a persistentVolumeClaim"), std::string::npos) << shared;
  // A per-pod value that changes on every restart (the pod name) loses the attempt ledger.
  expect("fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']", "fieldPath: metadata.name",
         "the state dir /data/spotvisor-state/pod-$(POD_INDEX) (--state-dir of container trainer) does not tell the 5 "
         "pods apart");
  // An env var Kubernetes does not know stays "$(POD_INDEX)" in every pod.
  expect("- name: POD_INDEX", "- name: NODE_INDEX",
         "the state dir /data/spotvisor-state/pod-$(POD_INDEX) (--state-dir of container trainer) does not tell the 5 "
         "pods apart");
  expect("completionMode: Indexed", "completionMode: NonIndexed",
         "completionMode NonIndexed: the pods have no batch.kubernetes.io/job-completion-index annotation");
  expect("/data/spotvisor-state/pod-$(POD_INDEX)", "/var/lib/spotvisor/pod-$(POD_INDEX)",
         "the state dir /var/lib/spotvisor/pod-$(POD_INDEX) (--state-dir of container trainer) is on no volume of "
         "container trainer");
  // Shared checkpoints: a volume every node mounts.
  expect("accessModes: [\"ReadWriteMany\"]", "accessModes: [\"ReadWriteOnce\"]",
         "checkpoints.dir /data/checkpoints (ConfigMap llama-70b-spotvisor key job.yaml) is on PersistentVolumeClaim "
         "llama-70b-shared (");
  expect("dir: /data/checkpoints", "dir: /scratch/checkpoints",
         "checkpoints.dir /scratch/checkpoints (ConfigMap llama-70b-spotvisor key job.yaml) is on no volume");
  expect("completions: 5", "completions: 8", "completions 8 is not parallelism 5");
  expect("enableDNSHostnames: true", "enableDNSHostnames: false", "spec.network.enableDNSHostnames is not true");
  // Two ConfigMaps of one name in one namespace: one would replace the other.
  const std::string twice = BrokenJob("jobset.yaml", "name: llama-70b-spotvisor", "name: llama-ft-spotvisor");
  EXPECT_NE(twice.find("ConfigMap llama-ft-spotvisor is also in"), std::string::npos) << twice;
}

// Hot spares (coordination.spares: 1): a preempted pod must be replaced alone (the spare takes
// its rank, the survivors keep their pods) and the Job must complete although the spare never
// exits 0. Each way of losing that is refused, naming the case and the field.
TEST_F(DeployManifestsTest, ASpareTheJobSetCannotUseFails) {
  const std::string where =
      "jobset.yaml document 3 (JobSet llama-70b) replicatedJob trainer: with coordination.spares 1 (ConfigMap "
      "llama-70b-spotvisor key job.yaml) ";
  const auto expect = [&](const std::string& from, const std::string& to, const std::string& message) {
    const std::string out = BrokenJob("jobset.yaml", from, to);
    EXPECT_NE(out.find(where + message), std::string::npos) << "replacing " << from << "\n" << out;
  };
  // The JobSet "host maintenance" pattern of the spare-less example: every pod restarted.
  expect("- action: Ignore          # replace", "- action: FailJob         # replace",
         "a preempted pod (condition DisruptionTarget, spotvisor exits 143) must be replaced alone while the spare "
         "takes its rank, but the first podFailurePolicy rule that matches it is FailJob: the Job fails and the "
         "JobSet restarts every pod");
  expect("- action: Ignore          # replace", "- action: FailJob         # replace",
         "a pod lost with its node (condition DisruptionTarget, container killed: 137) must be replaced alone");
  // spotvisor's own stop (a notice, SIGTERM without a condition) counted: backoffLimit 0 fails the Job.
  expect("- action: Ignore\n                onExitCodes", "- action: Count\n                onExitCodes",
         "spotvisor's resumable stop without a disruption condition (exit 143, job.stop_exit_code) must be replaced "
         "alone while the spare takes its rank, but the first podFailurePolicy rule that matches it is Count: it "
         "counts against backoffLimit 0, and past that the Job fails and the JobSet restarts every pod");
  // Rule order: a NotIn rule before the Ignore catches the killed container first.
  expect("            rules:\n              - action: Ignore          # replace",
         "            rules:\n              - action: FailJob\n                onExitCodes:\n"
         "                  operator: NotIn\n                  values: [143]\n"
         "              - action: Ignore          # replace",
         "a pod lost with its node (condition DisruptionTarget, container killed: 137) must be replaced alone while "
         "the spare takes its rank, but the first podFailurePolicy rule that matches it is FailJob");
  // The replacement must wait for the lost pod: its state dir is the same.
  expect("          podReplacementPolicy: Failed", "          podReplacementPolicy: TerminatingOrFailed",
         "podReplacementPolicy TerminatingOrFailed: a replacement pod would start while the lost one still drains");
  // Completion: a succeededCount below the nodes would end the Job while a node trains.
  const std::string success = "          successPolicy:\n            rules:\n              - succeededCount: 4 ";
  expect(success, "          successPolicy:\n            rules:\n              - succeededCount: 3 ",
         "successPolicy rule succeededCount 3 is below coordination.nodes 4: the Job would end, terminating every "
         "pod, while a node still trains");
  expect("- succeededCount: 4 ", "- succeededIndexes: \"0-3\"\n                succeededCount: 4 ",
         "successPolicy rule succeededIndexes 0-3: which pods are the nodes at the end is not fixed");
  // The spares are pods too.
  const std::string more = BrokenJob("jobset.yaml", "spares: 1 ", "spares: 2 ");
  EXPECT_NE(more.find("coordination.nodes 4 + coordination.spares 2 in ConfigMap llama-70b-spotvisor key job.yaml is "
                      "not the 5 pods that run it (replicas 1 x parallelism 5): only 1 of the 2 spares would wait"),
            std::string::npos)
      << more;
}

}  // namespace
}  // namespace spotvisor
