"""The container image (deploy/container/Dockerfile), built and run with podman.

No registry is reachable from the test machines, so the base image is made here: the cached
Debian 12 root (tests/package/debian_root.sh) imported as localhost/spotvisor-test-debian,
passed as BASE_IMAGE. The build context is the release directory ($SPOTVISOR_DIST) as the
Dockerfile's header says. Everything lives in a podman storage of the test's own (a temp dir,
removed at the end), so nothing is left in the machine's /var/lib/containers.

  Image       `spotvisor --version` in the image is the portable binary's; the entrypoint and
              command are what deploy/kubernetes/*.yaml run; spotvisor_helper imports with the
              image's python3; a .sha256 that does not match fails the build; a job stopped by a
              trigger-file notice checkpoints, resumes and finishes with spotvisor as PID 1.

How podman runs here (a VM with cgroup v1 beside a cgroup2 mount that holds a controller;
root without CAP_SYS_RESOURCE): crun refuses that hybrid layout, so the runtime is runc, with
the cgroupfs manager; rlimits above this process's own cannot be set, so --ulimit is given
explicitly. Run from the repository root, as root:
    /usr/bin/python3 -m unittest tests/package/test_container.py -v
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import List

from tests.package.support import (REPO, CommandFailed, NoticeJob, artifact, debian_root_tarball, dist_dir,
                                   read_tail, require_root, require_tools, run)

DOCKERFILE = REPO / "deploy" / "container" / "Dockerfile"
MANIFESTS = sorted((REPO / "deploy" / "kubernetes").glob("*.yaml"))


def ulimits() -> List[str]:
    """Limits podman may set: no higher than this process's hard limits (podman's defaults
    are, and raising needs CAP_SYS_RESOURCE)."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]


