"""The Python wheel (packaging/wheel/build-wheel.sh, run by scripts/package.sh) ->
dist/spotvisor-<version>-py3-none-manylinux_2_17_x86_64.whl, next to the portable binary
dist/spotvisor-<version>-linux-x86_64 (+ .sha256) it carries.

  Contents    the name, WHEEL (Tag, Root-Is-Purelib), METADATA, RECORD (every entry's hash and
              size); the binary is the only script, executable, byte-identical to the portable
              binary and to its .sha256; the helper is python/spotvisor_helper as it is here.
  Auditwheel  `auditwheel show` finds no external shared library and no versioned symbol, so
              the wheel holds for manylinux_2_17 (its tag) and older.
  Installed   a fresh venv of Debian's python (--system-site-packages: its torch is visible),
              `pip install --no-index --no-deps`: bin/spotvisor is the binary itself (same bytes,
              same --version) and spotvisor_helper imports from the venv.
  Job         (tests/package/test_wheel_job.py) a trainer run through a notice and a resume
              as a user runs it after `pip install spotvisor`.
  Uninstall   `pip uninstall -y spotvisor` removes the command and the helper.

Run from the repository root:
  SPOTVISOR_DIST=dist /usr/bin/python3 -m unittest tests/package/test_wheel.py -v
Environment: SPOTVISOR_DIST (default <repo>/dist), SPOTVISOR_PYENV_PYTHON (the pinned PyPI
environment's python, for auditwheel; default: what scripts/python-env.sh prints),
SPOTVISOR_E2E_SLOW (multiplies every timeout). No network is used.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import zipfile
from pathlib import Path
from typing import Dict, Sequence

from tests.package import support

REPO = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("SPOTVISOR_DIST") or REPO / "dist")
SLOW = float(os.environ.get("SPOTVISOR_E2E_SLOW", "1") or "1")
PLATFORM = "manylinux_2_17_x86_64"
TAG = f"py3-none-{PLATFORM}"
HELPER = REPO / "python" / "spotvisor_helper"
TRAINER = REPO / "examples" / "torch_trainer" / "train.py"
# The example trainer's schedule (as the e2e tests run it): 40 steps, a checkpoint every 10.
TRAINER_ARGS = ["--steps", "40", "--checkpoint-every", "10", "--keep", "0"]


# ---------------------------------------------------------------------------------------
# Processes: every one with a timeout; a failure shows the command and its output.

def run(cmd: Sequence[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """support.run with the timeout scaled by SPOTVISOR_E2E_SLOW."""
    return support.run(cmd, timeout * SLOW, **kw)


def clean_env() -> Dict[str, str]:
    """This environment without anything that could make Python or pip look elsewhere than
    the venv under test: no SPOTVISOR_*, PYTHONPATH/HOME, user site, pip configuration,
    index or proxy."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPOTVISOR_", "PIP_", "PYTHON"))
           and k not in ("VIRTUAL_ENV", "CONDA_PREFIX")
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_hash(data: bytes) -> str:
    """A RECORD hash: sha256=<urlsafe base64, no padding>."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# ---------------------------------------------------------------------------------------
# The artifacts

portable_binary = support.portable_binary
version = support.version


def wheel() -> Path:
    found = sorted(DIST.glob("spotvisor-*.whl"))
    if len(found) != 1:
        raise AssertionError(f"expected one spotvisor wheel in {DIST}, found {[p.name for p in found]}: run "
                             "scripts/package.sh (or packaging/wheel/build-wheel.sh BINARY OUTDIR)")
    return found[0]


def pyenv_python() -> str:
    """The pinned PyPI environment's python (auditwheel is in it)."""
    path = os.environ.get("SPOTVISOR_PYENV_PYTHON")
    if not path:
        # Made the first time (a 4 GB download); cached afterwards, then it takes a second.
        path = run([REPO / "scripts" / "python-env.sh"], 1800).stdout.strip().splitlines()[-1]
    if not os.access(path, os.X_OK):
        raise AssertionError(f"the PyPI environment's python {path!r} is not executable")
    return path


class Venv:
    """A fresh virtual environment of Debian's python that sees its system packages
    (python3-torch), as a user's environment with torch would, with the wheel installed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", root], 300)
        self.bin = root / "bin"
        self.python = self.bin / "python"
        self.spotvisor = self.bin / "spotvisor"

    def pip(self, *args: str) -> str:
        return run([self.python, "-m", "pip", *args], 300, env=clean_env()).stdout

    def install(self, wheel_path: Path) -> None:
        self.pip("install", "--no-index", "--no-deps", str(wheel_path))

    def env(self) -> Dict[str, str]:
        """A shell after `source venv/bin/activate`: the venv's bin first on PATH."""
        env = clean_env()
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", os.defpath)])
        env["VIRTUAL_ENV"] = str(self.root)
        return env


