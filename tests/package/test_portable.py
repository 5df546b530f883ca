"""The portable binary (scripts/package.sh -> dist/spotvisor-<version>-linux-x86_64) where
nothing else is: copied alone into an empty root (no /lib, no /usr; only /proc, /dev and /tmp
mounted) and run chrooted there.

  Artifact    fully static (no interpreter, no shared library), stripped, <= 9 MiB, its
              .sha256 right, `--version` naming the version, the commit and "Release".
  EmptyRoot   a static test child supervised through a file notice (drained inside the
              window), a restart when the notice clears and a resume from the checkpoint
              written in the window, exit 0; `mock-metadata` serving a notice to a client
              outside; a name from the root's /etc/hosts resolved and an etcd joined over
              https with a CA file and a client certificate.

Run (as root: chroot and mounts): SPOTVISOR_DIST=dist SPOTVISOR_STATIC_CHILD=build/tests/\
spotvisor_child_helper_static /usr/bin/python3 -m unittest -v tests.package.test_portable
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path
from typing import List, Optional

from tests.e2e.test_multinode import Etcd, etcd_missing_reason
from tests.e2e.test_multinode_tls import make_pki
from tests.package.support import portable_binary, run

STATIC_CHILD = os.environ.get("SPOTVISOR_STATIC_CHILD", "")
MAX_BYTES = 8 * 1024 * 1024  # stripped: the promise made when the portable binary was


class Artifact(unittest.TestCase):
    def test_static_stripped_small_with_its_checksum_and_version(self):
        binary = portable_binary()
        program = run(["readelf", "-lW", binary], 60).stdout
        self.assertNotIn("Requesting program interpreter", program)
        self.assertNotIn("(NEEDED)", run(["readelf", "-dW", binary], 60).stdout)
        self.assertNotIn(".symtab", run(["readelf", "-SW", binary], 60).stdout, "not stripped")
        self.assertLessEqual(binary.stat().st_size, MAX_BYTES)
        digest, name = (binary.parent / (binary.name + ".sha256")).read_text().split()
        self.assertEqual(name, binary.name)
        self.assertEqual(digest, hashlib.sha256(binary.read_bytes()).hexdigest())
        version = binary.name[len("spotvisor-"):-len("-linux-x86_64")]
        out = run([binary, "--version"], 60).stdout.strip()
        self.assertRegex(out, rf"^spotvisor {re.escape(version)} \(commit [0-9a-f]{{12}}, build Release\)$")


    def test_gpu_telemetry_loads_nvml_through_the_static_dlopen(self):
        # The stand-in libnvidia-ml.so.1 (tests/helpers/fake_nvml.cpp) is linked against this
        # machine's shared glibc, as the driver's library is: glibc's static dlopen must load it.
        fake = os.environ.get("SPOTVISOR_FAKE_NVML_DIR", "")
        if not (Path(fake) / "libnvidia-ml.so.1").exists():
            raise AssertionError(f"SPOTVISOR_FAKE_NVML_DIR={fake!r} has no libnvidia-ml.so.1")
        work = Path(tempfile.mkdtemp(prefix="spotvisor-portable-gpu-"))
        self.addCleanup(shutil.rmtree, work, True)
        (work / "job.yaml").write_text('job:\n  command: ["/bin/true"]\ncheckpoints:\n  dir: ./ckpt\n'
                                       '  pattern: "ckpt_step{step}"\nprovider:\n  kind: none\n')
        done = subprocess.run([str(portable_binary()), "preflight", "--config", str(work / "job.yaml"), "--write-size",
                               "1MiB"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "LD_LIBRARY_PATH": fake})
        self.assertIn("  gpu      2 × NVIDIA (0: NVIDIA H200 (fake NVML), 141.0 GiB; 1: NVIDIA L4 (fake NVML), "
                      "24.0 GiB), driver 550.54.15-fake", done.stdout + done.stderr)


class EmptyRoot(unittest.TestCase):
    """A root with the binary, the static child and the job's files: nothing else."""

    def setUp(self) -> None:
        if os.geteuid() != 0:
            raise AssertionError("chroot and mounts need root (the test command runs as root)")
        if not STATIC_CHILD or not Path(STATIC_CHILD).is_file():
            raise AssertionError(f"SPOTVISOR_STATIC_CHILD={STATIC_CHILD!r} is not the static test child")
        self.root = Path(tempfile.mkdtemp(prefix="spotvisor-empty-root-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        for d in ("proc", "dev", "tmp", "etc", "job"):
            (self.root / d).mkdir()
        self.mounted: List[Path] = []
        self.addCleanup(self.unmount_all)
        self.mount(["-t", "proc", "proc"], "proc")
        self.mount(["--rbind", "/dev"], "dev")
        self.mount(["-t", "tmpfs", "tmpfs"], "tmp")
        shutil.copy2(portable_binary(), self.root / "spotvisor")
        shutil.copy2(STATIC_CHILD, self.root / "child")
        (self.root / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
        self.procs: List[subprocess.Popen] = []
        self.addCleanup(self.stop_all)

    def mount(self, args: List[str], where: str) -> None:
        run(["mount", *args, self.root / where], 60)
        self.mounted.append(self.root / where)

    def unmount_all(self) -> None:
        for path in reversed(self.mounted):
            if subprocess.run(["umount", "-R", str(path)], capture_output=True, timeout=30).returncode != 0:
                subprocess.run(["umount", "-lR", str(path)], capture_output=True, timeout=30)

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)

    def start(self, args: List[str], log: str) -> subprocess.Popen:
        out = open(self.root / log, "wb")
        self.addCleanup(out.close)
        p = subprocess.Popen(["chroot", str(self.root), "/spotvisor", *args], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def text(self, log: str) -> str:
        return (self.root / log).read_text(errors="replace")

    def wait_for(self, what, timeout: float, why: str, log: Optional[str] = None) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if what():
                return
            time.sleep(0.05)
        raise AssertionError(f"{why} within {timeout}s" + (f":\n{self.text(log)}" if log else ""))

    def job(self, extra: str, command: List[str]) -> str:
        lines = [
            "job:", "  name: portable", f"  command: {json.dumps(command)}",
            '  resume_args: ["--step={step}"]', "  workdir: /job",
            "checkpoints:", "  dir: /job/ckpt", '  pattern: "ckpt_step{step}"', "  format: any",
            "signals:", "  grace: 30s", "  kill_timeout: 5s",
            "restart:", "  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}",
            "telemetry:", "  state_dir: /job/state", "  log_format: text",
        ]
        (self.root / "job" / "job.yaml").write_text("\n".join(lines) + "\n" + extra)
        return "/job/job.yaml"

    def test_a_notice_a_restart_and_a_resume(self):
        (self.root / "job" / "ckpt").mkdir()
        job = self.job("provider:\n  kind: file\n  file: /job/notice\n  poll_interval: 50ms\n"
                       "  safety_margin: 1s\n  min_grace: 1s\n  resume_after: 300ms\n",
                       ["/child", "--mode=checkpoint", "--sleep-ms=3000", "--ckpt-dir=/job/ckpt", "--ready=/job/ready",
                        "--record=/tmp/record.txt"])
        sv = self.start(["run", "--config", job], "job/out.txt")
        ready = self.root / "job" / "ready"
        self.wait_for(ready.exists, 30, "the child did not start", "job/out.txt")
        ready.unlink()
        deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 4))
        (self.root / "job" / "notice").write_text(json.dumps({"deadline": deadline, "kind": "drill"}))
        self.wait_for(lambda: "event=drained" in self.text("job/out.txt"), 30, "no drain", "job/out.txt")
        saved = sorted(p.name for p in (self.root / "job" / "ckpt").iterdir() if p.name.startswith("ckpt_step"))
        self.assertTrue(saved, self.text("job/out.txt"))
        (self.root / "job" / "notice").unlink()  # the notice clears; the machine lives on
        self.assertEqual(sv.wait(60), 0, self.text("job/out.txt"))
        out = self.text("job/out.txt")
        self.assertIn("event=resume_after_notice", out)
        self.assertIn("event=stopping reason=notice", out)
        # The record is on the root's /tmp (a tmpfs mounted there): read it through the root.
        records = (self.root / "tmp" / "record.txt").read_text().splitlines()
        self.assertEqual(len(records), 2, out)
        step = saved[-1][len("ckpt_step"):]
        self.assertIn(f"SPOTVISOR_RESUME_FROM=/job/ckpt/ckpt_step{step} ", records[1])
        self.assertIn("SPOTVISOR_RESTART_COUNT=1 ", records[1])
        self.assertTrue(records[1].endswith(f"--step={step}"), records[1])
        state = json.loads((self.root / "job" / "state" / "state.json").read_text())
        self.assertEqual((state.get("failures"), state.get("preemptions")), (0, 1), state)

    def test_mock_metadata_serves_a_notice_to_a_client_outside(self):
        sv = self.start(["mock-metadata", "--provider", "gcp", "--listen", "127.0.0.1:0", "--port-file",
                         "/tmp/port", "--preempt-after", "10ms"], "mock.txt")
        port_file = self.root / "tmp" / "port"
        self.wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 30, "no port", "mock.txt")
        port = int(port_file.read_text())
        request = urllib.request.Request(f"http://127.0.0.1:{port}/computeMetadata/v1/instance/preempted",
                                         headers={"Metadata-Flavor": "Google"})

        # FALSE until --preempt-after has passed on the mock's clock: the port file can come
        # first, and a busy machine can run its timer late (it answered FALSE once in the
        # test command, the lanes' builds beside it).
        def preempted() -> bool:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.read().decode().strip() == "TRUE"

        self.wait_for(preempted, 30, "the mock never said TRUE", "mock.txt")
        sv.terminate()
        self.assertEqual(sv.wait(30), 0, self.text("mock.txt"))

    def test_a_host_name_and_an_etcd_over_https_with_a_ca_file(self):
        reason = etcd_missing_reason()
        if reason:
            raise AssertionError(reason)  # the test command installs etcd-server
        work = Path(tempfile.mkdtemp(prefix="spotvisor-portable-etcd-"))
        self.addCleanup(shutil.rmtree, work, True)
        pki = make_pki(work / "pki")
        etcd = Etcd(work, scheme="https", extra=[
            "--cert-file", str(pki["server.pem"]), "--key-file", str(pki["server.key"]),
            "--client-cert-auth", "--trusted-ca-file", str(pki["ca.pem"])])
        self.addCleanup(etcd.stop)
        (self.root / "pki").mkdir()
        for name in ("ca.pem", "client.pem", "client.key"):
            shutil.copy2(pki[name], self.root / "pki" / name)
        # By name: the server's certificate says DNS:localhost, the root's /etc/hosts where it is.
        url = etcd.url.replace("127.0.0.1", "localhost")
        job = self.job("\n".join([
            "coordination:", f"  etcd: [{json.dumps(url)}]", "  nodes: 1", "  node_rank: 0",
            "  prefix: /spotvisor-portable", "  lease_ttl: 3s", "  join_timeout: 1m", "  advertise: 127.0.0.1",
            "  tls: {ca: /pki/ca.pem, cert: /pki/client.pem, key: /pki/client.key}"]) + "\n",
            ["/child", "--mode=exit", "--sleep-ms=500"])
        sv = self.start(["run", "--config", job], "job/out.txt")
        self.assertEqual(sv.wait(90), 0, self.text("job/out.txt"))
        out = self.text("job/out.txt")
        self.assertRegex(out, r"event=group_agreed .*epoch=1", out)


if __name__ == "__main__":
    unittest.main()