class Podman:
    """podman with a storage of its own in `dir`."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.base = ["podman", "--root", str(dir / "storage"), "--runroot", str(dir / "run"), "--tmpdir",
                     str(dir / "tmp"), "--storage-driver", "overlay", "--runtime", "runc", "--cgroup-manager",
                     "cgroupfs", "--events-backend", "file"]

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return run([*self.base, *args], timeout, check=check)

    def argv(self, *args: str) -> List[str]:
        return [*self.base, *args]

    def close(self) -> None:
        self("rm", "--all", "--force", "--time", "0", timeout=120, check=False)
        self("rmi", "--all", "--force", timeout=300, check=False)
        with open("/proc/self/mounts") as f:
            still = [line.split()[1] for line in f if line.split()[1].startswith(str(self.dir) + "/")]
        for mount in reversed(still):
            subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir)], capture_output=True, timeout=300)


class Image(unittest.TestCase):
    podman: Podman

    @classmethod
    def setUpClass(cls) -> None:
        require_root("podman with its own storage")
        require_tools("podman", "runc")
        cls.binary = artifact("spotvisor-*-linux-x86_64")
        cls.version_line = run([cls.binary, "--version"], 30).stdout.strip()
        cls.version = cls.version_line.split()[1]
        for name in (f"{cls.binary.name}.sha256", f"spotvisor-{cls.version}-py3-none-manylinux_2_17_x86_64.whl"):
            artifact(name)
        tarball = debian_root_tarball()
        cls.podman = Podman(Path(tempfile.mkdtemp(prefix="spotvisor-podman-")))
        cls.addClassCleanup(cls.podman.close)
        cls.base = f"localhost/spotvisor-test-debian:{tarball.stem.rsplit('-', 1)[-1]}"
        cls.podman("import", str(tarball), cls.base, timeout=300)
        cls.image = f"localhost/spotvisor-test:{cls.version}"
        cls.build_output = cls.build(dist_dir(), cls.image).stdout

    @classmethod
    def build(cls, context: Path, tag: str, check: bool = True) -> subprocess.CompletedProcess:
        return cls.podman("build", "--network", "none", *ulimits(), "-f", str(DOCKERFILE), "--build-arg",
                          f"BASE_IMAGE={cls.base}", "--build-arg", f"SPOTVISOR_VERSION={cls.version}", "-t", tag,
                          str(context), timeout=600, check=check)

    def run_image(self, *args: str, entrypoint: str = "") -> str:
        extra = ["--entrypoint", entrypoint] if entrypoint else []
        return self.podman("run", "--rm", "--network", "none", *ulimits(), *extra, self.image, *args).stdout

    def test_version_is_the_portable_binarys(self):
        self.assertEqual(self.run_image("--version").strip(), self.version_line)
        self.assertIn("/out/usr/local/bin/spotvisor: OK", self.build_output)  # the checksum step ran

    def test_entrypoint_and_command_are_what_the_manifests_run(self):
        config = json.loads(self.podman("image", "inspect", self.image).stdout)[0]["Config"]
        self.assertEqual(config["Entrypoint"], ["/usr/local/bin/spotvisor"])
        self.assertEqual(config["Cmd"], ["run", "--config", "/etc/spotvisor/job.yaml"])
        # The manifests name the binary by PATH lookup in `command:`, which replaces the entrypoint.
        commands = []
        for manifest in MANIFESTS:
            for m in re.finditer(r"^\s*command:\s*(\[.*\])\s*$", manifest.read_text(), re.M):
                argv = json.loads(m.group(1))
                if argv[0] == "spotvisor":
                    commands.append((manifest.name, argv))
        self.assertTrue(commands, "no manifest runs spotvisor")
        for name, argv in commands:
            self.assertEqual(argv[1:], config["Cmd"], name)
        self.assertEqual(self.run_image("-c", "command -v spotvisor", entrypoint="/bin/sh").strip(),
                         "/usr/local/bin/spotvisor")

    def test_python_helper_imports_with_the_images_python3(self):
        out = self.run_image("-c", "import spotvisor_helper as h; print(h.__version__, h.__file__)",
                             entrypoint="/usr/bin/python3")
        self.assertRegex(out.strip(), r"^\S+ /usr/local/lib/python3\.\d+/dist-packages/spotvisor_helper/__init__\.py$")

    def test_a_checksum_that_does_not_match_fails_the_build(self):
        with tempfile.TemporaryDirectory(prefix="spotvisor-context-") as context:
            for f in dist_dir().glob(f"spotvisor-{self.version}-*"):
                shutil.copy(f, context)
            sha = Path(context) / f"{self.binary.name}.sha256"
            sha.write_text("0" * 64 + f"  {self.binary.name}\n")
            done = self.build(Path(context), "localhost/spotvisor-test:bad-checksum", check=False)
        self.assertNotEqual(done.returncode, 0, done.stdout)
        self.assertIn("/out/usr/local/bin/spotvisor: FAILED", done.stdout)

    def test_job_stopped_by_a_notice_checkpoints_resumes_and_finishes(self):
        host = self.podman.dir / "job"
        host.mkdir()
        job = NoticeJob(lambda inside: host / Path(inside).relative_to("/job"), job_dir="/job",
                        config="/job/demo.yaml", state_dir="/job/state")
        job.write()
        log = self.podman.dir / "job.log"
        name = f"spotvisor-test-job-{int(time.time())}"
        with open(log, "wb") as out:
            proc = subprocess.Popen(self.podman.argv("run", "--rm", "--name", name, "--network", "none", *ulimits(),
                                                     "-v", f"{host}:/job", self.image, "run", "--config", job.config),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

        def signal_spotvisor(signum: int) -> None:  # PID 1 of the container
            self.podman("kill", "--signal", str(int(signum)), name, timeout=30)

        try:
            job.drive(self, proc, log, signal_spotvisor)
        except CommandFailed as e:
            raise AssertionError(f"{e}\nspotvisor's log:\n{read_tail(log)}") from None
        finally:
            if proc.poll() is None:
                self.podman("rm", "--force", "--time", "0", name, timeout=60, check=False)
                proc.kill()
                proc.wait(30)
                print(f"spotvisor's log:\n{read_tail(log)}")


if __name__ == "__main__":
    unittest.main()
