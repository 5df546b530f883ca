"""Test hosts for the cross-host e2e tests: one network namespace per host, each with a veth
pair onto one bridge that lives in a namespace of its own, so nothing of the machine's own
network (its addresses, routes, firewall) is touched or seen.

  hosts = Hosts(["etcd", "node0", "node1"])   # 10.213.N.1, .2, .3 on the bridge
  proc = hosts.popen("node0", [...])           # `ip netns exec NAME ...`: the pid is the program's
  hosts.cut("node1"); hosts.reconnect("node1") # its bridge port down / up
  hosts.run("node0", [...])                    # to its end, the output captured
  HostEtcd.cluster(hosts, ["e0", "e1"], ...)   # etcd members on hosts; m.status(): its leader
  HostMock(hosts, "node0", ...)                # mock metadata on node0's own loopback
  hosts.close()                                # pids in the namespaces killed, then `ip netns del`

Names carry this process's pid: namespaces `sv<pid>-<host>` and `sv<pid>-br`, links
`sv<pid>h<i>` (the host's end, which keeps its name inside the host) and `sv<pid>p<i>` (the
bridge port), at most 11 characters (IFNAMSIZ is 15 with the NUL). The subnet's third byte N
comes from the pid too; since each run has a bridge of its own, two runs that drew the same
N could not reach each other anyway. Needs root and iproute2 (`ip`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tests.e2e.processes import MockMetadata, Supervisor, clean_env, deadline

IP = shutil.which("ip") or "/usr/sbin/ip"


def netns_missing_reason() -> Optional[str]:
    """None when this process can make network namespaces."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not os.access(IP, os.X_OK):
        return "no `ip` command (Debian: iproute2; scripts/setup.sh installs it)"
    probe = f"sv{os.getpid()}-probe"
    made = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run([IP, "netns", "del", probe], capture_output=True, timeout=30)
    return None


def ip(*args: str) -> None:
    done = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


