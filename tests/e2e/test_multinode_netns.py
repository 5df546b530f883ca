"""End-to-end: a multi-node group across hosts (issue 23). Each "host" is a network namespace
of its own (tests/e2e/netns.py): etcd's host, node 0 and node 1 (HostsCase.HOSTS; some cases
have more), each with a veth onto one bridge (in a namespace of its own) at 10.213.N.1, .2,
.3 and on. The spotvisors advertise their host's address, so the group's master_addr is node
0's, and torchrun's workers talk gloo over the bridge (GLOO_SOCKET_IFNAME is the host's veth).
Unlike tests/e2e/test_multinode.py, on loopback, a node here can be cut off from everything
at once: etcd and its peers; and an etcd member can go silent (no refused connection).

  Partition   (i) two-node torchrun with the example trainer (as GroupNotice); node 1's
              bridge port down for 15 s (lease_ttl 3s): node 0's trainer gets its stop within
              lease_ttl + 1 s ("node 1: left the group"); node 1 logs group_lease_lost and
              stops its own trainer, blocked in a gloo collective ("cut off ... shows no
              progress"); reconnected, both agree on epoch 2 from the same checkpoint, the
              job finishes, both exit 0, and the final weights equal an uninterrupted run's.
  CrossHostLeaseLapse (d') LeaseLapse across hosts: node 0's spotvisor and its trainer SIGKILLed,
              node 1 stops within lease_ttl + 1.5 s; a replacement on node 0's host
              (`node_rank: auto`) takes rank 0 and both start epoch 2.
  CrossHostGroupNotice (a'') GroupNotice across hosts, with a fourth host, node2: the notice
              comes from the mock AWS metadata service on node 0's own loopback (HostMock:
              each machine has its own); node 1's trainer gets its stop within 1 s of node
              0's; node 0 drains and exits 75; node 1 waits; a replacement on node2 takes rank
              0, so epoch 2's master_addr is node2's address; both resume from the same
              checkpoint, exit 0, and the final weights equal an uninterrupted run's.
  CrossHostEtcdFaults (f') three etcd members on hosts etcd0..etcd2 (peer and client URLs on
              their addresses), the nodes on two more, their trainers computing (COMPUTING,
              for 30 s); the leader's host cut off for 16 s (over lease_ttl, and over the
              ~11 s in which TCP keepalive finds a silent member): the other two elect a
              leader, both watches move to a live member, the trainers compute on and none
              stops; reconnected, the job finishes and both exit 0. A lease may be lost on
              the way (its keepalives unanswered for lease_ttl while the cluster is leaderless
              after the cut; the members run with --pre-vote, so the old leader, back, does
              not unseat the new one with the higher term of its lone elections);
              a node whose trainer computes goes on (`group_cut_off trainer=progressing`).

Needs root (network namespaces), iproute2 and etcd; the measured times are printed.

Run: SPOTVISOR_BINARY=build/spotvisor /usr/bin/python3 -m unittest -v tests.e2e.test_multinode_netns
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import unittest
from pathlib import Path
from typing import List, Tuple

from tests.e2e.netns import HostEtcd, HostMock, Hosts, HostSupervisor, netns_missing_reason
from tests.e2e.support import (EXAMPLE_ARGS, TORCH_TRAINER, E2ECase, NeedsTorchrun, Supervisor, deadline, events,
                               read_attempts, reference_digest, write_job)
from tests.e2e.test_multinode import COMPUTING, ETCD, etcd_missing_reason, stamp, timed_events

LEASE_TTL = 3.0


def torchrun_trainer(step_sleep: float) -> List[str]:
    """Two-node torchrun, one worker each: the example trainer (digest: reference_digest)."""
    return ["torchrun", "--nnodes=2", "--nproc_per_node=1", "--node_rank={node_rank}", "--master_addr={master_addr}",
            "--master_port={master_port}", "--redirects", "1", "--tee", "1", "--monitor_interval", "0.5",
            str(TORCH_TRAINER), "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}", *EXAMPLE_ARGS,
            "--step-sleep", str(step_sleep)]


def cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used (user and system, /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HostsCase(E2ECase):
    """Hosts HOSTS (etcd, node0 and node1), etcd on the first; node dirs node0/, node1/...,
    the checkpoints shared (the file system is the machine's: shared storage)."""
    HOSTS = ("etcd", "node0", "node1")

    def setUp(self) -> None:
        super().setUp()
        for reason in (etcd_missing_reason(), netns_missing_reason()):
            if reason:
                self.skipTest(reason)
        self.hosts = Hosts(self.HOSTS)
        self.addCleanup(self.hosts.close)  # before E2ECase's: kills by pid, then the namespaces
        self.start_etcd()
        (self.dir / "shared-ckpt").mkdir()

    def start_etcd(self) -> None:
        self.etcd = HostEtcd(self.hosts, "etcd", self.dir, ETCD)

    def etcd_urls(self) -> List[str]:
        return [self.etcd.url]

    def host_job(self, host: str, *, name: str, node_rank: str, command: List[str], **kw) -> Path:
        workdir = self.dir / host
        workdir.mkdir(exist_ok=True)
        ckpt = workdir / "ckpt"
        if not ckpt.exists():
            ckpt.symlink_to(self.dir / "shared-ckpt")
        coordination = "\n".join([
            "coordination:", f"  etcd: {json.dumps(self.etcd_urls())}", "  nodes: 2", f"  node_rank: {node_rank}",
            "  prefix: /spotvisor-e2e", f"  lease_ttl: {LEASE_TTL:.0f}s", "  join_timeout: 5m",
            f"  advertise: {self.hosts.addr[host]}", "  master_port: 29500"]) + "\n"
        # gloo otherwise takes the address the hostname resolves to (127.0.0.1 in many
        # /etc/hosts), which a peer on another host cannot reach: tried, nobody trains.
        return write_job(workdir / "job.yaml", name=name, command=command, pattern="ckpt_step{step}",
                         extra=coordination, env={"GLOO_SOCKET_IFNAME": self.hosts.ifname[host]}, **kw)

    def host_mock(self, host: str) -> HostMock:
        """The mock AWS metadata service on `host`'s loopback (its files in `host`'s dir)."""
        (self.dir / host).mkdir(exist_ok=True)
        mock = HostMock(self.hosts, host, self.binary, "aws", self.dir / host)
        self._mocks.append(mock)
        return mock

    def on_host(self, host: str, job: Path, name: str) -> Supervisor:
        sv = HostSupervisor(self.hosts, host, self.binary, job, self.dir / f"{name}.log")
        self._supervisors.append(sv)
        return sv

    def stop_time(self, sv: Supervisor) -> float:
        return stamp(timed_events(sv.text(), "stopping")[0])


class Partition(NeedsTorchrun, HostsCase):
    CUT_FOR = 15.0

    def test_i_a_node_cut_off_from_everything_stops_both_trainers_and_the_group_resumes_exactly(self):
        digest = reference_digest("torchrun")
        common = dict(name="llm", command=torchrun_trainer(0.15), resume_args=["--resume_from={checkpoint}"],
                      grace="5s")
        sv0 = self.on_host("node0", self.host_job("node0", node_rank="0", **common), "node0")
        sv1 = self.on_host("node1", self.host_job("node1", node_rank="1", **common), "node1")
        for sv in (sv0, sv1):
            agreed = sv.wait_event("group_agreed", 60)
            self.assertEqual((agreed["epoch"], agreed["step"], agreed["master_addr"]),
                             ("1", "none", self.hosts.addr["node0"]), agreed)
        sv0.wait_for(r"\[trainer\] saved step=10 reason=periodic", 240)
        sv0.wait_for(r"(?:^|:)step=1[3-9] ", 60)

        cut_at = time.time()
        self.hosts.cut("node1")
        # Node 0: node 1's lease lapses in etcd, its peer's stop follows at once.
        stop0 = sv0.wait_event("stopping", 20)
        self.assertEqual(stop0["reason"], "peer", stop0)
        self.assertIn("node 1: left the group", stop0["detail"])
        took0 = self.stop_time(sv0) - cut_at
        # Node 1: its own lease lost, its trainer blocked in gloo (no CPU): fenced off.
        lost = sv1.wait_event("group_lease_lost", 20)
        self.assertEqual(lost["rank"], "1", lost)
        stop1 = sv1.wait_event("stopping", 20)
        self.assertEqual(stop1["reason"], "peer", stop1)
        self.assertRegex(stop1["detail"], r"cut off .* shows no progress")
        took1 = self.stop_time(sv1) - cut_at
        self.assertLess(took0, LEASE_TTL + 1.0, "node 0 stops within lease_ttl + 1 s of the cut")
        for sv in (sv0, sv1):
            self.assertEqual(sv.wait_event("attempt_ended", 60)["outcome"], "peer-stopped")
        left = self.CUT_FOR - (time.time() - cut_at)
        self.assertGreater(left, 0, "the stops took longer than the cut")
        time.sleep(left)
        self.hosts.reconnect("node1")
        back_at = time.time()

        step = re.findall(r"\[trainer\] saved step=(\d+) reason=periodic", sv0.text())[-1]
        for sv, rank in ((sv0, "0"), (sv1, "1")):
            agreed = sv.wait_event("group_agreed", 120, lambda e: e["epoch"] == "2")
            self.assertEqual((agreed["rank"], agreed["step"]), (rank, step), agreed)
        again = max(stamp(timed_events(sv.text(), "group_agreed")[-1]) for sv in (sv0, sv1)) - back_at
        self.assert_exit(sv0, 0, 400)
        self.assert_exit(sv1, 0, 120)
        self.assertEqual(self.result_of(self.dir / "node0"), digest,
                         "the group resumed after the partition differs from an uninterrupted torchrun run")
        self.assertRegex(sv0.text(), rf"\[trainer\] resumed from=\S*ckpt_step{step} step={step}")
        for host in ("node0", "node1"):
            self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / host / "state")],
                             ["peer-stopped", "done"], host)
            state = json.loads((self.dir / host / "state" / "state.json").read_text())
            self.assertEqual(state.get("failures"), 0, state)
        print(f"\n[partition] cut -> node 0's stop {took0:.2f}s, node 1's (fenced) {took1:.2f}s; "
              f"reconnected after {back_at - cut_at:.1f}s -> epoch 2 agreed {again:.2f}s later, from step {step}",
              flush=True)