_shared: Dict[str, object] = {}


def installed_venv() -> Venv:
    """One venv with the wheel installed, shared by Installed and Job (removed at the end)."""
    if "venv" not in _shared:
        root = Path(tempfile.mkdtemp(prefix="spotvisor-wheel-venv-"))
        _shared["dir"] = root
        venv = Venv(root / "venv")
        venv.install(wheel())
        _shared["venv"] = venv
    return _shared["venv"]  # type: ignore[return-value]


def tearDownModule() -> None:  # noqa: N802 (unittest's name)
    if "dir" in _shared:
        shutil.rmtree(_shared["dir"], ignore_errors=True)


# ---------------------------------------------------------------------------------------
# (a) What the wheel holds

class Contents(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.wheel = wheel()
        cls.version = version()
        cls.dist_info = f"spotvisor-{cls.version}.dist-info"
        cls.script = f"spotvisor-{cls.version}.data/scripts/spotvisor"
        with zipfile.ZipFile(cls.wheel) as z:
            cls.infos = {i.filename: i for i in z.infolist()}
            cls.files = {name: z.read(name) for name in cls.infos}

    def metadata(self, name: str):
        return email.parser.Parser().parsestr(self.files[f"{self.dist_info}/{name}"].decode())

    def test_name_and_wheel_metadata(self):
        self.assertEqual(self.wheel.name, f"spotvisor-{self.version}-{TAG}.whl")
        meta = self.metadata("WHEEL")
        self.assertEqual(meta["Wheel-Version"], "1.0")
        self.assertEqual(meta.get_all("Tag"), [TAG])
        # The Python in it is pure (the helper); the binary goes to scripts, whatever the root.
        self.assertEqual(meta["Root-Is-Purelib"], "true")

    def test_package_metadata(self):
        meta = self.metadata("METADATA")
        self.assertEqual((meta["Name"], meta["Version"]), ("spotvisor", self.version))
        self.assertEqual(meta["License-Expression"], "Apache-2.0")
        self.assertEqual(meta["Requires-Python"], ">=3.8")
        self.assertIsNone(meta.get_all("Requires-Dist"), "the wheel must not depend on anything (torch is the user's)")
        self.assertTrue(meta["Summary"])
        self.assertEqual(meta["Description-Content-Type"], "text/markdown")
        self.assertIn("pip install spotvisor", meta.get_payload())
        self.assertIn(f"{self.dist_info}/licenses/COPYRIGHT", self.files)
        self.assertNotIn(f"{self.dist_info}/entry_points.txt", self.files,
                         "no console-script wrapper: the command is the binary")

    def test_record_lists_every_file_with_its_hash_and_size(self):
        record = f"{self.dist_info}/RECORD"
        rows = list(csv.reader(io.StringIO(self.files[record].decode())))
        listed = {row[0]: row for row in rows}
        self.assertEqual(len(listed), len(rows), "RECORD lists a file twice")
        self.assertEqual(set(listed), set(self.files), "RECORD and the archive differ")
        self.assertEqual(listed[record][1:], ["", ""])
        for name, data in self.files.items():
            if name != record:
                self.assertEqual(listed[name][1:], [record_hash(data), str(len(data))], name)
        self.assertIn(self.script, listed)

    def test_the_binary_is_the_only_script_executable_and_the_portable_binary_byte_for_byte(self):
        scripts = sorted(n for n in self.files if "/scripts/" in n and n.split("/")[0].endswith(".data"))
        self.assertEqual(scripts, [self.script])
        data = self.files[self.script]
        self.assertTrue(data.startswith(b"\x7fELF"), "the command must be the binary, not a wrapper script")
        mode = self.infos[self.script].external_attr >> 16
        self.assertEqual(mode & 0o777, 0o755, f"mode {mode:o}: pip keeps the executable bit from here")
        binary = portable_binary()
        self.assertEqual(data, binary.read_bytes(), f"the wheel's binary differs from {binary}")
        digest, name = (binary.parent / (binary.name + ".sha256")).read_text().split()
        self.assertEqual((digest, name), (hashlib.sha256(data).hexdigest(), binary.name))
        out = run([binary, "--version"], 30).stdout
        self.assertRegex(out, rf"^spotvisor {re.escape(self.version)} \(commit [0-9a-f]+, build \w+\)$")

    def test_the_helper_is_this_checkouts(self):
        packaged = {n.split("/", 1)[1]: d for n, d in self.files.items() if n.startswith("spotvisor_helper/")}
        here = {p.name: p.read_bytes() for p in HELPER.glob("*.py")}
        self.assertEqual(sorted(packaged), sorted(here))
        for name, data in here.items():
            self.assertEqual(packaged[name], data, f"spotvisor_helper/{name} differs from {HELPER / name}")
        self.assertIn(f'__version__ = "{self.version}"', here["__init__.py"].decode())


# ---------------------------------------------------------------------------------------
# (b) auditwheel

class Auditwheel(unittest.TestCase):
    def test_no_external_library_and_no_versioned_symbol_so_the_tag_holds(self):
        # auditwheel reads every ELF file of the wheel, the executable in .data/scripts too:
        # its needed libraries and versioned symbols decide the tag it reports.
        py, whl = pyenv_python(), wheel()
        text = run([py, "-m", "auditwheel", "show", whl], 120).stdout
        shown = json.loads(run([py, "-m", "auditwheel", "show", "--json", whl], 120).stdout)
        why = f"auditwheel show {whl.name}:\n{text}"
        self.assertFalse(shown.get("pure", True), why)
        self.assertEqual(shown["external_libs"], {}, "the binary needs shared libraries: not static\n" + why)
        self.assertEqual(shown["versioned_symbols"], {}, "the binary uses versioned symbols: not static\n" + why)
        self.assertFalse(shown["unsupported_isa"], why)
        # The most compatible tag it holds for: manylinux_2_<m> with m <= 17 (our tag) .
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", shown["overall_tag"])
        self.assertTrue(match, why)
        self.assertLessEqual((int(match.group(1)), int(match.group(2))), (2, 17), why)
        self.assertIn("requires no external shared libraries", text)


# ---------------------------------------------------------------------------------------
# (c) Installed with pip into a fresh venv

class Installed(unittest.TestCase):
    def setUp(self) -> None:
        self.venv = installed_venv()
        self.cwd = Path(tempfile.mkdtemp(prefix="spotvisor-wheel-cwd-"))
        self.addCleanup(shutil.rmtree, self.cwd, True)

    def test_the_command_is_the_binary(self):
        venv = self.venv
        self.assertEqual(shutil.which("spotvisor", path=venv.env()["PATH"]), str(venv.spotvisor))
        self.assertFalse(venv.spotvisor.is_symlink())
        self.assertEqual(venv.spotvisor.stat().st_mode & 0o111, 0o111, "not executable")
        self.assertEqual(sha256(venv.spotvisor), sha256(portable_binary()), "pip changed the binary")
        ours = run([venv.spotvisor, "--version"], 30, cwd=self.cwd).stdout
        self.assertEqual(ours, run([portable_binary(), "--version"], 30).stdout)

    def test_the_helper_imports_from_the_venv(self):
        out = run([self.venv.python, "-c", "import spotvisor_helper as h; print(h.__file__); print(h.__version__)"],
                  60, cwd=self.cwd, env=self.venv.env()).stdout.split()
        where = Path(out[0]).resolve()
        self.assertTrue(where.is_relative_to(self.venv.root.resolve()), f"imported {where}, not the venv's copy")
        self.assertEqual(where.name, "__init__.py")
        self.assertEqual(out[1], version())


class Uninstall(unittest.TestCase):
    def test_pip_uninstall_removes_the_command_and_the_helper(self):
        root = Path(tempfile.mkdtemp(prefix="spotvisor-wheel-uninstall-"))
        self.addCleanup(shutil.rmtree, root, True)
        venv = Venv(root / "venv")
        venv.install(wheel())
        self.assertTrue(venv.spotvisor.is_file())
        venv.pip("uninstall", "-y", "spotvisor")
        self.assertFalse(venv.spotvisor.exists(), "pip uninstall left bin/spotvisor")
        left = sorted(str(p.relative_to(venv.root)) for p in venv.root.rglob("spotvisor*"))
        self.assertEqual(left, [], "pip uninstall left these")
        gone = run([venv.python, "-c", "import spotvisor_helper"], 60, cwd=root, env=venv.env(), check=False)
        self.assertNotEqual(gone.returncode, 0, "spotvisor_helper still imports after pip uninstall")


if __name__ == "__main__":
    unittest.main()
