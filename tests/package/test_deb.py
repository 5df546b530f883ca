"""The Debian package (packaging/deb/build-deb.sh), checked as users get it.

  Lintian        `lintian --fail-on error` passes on the .deb.
  Installed      in a fresh minimal Debian 12 root (tests/package/debian_root.sh, cached):
                 `apt-get install ./spotvisor_<version>_amd64.deb` works; the installed unit
                 passes `systemd-analyze verify`; `spotvisor --version` there is the portable
                 binary's; the Python module imports with Debian's python3; a job stopped by a
                 trigger-file notice checkpoints, resumes and finishes under the installed
                 spotvisor.
  Purged         `apt-get purge` leaves nothing of the package behind (bytecode included).

Run from the repository root, as root (chroot, mount):
    /usr/bin/python3 -m unittest tests/package/test_deb.py -v
SPOTVISOR_DIST: the directory with spotvisor_<version>_amd64.deb and the portable binary
spotvisor-<version>-linux-x86_64 (default <repo>/dist). SPOTVISOR_PACKAGE_KEEP=1 keeps the
roots. The root's apt needs no download: python3 and systemd, the package's Recommends, are
already in it.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import unittest

from tests.package.support import (ROOT_ENV, DebianRoot, NoticeJob, artifact, debian_root_tarball, read_tail,
                                   require_root, require_tools, run)

DEB_GLOB = "spotvisor_*_amd64.deb"
BINARY_GLOB = "spotvisor-*-linux-x86_64"
UNIT = "/lib/systemd/system/spotvisor@.service"


def expected_version_line() -> str:
    """What the portable binary's --version prints, run on this machine."""
    return run([artifact(BINARY_GLOB), "--version"], 30).stdout.strip()


class Lintian(unittest.TestCase):
    def test_lintian_reports_no_error(self):
        require_tools("lintian")
        deb = artifact(DEB_GLOB)
        out = run(["lintian", "--fail-on", "error", "--display-info", deb], 300).stdout
        self.assertNotIn("\nE: ", "\n" + out, out)

    def test_file_name_carries_the_binary_version(self):
        version = expected_version_line().split()[1]
        self.assertEqual(artifact(DEB_GLOB).name, f"spotvisor_{version}_amd64.deb")


class InstalledRoot(unittest.TestCase):
    """A fresh root with the package installed by apt, for each class."""

    root: DebianRoot

    @classmethod
    def setUpClass(cls) -> None:
        require_root("chroot and mount for the Debian root")
        require_tools("chroot", "mount", "umount", "tar")
        cls.deb = artifact(DEB_GLOB)
        cls.version_line = expected_version_line()
        cls.root = DebianRoot(debian_root_tarball())
        cls.root.__enter__()
        cls.addClassCleanup(cls.root.close)
        inside = f"/tmp/{cls.deb.name}"
        cls.root.host_path(inside).write_bytes(cls.deb.read_bytes())
        cls.apt_output = cls.root.run(["apt-get", "install", "-y", inside], 300).stdout
        if any(line.startswith("E:") for line in cls.apt_output.splitlines()):
            raise AssertionError(f"apt-get install reported an error:\n{cls.apt_output}")


class Installed(InstalledRoot):
    def test_dpkg_knows_it_installed(self):
        status = self.root.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", "spotvisor"], 30).stdout
        self.assertEqual(status, f"install ok installed {self.version_line.split()[1]}", self.apt_output)
        files = set(self.root.run(["dpkg", "-L", "spotvisor"], 30).stdout.split())
        for path in ("/usr/bin/spotvisor", UNIT, "/etc/spotvisor", "/usr/share/doc/spotvisor/copyright",
                     "/usr/share/doc/spotvisor/changelog.gz", "/usr/share/doc/spotvisor/operations.md",
                     "/usr/share/doc/spotvisor/README.md", "/usr/share/doc/spotvisor/examples/aws.yaml",
                     "/usr/share/man/man1/spotvisor.1.gz",
                     "/usr/lib/python3/dist-packages/spotvisor_helper/__init__.py"):
            self.assertIn(path, files)

    def test_installed_unit_verifies(self):
        unit = self.root.host_path(UNIT).read_text()
        self.assertIn("\nExecStart=/usr/bin/spotvisor run --config /etc/spotvisor/%i.yaml\n", unit)
        self.assertNotIn("/usr/local", unit)
        docs = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("Documentation=")]
        self.assertEqual(docs, ["file:///usr/share/doc/spotvisor/operations.md"])
        self.assertTrue(self.root.host_path("/usr/share/doc/spotvisor/operations.md").is_file())
        # An instance of the installed template, as `systemctl enable spotvisor@demo` would load it. verify
        # does not evaluate ConditionPathExists (no /etc/spotvisor/demo.yaml needed); it checks that
        # ExecStart's binary exists and is executable, and every setting.
        out = self.root.run(["systemd-analyze", "verify", "/lib/systemd/system/spotvisor@demo.service"], 60).stdout
        self.assertEqual(out, "")

    def test_version_is_the_portable_binarys(self):
        self.assertEqual(self.root.run(["spotvisor", "--version"], 30).stdout.strip(), self.version_line)

    def test_python_helper_imports_with_debians_python3(self):
        out = self.root.run(["python3", "-c", "import spotvisor_helper as h; print(h.__file__)"], 30).stdout
        self.assertEqual(out.strip(), "/usr/lib/python3/dist-packages/spotvisor_helper/__init__.py")
        cache = self.root.host_path("/usr/lib/python3/dist-packages/spotvisor_helper/__pycache__")
        self.assertTrue(any(cache.glob("signals.cpython-*.pyc")), "postinst did not compile the bytecode")

    def test_man_page_is_there(self):
        page = gzip.decompress(self.root.host_path("/usr/share/man/man1/spotvisor.1.gz").read_bytes()).decode()
        self.assertIn('.TH SPOTVISOR "1"', page)
        self.assertIn('.SS "spotvisor run"', page)

    def test_job_stopped_by_a_notice_checkpoints_resumes_and_finishes(self):
        job = NoticeJob(self.root.host_path, job_dir="/srv/demo", config="/etc/spotvisor/demo.yaml",
                        state_dir="/var/lib/spotvisor/demo")
        job.write()
        log = self.root.host_path("/srv/demo/spotvisor.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(self.root.argv(["/usr/bin/spotvisor", "run", "--config", job.config]),
                                    env=ROOT_ENV, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            job.drive(self, proc, log, lambda signum: os.kill(proc.pid, signum))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
                print(f"spotvisor's log:\n{read_tail(log)}")


class Purged(InstalledRoot):
    def test_purge_leaves_nothing_behind(self):
        self.root.run(["python3", "-c", "import spotvisor_helper"], 30)
        self.root.run(["apt-get", "purge", "-y", "spotvisor"], 120)
        left = [p for p in ("/usr/bin/spotvisor", UNIT, "/etc/spotvisor", "/usr/share/doc/spotvisor",
                            "/usr/lib/python3/dist-packages/spotvisor_helper") if self.root.host_path(p).exists()]
        self.assertEqual(left, [])
        status = self.root.run(["dpkg-query", "-W", "-f", "${Status}", "spotvisor"], 30, check=False).stdout
        self.assertNotIn("installed", status.replace("not-installed", ""))


if __name__ == "__main__":
    unittest.main()