class CrossHostLeaseLapse(HostsCase):
    needs_torch = False
    SLEEPER = ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]

    def sleeper_job(self, host: str, rank: str) -> Path:
        return self.host_job(host, name="job", node_rank=rank, command=self.SLEEPER, resume_args=[],
                             result_file=None)

    def test_d_a_sigkilled_node_stops_its_peer_within_the_lease_and_a_replacement_takes_its_rank(self):
        job0 = self.sleeper_job("node0", "auto")
        sv0 = self.on_host("node0", job0, "node0-run1")
        self.assertEqual(sv0.wait_event("group_joined", 60)["rank"], "0")
        sv1 = self.on_host("node1", self.sleeper_job("node1", "1"), "node1")
        trainers = {}
        for name, sv in (("node0", sv0), ("node1", sv1)):
            agreed = sv.wait_event("group_agreed", 60)
            self.assertEqual((agreed["epoch"], agreed["master_addr"]), ("1", self.hosts.addr["node0"]), agreed)
            trainers[name] = int(sv.wait_event("trainer_started", 30)["pid"])
        killed_at = time.time()
        sv0.proc.kill()  # the machine goes: spotvisor and trainer, no goodbye
        try:
            os.kill(trainers["node0"], signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone with its spotvisor already (PDEATHSIG)
        sv0.proc.wait(10)
        stop = sv1.wait_event("stopping", 15)
        self.assertEqual(stop["reason"], "peer", stop)
        self.assertIn("node 0: left the group", stop["detail"])
        took = self.stop_time(sv1) - killed_at
        self.assertLess(took, LEASE_TTL + 1.5, "node 1 stops within lease_ttl + about a second")
        self.assertEqual(sv1.wait_event("attempt_ended", 15)["outcome"], "peer-stopped")

        sv0b = self.on_host("node0", job0, "node0-run2")
        self.assertEqual(sv0b.wait_event("group_joined", 60)["rank"], "0")
        for sv, rank in ((sv0b, "0"), (sv1, "1")):
            agreed = sv.wait_event("group_agreed", 60, lambda e: e["epoch"] == "2")
            self.assertEqual((agreed["rank"], agreed["master_addr"]), (rank, self.hosts.addr["node0"]), agreed)
            self.assertEqual(sv.wait_event("trainer_started", 30, lambda e: e["attempt"] != "1")["attempt"], "2")
        for sv in (sv0b, sv1):
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 30)
        state1 = json.loads((self.dir / "node1" / "state" / "state.json").read_text())
        self.assertEqual(state1.get("failures"), 0, state1)
        print(f"\n[lease-lapse] SIGKILL on node 0's host -> node 1's stop {took:.2f}s", flush=True)