class Hosts:
    """Hosts `names`, in that order at 10.213.N.1, .2, ...; torn down by close() (call it
    from addCleanup: it runs even when the constructor got half way)."""

    def __init__(self, names: Sequence[str]) -> None:
        tag = str(os.getpid())
        if len(tag) > 7:
            raise AssertionError(f"pid {tag} is too long for link names of at most 15 characters")
        self.tag = tag
        self.subnet = f"10.213.{1 + os.getpid() % 250}"
        self.bridge_ns = f"sv{tag}-br"
        self.ns: Dict[str, str] = {}
        self.addr: Dict[str, str] = {}
        self.ifname: Dict[str, str] = {}
        self.port: Dict[str, str] = {}
        self._made: List[str] = []  # namespaces, in the order made
        self._procs: List[subprocess.Popen] = []
        try:
            self._make(names)
        except BaseException:
            self.close()
            raise

    def _make(self, names: Sequence[str]) -> None:
        ip("netns", "add", self.bridge_ns)
        self._made.append(self.bridge_ns)
        ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, name in enumerate(names):
            ns, host_end, port = f"sv{self.tag}-{name}", f"sv{self.tag}h{i}", f"sv{self.tag}p{i}"
            ip("netns", "add", ns)
            self._made.append(ns)
            ip("link", "add", host_end, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.bridge_ns)
            self.ns[name], self.ifname[name], self.port[name] = ns, host_end, port
            self.addr[name] = f"{self.subnet}.{i + 1}"
            ip("-n", ns, "addr", "add", f"{self.addr[name]}/24", "dev", host_end)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", host_end, "up")
            ip("-n", self.bridge_ns, "link", "set", port, "master", "br0")
            ip("-n", self.bridge_ns, "link", "set", port, "up")

    def argv(self, host: str, argv: Sequence[str]) -> List[str]:
        """`argv` run on `host`: `ip netns exec` execs it, so the pid is the program's."""
        return [IP, "netns", "exec", self.ns[host], *map(str, argv)]

    def popen(self, host: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        proc = subprocess.Popen(self.argv(host, argv), **kw)
        self._procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """`argv` run on `host` to its end, its output captured as text."""
        return subprocess.run(self.argv(host, argv), capture_output=True, text=True, timeout=timeout)

    def adopt(self, proc: subprocess.Popen) -> None:
        """A process started elsewhere with argv(): close() kills it first."""
        self._procs.append(proc)

    def cut(self, host: str) -> None:
        """`host` off the network: its bridge port down (its own end stays up)."""
        ip("-n", self.bridge_ns, "link", "set", self.port[host], "down")

    def reconnect(self, host: str) -> None:
        ip("-n", self.bridge_ns, "link", "set", self.port[host], "up")

    def wait_listening(self, host: str, port: int, timeout: float = 30) -> None:
        """Until a TCP connect to host:port succeeds from inside `host`."""
        probe = ("import socket, sys\n"
                 "try:\n"
                 f"    socket.create_connection(({self.addr[host]!r}, {port}), timeout=1).close()\n"
                 "except OSError:\n"
                 "    sys.exit(1)\n")
        end = deadline(timeout)
        while True:
            done = subprocess.run(self.argv(host, ["/usr/bin/python3", "-c", probe]), capture_output=True,
                                  timeout=30)
            if done.returncode == 0:
                return
            if time.monotonic() > end:
                raise AssertionError(f"nothing listens on {self.addr[host]}:{port} in {self.ns[host]}")
            time.sleep(0.2)

    def close(self) -> None:
        """Every process in our namespaces killed by pid (those we started, then any left in
        them, e.g. trainers), then the namespaces deleted (their veths go with them), then
        any of our links left in the root namespace."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for ns in reversed(self._made):
            pids = subprocess.run([IP, "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout
            for pid in pids.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in reversed(self._made):
            subprocess.run([IP, "netns", "del", ns], capture_output=True, timeout=30)
        self._made = []
        for i in range(len(self.ifname)):
            for link in (f"sv{self.tag}h{i}", f"sv{self.tag}p{i}"):
                if subprocess.run([IP, "link", "show", link], capture_output=True, timeout=30).returncode == 0:
                    subprocess.run([IP, "link", "del", link], capture_output=True, timeout=30)


class HostEtcd:
    """One etcd member (Debian's /usr/bin/etcd) on `host` at its address, ports 2379 and
    2380 (each host has its own ports), data in `workdir`; `cluster` (`m0=http://ADDR:2380,...`)
    makes it `name`, one member of several, as HostEtcd.cluster does."""

    def __init__(self, hosts: Hosts, host: str, workdir: Path, etcd: str, name: str = "m0", cluster: str = "") -> None:
        addr = hosts.addr[host]
        self.hosts, self.host, self.name = hosts, host, name
        self.url = f"http://{addr}:2379"
        peer = f"http://{addr}:2380"
        self.log = workdir / f"etcd-{name}.log"
        with open(self.log, "ab") as out:
            self.proc = hosts.popen(
                host, [etcd, "--name", name, "--data-dir", str(workdir / f"etcd-{name}"), "--listen-client-urls",
                       self.url, "--advertise-client-urls", self.url, "--listen-peer-urls", peer,
                       "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster or f"{name}={peer}",
                       "--initial-cluster-token", workdir.name,
                       # etcd's advice: a member cut off and back does not unseat a healthy
                       # leader with the higher term of its lone elections.
                       "--pre-vote"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            hosts.wait_listening(host, 2379)
        except AssertionError as e:
            raise AssertionError(f"{e}: {self.log.read_text(errors='replace')[-2000:]}") from None

    @staticmethod
    def cluster(hosts: Hosts, names: Sequence[str], workdir: Path, etcd: str) -> List["HostEtcd"]:
        """Members m0, m1, ... of one cluster, on hosts `names`, in that order."""
        spec = ",".join(f"m{i}=http://{hosts.addr[h]}:2380" for i, h in enumerate(names))
        return [HostEtcd(hosts, h, workdir, etcd, f"m{i}", spec) for i, h in enumerate(names)]

    def status(self) -> Optional[dict]:
        """This member's /v3/maintenance/status (its member_id in header, the leader it
        knows), asked from its own host; None when it does not answer within a second."""
        probe = ("import sys, urllib.request\n"
                 "opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
                 "req = urllib.request.Request(sys.argv[1] + '/v3/maintenance/status', data=b'{}', method='POST')\n"
                 "try:\n"
                 "    print(opener.open(req, timeout=1).read().decode())\n"
                 "except OSError as e:\n"
                 "    sys.exit(f'{sys.argv[1]}: {e}')\n")
        done = self.hosts.run(self.host, ["/usr/bin/python3", "-c", probe, self.url])
        return json.loads(done.stdout) if done.returncode == 0 else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class HostSupervisor(Supervisor):
    """`spotvisor run` on `host` (as Supervisor, started through `ip netns exec`); the
    Hosts kill it by pid before the namespaces go."""

    def __init__(self, hosts: Hosts, host: str, binary: str, config: Path, log: Path,
                 extra: Sequence[str] = ()) -> None:
        self.log_path = log
        self.config = config
        with open(log, "ab") as out:
            self.proc = hosts.popen(host, [binary, "run", "--config", str(config), *extra], cwd=config.parent,
                                    env=clean_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


class HostMock(MockMetadata):
    """The mock metadata server on `host`'s own loopback (the instance metadata service is
    each machine's own); the test drives it from inside that host."""

    def __init__(self, hosts: Hosts, host: str, binary: str, provider: str, workdir: Path) -> None:
        self.hosts, self.host = hosts, host
        super().__init__(binary, provider, workdir, prefix=hosts.argv(host, []))
        hosts.adopt(self.proc)

    def _request(self, method: str, path: str, body: Optional[dict] = None) -> str:
        call = ("import sys, urllib.request\n"
                "opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
                "data = sys.argv[3].encode() if sys.argv[2] == 'POST' else None\n"
                "req = urllib.request.Request(sys.argv[1], data=data, method=sys.argv[2])\n"
                "sys.stdout.write(opener.open(req, timeout=10).read().decode())\n")
        data = json.dumps(body) if body is not None else ""
        done = self.hosts.run(self.host, ["/usr/bin/python3", "-c", call, self.url + path, method, data])
        if done.returncode != 0:
            raise AssertionError(f"{method} {self.url}{path} on {self.host}: {done.stderr.strip()}")
        return done.stdout
