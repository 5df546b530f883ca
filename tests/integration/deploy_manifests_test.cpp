// deploy/kubernetes/ checked as a cluster would (tests/npm/validate_manifests.js): the Job,
// PyTorchJob and JobSet against the Kubernetes OpenAPI schemas (kubernetes-models) and the
// CRDs' JSON schemas (ajv), and spotvisor's contract: terminationGracePeriodSeconds above
// the job file's grace, the stop exit code ignored or retried. Each broken copy must fail.
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
    auto child = testing::Spawn(argv, dir_ / "validate.log");
    const int rc = testing::WaitExit(child.pid, 60s);
    *out = testing::ReadFile(dir_ / "validate.log");
    return rc;
  }

  // deploy/kubernetes/job.yaml with `from` replaced by `to`, validated; its output.
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
  ASSERT_EQ(Validate({kDeploy / "job.yaml", kDeploy / "pytorchjob.yaml", kDeploy / "jobset.yaml"}, &out), 0) << out;
  EXPECT_NE(out.find("valid: 5 documents in 3 files"), std::string::npos) << out;
}

TEST_F(DeployManifestsTest, AGracePeriodBelowTheJobFilesGraceFails) {
  for (const std::string file : {"job.yaml", "pytorchjob.yaml", "jobset.yaml"}) {
    const std::string out = BrokenJob(file, "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 39");
    EXPECT_NE(out.find("terminationGracePeriodSeconds 39 is below signals.grace 25s"), std::string::npos) << out;
  }
  // The job file's side: a longer grace in the ConfigMap than the pod allows.
  const std::string out = BrokenJob("job.yaml", "grace: 25s", "grace: 1m");
  EXPECT_NE(out.find("terminationGracePeriodSeconds 45 is below signals.grace 1m"), std::string::npos) << out;
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
  EXPECT_NE(BrokenJob("jobset.yaml", "action: RestartJobSetAndIgnoreMaxRestarts", "action: Retry")
                .find("must be equal to one of the allowed values"),
            std::string::npos);
  EXPECT_NE(BrokenJob("jobset.yaml", "parallelism: 1\n", "parallelism: one\n").find("parallelism must be integer"),
            std::string::npos);
}

TEST_F(DeployManifestsTest, AStopExitCodeTheControllerCountsAsFailureFails) {
  const std::string ignored = BrokenJob("job.yaml", "values: [143]", "values: [75]");
  EXPECT_NE(ignored.find("no onExitCodes rule for 143"), std::string::npos) << ignored;
  const std::string permanent = BrokenJob("job.yaml", "stop_exit_code: 143", "stop_exit_code: 75");
  EXPECT_NE(permanent.find("no onExitCodes rule for 75"), std::string::npos) << permanent;
}

}  // namespace
}  // namespace spotvisor