class CrossHostGroupNotice(NeedsTorchrun, HostsCase):
    """GroupNotice across hosts; the replacement machine is a host of its own, node2."""
    HOSTS = ("etcd", "node0", "node1", "node2")

    def test_a_a_notice_on_rank_0s_host_stops_the_group_and_a_replacement_host_resumes_it_exactly(self):
        digest = reference_digest("torchrun")
        common = dict(name="llm", command=torchrun_trainer(0.15), resume_args=["--resume_from={checkpoint}"],
                      grace="60s")
        mock0 = self.host_mock("node0")  # each machine has its own metadata service
        sv0 = self.on_host("node0", self.host_job("node0", node_rank="auto", provider="aws", endpoint=mock0.url,
                                                  **common), "node0")
        self.assertEqual(sv0.wait_event("group_joined", 60)["rank"], "0")
        sv1 = self.on_host("node1", self.host_job("node1", node_rank="1", **common), "node1")
        for sv in (sv0, sv1):
            agreed = sv.wait_event("group_agreed", 60)
            self.assertEqual((agreed["epoch"], agreed["step"], agreed["master_addr"]),
                             ("1", "none", self.hosts.addr["node0"]), agreed)
        sv0.wait_for(r"\[trainer\] saved step=10 reason=periodic", 240)
        sv0.wait_for(r"(?:^|:)step=1[3-9] ", 60)
        mock0.preempt()

        stop0 = sv0.wait_event("stopping", 30)
        stop1 = sv1.wait_event("stopping", 30)
        self.assertEqual(stop0["reason"], "notice", stop0)
        self.assertEqual(stop1["reason"], "peer", stop1)
        self.assertIn("node 0: notice", stop1["detail"])
        apart = self.stop_time(sv1) - self.stop_time(sv0)
        self.assertLess(apart, 1.0, "node 1's trainer must get its stop within 1 s of node 0's")
        saved = sv0.wait_for(r"\[trainer\] saved step=(\d+) reason=stop path=(\S+)", 120)
        step, path = saved.group(1), saved.group(2)
        drained = sv0.wait_event("drained", 120, lambda e: "newest_good" in e)
        self.assertEqual((drained["newest_good"], drained["step"]), (path, step), drained)
        sv0.signal(signal.SIGTERM)  # the machine goes away
        self.assert_exit(sv0, 75, 90)

        # The survivor: its attempt ended as peer-stopped, nothing counted, waiting.
        self.assertEqual(sv1.wait_event("attempt_ended", 120)["outcome"], "peer-stopped")
        end = deadline(60)
        while len(events(sv1.text(), "group_waiting")) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        self.assertEqual(len(events(sv1.text(), "group_waiting")), 2, "the survivor waits for the group again")
        time.sleep(3)  # the replacement machine boots
        self.assertEqual(events(sv1.text(), "exit"), [], "the survivor must not exit for a peer's stop")

        mock2 = self.host_mock("node2")
        sv2 = self.on_host("node2", self.host_job("node2", node_rank="auto", provider="aws", endpoint=mock2.url,
                                                  **common), "node2")
        self.assertEqual(sv2.wait_event("group_joined", 60)["rank"], "0")
        for sv, rank in ((sv2, "0"), (sv1, "1")):
            agreed = sv.wait_event("group_agreed", 120, lambda e: e["epoch"] == "2")
            self.assertEqual((agreed["rank"], agreed["step"], agreed["master_addr"]),
                             (rank, step, self.hosts.addr["node2"]), agreed)
        started = stamp(timed_events(sv2.text(), "supervisor_started")[0])
        again = max(stamp(timed_events(sv.text(), "group_agreed")[-1]) for sv in (sv1, sv2)) - started
        self.assert_exit(sv2, 0, 400)
        self.assert_exit(sv1, 0, 120)
        self.assertEqual(self.result_of(self.dir / "node2"), digest,
                         "the group resumed on a replacement host differs from an uninterrupted torchrun run")
        self.assertRegex(sv2.text(), rf"\[trainer\] resumed from=\S*ckpt_step{step} step={step}")
        for host, outcomes in (("node0", ["preempted"]), ("node1", ["peer-stopped", "done"]), ("node2", ["done"])):
            self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / host / "state")], outcomes, host)
        state1 = json.loads((self.dir / "node1" / "state" / "state.json").read_text())
        self.assertEqual((state1.get("failures"), state1.get("consecutive_failures")), (0, 0), state1)
        print(f"\n[group-notice] notice on node 0's host -> node 1's stop {apart:.3f}s after node 0's; the "
              f"replacement on node 2's host started -> epoch 2 agreed {again:.3f}s later, from step {step}",
              flush=True)


