#!/usr/bin/python3
"""Run torchrun with the "checkpoint now" signal ignored by the torchrun agent itself.

spotvisor signals the whole process group (`signals.target: group`), so the torchrun agent
receives SIGUSR1 along with its workers. torchrun (1.13 at least) installs no handler for
SIGUSR1, and the default action of SIGUSR1 is to terminate: the agent would die and leave
its workers behind. This launcher sets SIGUSR1 to "ignore" and then execs torchrun. An
ignored disposition survives exec and is inherited by the workers, which install their own
handler (spotvisor_helper.SignalFlags) and so still see the signal. SIGTERM needs nothing:
torchrun forwards it to the workers and waits for them to exit.

Usage: torchrun_launch.py [--ignore-signal SIGUSR1] TORCHRUN-ARGS...
(the arguments are passed to `python -m torch.distributed.run` unchanged).
"""

import os
import signal
import sys


def main() -> None:
    args = sys.argv[1:]
    ignored = "SIGUSR1"
    if args[:1] == ["--ignore-signal"] and len(args) >= 2:
        ignored, args = args[1], args[2:]
    name = ignored.upper() if ignored.upper().startswith("SIG") else "SIG" + ignored.upper()
    signal.signal(getattr(signal.Signals, name), signal.SIG_IGN)
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *args])


if __name__ == "__main__":
    main()
