"""What pyproject.toml cannot say about the spotvisor wheel: the version, the binary as a
script, and the platform tag. Run by the build backend in build-wheel.sh's staging
directory (the metadata is in pyproject.toml); not meant to be run by hand.

The binary is a wheel script (<name>-<version>.data/scripts/spotvisor), which pip installs
into the environment's bin/ as it is: the command is the binary itself, with no Python
process in front of it.
"""

import os
import re

from setuptools import Command, setup

VERSION_ENV = "SPOTVISOR_WHEEL_VERSION"
# Glibc 2.17 is manylinux2014, which every pip since 19.3 reads. The binary is fully static
# (no interpreter, no shared library, no versioned symbol), so it holds for any glibc.
PLATFORM = "manylinux_2_17_x86_64"


def version() -> str:
    value = os.environ.get(VERSION_ENV, "")
    # A public PEP 440 version exactly as the binary prints it, so that the wheel's name
    # carries the same string (setuptools would normalise anything else).
    if not re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", value):
        raise SystemExit(f"setup.py: {VERSION_ENV}={value!r} is not a version like 0.1.0 "
                         "(build-wheel.sh sets it from `spotvisor --version`)")
    return value


class build_scripts(Command):  # noqa: N801 (the command's name)
    """Copies each script byte for byte, executable. distutils' own build_scripts reads
    every script as Python source to rewrite its #! line and fails on a native binary."""

    description = "copy native executables to the build directory"
    user_options = []

    def initialize_options(self) -> None:
        self.build_dir = None
        self.scripts = None

    def finalize_options(self) -> None:
        self.set_undefined_options("build", ("build_scripts", "build_dir"))
        self.scripts = self.distribution.scripts or []

    def get_source_files(self):
        return list(self.scripts)

    def run(self) -> None:
        self.mkpath(self.build_dir)
        for script in self.scripts:
            target = os.path.join(self.build_dir, os.path.basename(script))
            self.copy_file(script, target, preserve_times=False)
            os.chmod(target, 0o755)


setup(
    version=version(),
    scripts=["scripts/spotvisor"],
    cmdclass={"build_scripts": build_scripts},
    options={"bdist_wheel": {"plat_name": PLATFORM}},
)