class CrossHostEtcdFaults(HostsCase):
    """(f) across hosts: three etcd members on hosts of their own, the leader's host cut off
    for longer than lease_ttl while the group trains."""
    needs_torch = False
    HOSTS = ("etcd0", "etcd1", "etcd2", "node0", "node1")
    # Longer than lease_ttl, and than the ~11 s in which TCP keepalive finds the watch's
    # member silent (src/http/stream.cpp): the watch moves to a live member during the cut.
    CUT_FOR = 16.0

    def start_etcd(self) -> None:
        self.members = HostEtcd.cluster(self.hosts, self.HOSTS[:3], self.dir, ETCD)
        # The leader first in the job files: each spotvisor starts with the first member (and
        # keeps to the one that last answered), so the cut takes the member it talks to.
        self.etcd, _ = self.leader(self.members)

    def etcd_urls(self) -> List[str]:
        return [self.etcd.url] + [m.url for m in self.members if m is not self.etcd]

    def leader(self, members: List[HostEtcd], not_id: str = "", timeout: float = 30) -> Tuple[HostEtcd, str]:
        """The member that every one of `members` names as leader (other than `not_id`),
        and its id; each asked from its own host."""
        end = deadline(timeout)
        while True:
            seen = [m.status() for m in members]
            named = {s.get("leader") for s in seen if s}
            if None not in seen and len(named) == 1 and named.isdisjoint({not_id, "0", None}):
                lead = named.pop()
                for m, s in zip(members, seen):
                    if s["header"]["member_id"] == lead:
                        return m, lead
            if time.monotonic() > end:
                raise AssertionError(f"no leader among {[m.name for m in members]} (not {not_id!r}): {seen}")
            time.sleep(0.1)

    def test_f_the_etcd_leaders_host_cut_off_stops_no_trainer_and_the_job_finishes(self):
        # Trainers that compute, for 30 s (the cut and the settling after it), then exit 0.
        # Not the example trainer: asleep 97 % of a step, it is "blocked" to a node whose
        # lease lapses (under 5 % of a CPU), and a leader's loss can cost a 3 s lease.
        svs = [self.on_host(f"node{r}", self.host_job(f"node{r}", name="job", node_rank=str(r),
                                                      command=[*COMPUTING, "30"], resume_args=[], result_file=None),
                            f"node{r}") for r in (0, 1)]
        pids = []
        for sv in svs:
            self.assertEqual(sv.wait_event("group_agreed", 60)["epoch"], "1")
            pids.append(int(sv.wait_event("trainer_started", 30)["pid"]))
        old, old_id = self.leader(self.members)

        cut_at, cut_wall, cpu_at_cut = time.monotonic(), time.time(), [cpu_seconds(p) for p in pids]
        self.hosts.cut(old.host)
        rest = [m for m in self.members if m is not old]
        new, _ = self.leader(rest, not_id=old_id)
        elected = time.monotonic() - cut_at
        time.sleep(max(0.0, self.CUT_FOR - (time.monotonic() - cut_at)))
        trained = [cpu_seconds(p) - c for p, c in zip(pids, cpu_at_cut)]
        moved, lost_in_cut = [], 0
        for sv in svs:  # training went on, uninterrupted
            self.assertEqual(events(sv.text(), "stopping"), [], sv.tail())
            self.assertEqual(events(sv.text(), "attempt_ended"), [], sv.tail())
            lost_in_cut += len(events(sv.text(), "group_lease_lost"))
            # The watch found its member silent and moved on to a live one.
            again = [e for e in timed_events(sv.text(), "group_reconnected") if stamp(e) > cut_wall]
            self.assertTrue(again, f"the watch stayed on the cut-off member: {sv.tail()}")
            moved.append(stamp(again[0]) - cut_wall)
        # They computed all along (a stopped or frozen trainer uses none); how much depends on
        # what else the machine runs: beside a load check's stress-ng, 0.7 s in 16.
        for used in trained:
            self.assertGreater(used, 0.2, f"the trainers computed during the cut: {trained} s of CPU")
        self.hosts.reconnect(old.host)
        back_at = time.monotonic()
        self.leader(self.members)  # the old leader back in the cluster, which agrees on one
        whole = time.monotonic() - back_at

        lost, cut_off = 0, 0
        for r, sv in enumerate(svs):
            self.assert_exit(sv, 0, 60)
            self.assertEqual(events(sv.text(), "stopping"), [], sv.tail())
            self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / f"node{r}" / "state")], ["done"])
            # A lease lost (keepalives unanswered for lease_ttl: see the module's docstring)
            # stops no trainer that computes.
            lost += len(events(sv.text(), "group_lease_lost"))
            cut_off += len([e for e in events(sv.text(), "group_cut_off") if e["trainer"] == "progressing"])
        print(f"\n[etcd-faults] leader {old.name} cut off -> {new.name} seen as leader by the other two "
              f"{elected:.2f}s later; the watches on live members {moved[0]:.1f}s, {moved[1]:.1f}s later; trainers "
              f"computed {trained[0]:.1f}s, {trained[1]:.1f}s of CPU in the {self.CUT_FOR:.0f}s cut; reconnected -> "
              f"one leader for all three {whole:.2f}s later; leases lost {lost} ({lost_in_cut} in the cut), "
              f"group_cut_off trainer=progressing {cut_off}", flush=True)

if __name__ == "__main__":
    unittest.main()
