"""End-to-end: a multi-node job through etcd (issue 14). A real etcd (Debian's etcd-server)
on loopback ports, two "nodes" as two spotvisors with their own state dirs and one shared
checkpoint dir (shared storage), each supervising plain torchrun with one worker:
`--nnodes={nnodes} --node_rank={node_rank} --master_addr={master_addr} --master_port={master_port}`,
DDP over gloo: the real example trainer of the other e2e tests.

  GroupNotice  (a) a notice on the node of rank 0 (the mock AWS service): the other node's
               trainer gets its stop within 1 s of the first's; the checkpoint is written;
               rank 0's spotvisor drains and exits 75 when its machine goes (SIGTERM); the
               survivor counts nothing and waits; a replacement started later with the same
               job file (`node_rank: auto`) takes rank 0; the group resumes in epoch 2 from
               the agreed checkpoint; the final weights equal an uninterrupted torchrun
               run's (the same world of 2 ranks), bit for bit; both spotvisors exit 0.
  Spares       (a') `coordination.spares: 1`, three spotvisors for two ranks: the third waits
               as a spare; a notice on rank 0's node: once drained it gives the rank up, the
               spare takes it at once, selects again and the group trains again within 5 s,
               with no replacement; exact as above.
  GroupExitZero (b) the same with workers that exit 0 after a stop (tests/e2e/dist_worker.py):
               the preempted node drains, the other records peer-stopped; neither is done.
  LeaseLapse   (d) a SIGKILLed spotvisor: the other stops within lease_ttl + ~1 s, waits,
               and both start epoch 2 when it is back.
  NodeLocalCheckpoints (e) node-local dirs where one node lacks the newest step: the group
               agrees on the previous one.
  OneCrash     (c) one rank's trainer crashes: one group restart; the failure counts once for
               the job (`failures` in etcd; state.json on every node says 1).
  EtcdFaults   (f) three etcd members: one killed mid-run stops nothing; all gone, trainers
               that compute go on (`group_cut_off trainer=progressing`), `group_trouble` logged.
  Fencing      (h) node 0 reaches etcd only through a member that dies: cut off, its trainer
               (blocked: no CPU) stops within lease_ttl + the 2 s sample; node 1 stops when
               node 0's lease lapses; the member back, both start epoch 2.
  TwoJobs      (g) two jobs on one etcd: a stop in one never reaches the other; `spotvisor
               status` shows ranks, epoch and the stop.
(c) to (g) run a shell that sleeps as the trainer: the group's mechanics without torch.
Across hosts (a network namespace each; a node cut off from etcd and its peers at once):
tests/e2e/test_multinode_netns.py.

Run: SPOTVISOR_BINARY=build/spotvisor /usr/bin/python3 -m unittest -v tests.e2e.test_multinode
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
from datetime import datetime
from pathlib import Path
from typing import List, Optional, Sequence

from tests.e2e.support import (DIST_WORKER, EXAMPLE_ARGS, PYTHON, TORCH_TRAINER, TORCHRUN, E2ECase, NeedsTorchrun,
                               deadline, events, free_port, read_attempts, reference_digest, write_job)

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


class Etcd:
    """One etcd member on loopback, its data in `workdir`; killed by pid at the end."""

    def __init__(self, workdir: Path, name: str = "m0", peer: int = 0, cluster: str = "",
                 scheme: str = "http", extra: Sequence[str] = (), client_port: int = 0) -> None:
        """`scheme` https wants the TLS flags in `extra` (--cert-file, --key-file, ...);
        `client_port` and `peer` again, with the same `workdir` and `name`: a member restarted."""
        self.client_port, peer = client_port or free_port(), peer or free_port()
        self.peer_port, self.workdir, self.name, self.cluster_spec = peer, workdir, name, cluster
        self.url = f"{scheme}://127.0.0.1:{self.client_port}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.log = workdir / f"etcd-{name}.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [ETCD, "--name", name, "--data-dir", str(workdir / f"etcd-{name}"), "--listen-client-urls", self.url,
                 "--advertise-client-urls", self.url, "--listen-peer-urls", peer_url,
                 "--initial-advertise-peer-urls", peer_url, "--initial-cluster", cluster or f"{name}={peer_url}",
                 "--initial-cluster-token", workdir.name, "--pre-vote", *extra],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        end = deadline(30)
        while time.monotonic() < end:
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"etcd did not listen on {self.url}: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restarted(self) -> "Etcd":
        """The same member (data dir, ports) started again after stop()."""
        return Etcd(self.workdir, self.name, self.peer_port, self.cluster_spec, client_port=self.client_port)

    @staticmethod
    def cluster(workdir: Path, count: int) -> List["Etcd"]:
        peers = [free_port() for _ in range(count)]
        spec = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
        return [Etcd(workdir, f"m{i}", p, spec) for i, p in enumerate(peers)]


# A trainer that computes (0.1 s of CPU time, then a 0.3 s sleep: a quarter of a CPU when idle,
# still an eighth on a machine four times oversubscribed, where a busy loop timed by the wall
# clock got under 5 %) until SIGTERM: a node cut off from etcd finds it progressing and lets
# it run. [*COMPUTING, "30"]: for 30 s, then it exits 0.
COMPUTING = ["/usr/bin/python3", "-c",
             "import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
             "end = time.monotonic() + float(sys.argv[1]) if len(sys.argv) > 1 else float('inf')\n"
             "while time.monotonic() < end:\n"
             "    t = time.process_time()\n"
             "    while time.process_time() - t < 0.1: pass\n"
             "    time.sleep(0.3)\n"]


def etcd_missing_reason() -> Optional[str]:
    if not os.path.exists(ETCD):
        return "etcd is not installed (Debian: etcd-server; scripts/setup.sh installs it)"
    return None


def stamp(event: dict) -> float:
    """The log line's own time (the text format starts with an ISO-8601 UTC time)."""
    return datetime.strptime(event["_time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def timed_events(text: str, name: str) -> List[dict]:
    out = []
    for line in text.splitlines():
        if f"event={name} " not in line + " ":
            continue
        found = events(line, name)
        if found:
            e = dict(found[0])
            e["_time"] = line.split()[0]
            out.append(e)
    return out


class GroupCase(NeedsTorchrun, E2ECase):
    """NODES nodes on one machine: node dirs n0/, n1/..., the checkpoints shared."""

    NODES = 2

    def setUp(self) -> None:
        super().setUp()
        reason = etcd_missing_reason()
        if reason:
            self.skipTest(reason)
        self.etcd = Etcd(self.dir)
        self.addCleanup(self.etcd.stop)
        self.master_port = free_port()
        (self.dir / "shared-ckpt").mkdir()

    def etcd_urls(self) -> List[str]:
        return [self.etcd.url]

    def coordination(self, node_rank, **more: str) -> str:
        """The job file's coordination section; `more` adds keys (master_port: "29500")."""
        return "\n".join([
            "coordination:", f"  etcd: {json.dumps(self.etcd_urls())}", f"  nodes: {self.NODES}",
            f"  node_rank: {node_rank}",
            "  prefix: /spotvisor-e2e", "  lease_ttl: 3s", "  join_timeout: 5m", "  advertise: 127.0.0.1",
            *(f"  {k}: {v}" for k, v in more.items())]) + "\n"

    def node_job(self, node: str, *, name: str, node_rank: str, script: List[str], spares: int = 0,
                 coordination: Optional[dict] = None, torchrun: bool = True, **kw) -> Path:
        """Node `node`'s job: plain multi-node torchrun ({nnodes} nodes), one worker running
        `script`, the checkpoints in the shared dir; `spares`: coordination.spares;
        `coordination`: more keys of that section; `torchrun` False: `script` run by the
        trainers' python, on its own (no peers to wait for)."""
        workdir = self.dir / node
        workdir.mkdir(exist_ok=True)
        ckpt = workdir / "ckpt"
        if not ckpt.exists():
            ckpt.symlink_to(self.dir / "shared-ckpt")
        command = [TORCHRUN[0], "--nnodes={nnodes}", "--nproc_per_node=1", "--node_rank={node_rank}",
                   "--master_addr={master_addr}", "--master_port={master_port}", "--redirects", "1", "--tee", "1",
                   "--monitor_interval", "0.5", *script] if torchrun else [PYTHON, *script]
        return write_job(workdir / "job.yaml", name=name, command=command, pattern="ckpt_step{step}",
                         extra=self.coordination(node_rank, master_port=str(self.master_port),
                                                 **({"spares": str(spares)} if spares else {}),
                                                 **(coordination or {})), **kw)


class GroupNotice(GroupCase):
    def test_a_notice_on_rank_0_stops_the_group_which_resumes_together_when_a_replacement_joins(self):
        digest = reference_digest("torchrun")
        mock = self.mock("aws")
        trainer = [str(TORCH_TRAINER), "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
                   *EXAMPLE_ARGS, "--step-sleep", "0.15"]
        resume = ["--resume_from={checkpoint}"]
        job0 = self.node_job("n0", name="llm", node_rank="auto", script=trainer, resume_args=resume, provider="aws",
                             endpoint=mock.url, grace="60s")
        job1 = self.node_job("n1", name="llm", node_rank="1", script=trainer, resume_args=resume, grace="60s")
        sv0 = self.supervise(job0, "n0-run1")
        self.assertEqual(sv0.wait_event("group_joined", 60)["rank"], "0")
        sv1 = self.supervise(job1, "n1")
        for sv in (sv0, sv1):
            agreed = sv.wait_event("group_agreed", 60)
            self.assertEqual((agreed["epoch"], agreed["step"], agreed["master_addr"]), ("1", "none", "127.0.0.1"))
        sv0.wait_for(r"\[trainer\] saved step=10 reason=periodic", 240)
        sv0.wait_for(r"(?:^|:)step=1[3-9] ", 60)
        mock.preempt()

        stop0 = sv0.wait_event("stopping", 30)
        stop1 = sv1.wait_event("stopping", 30)
        self.assertEqual(stop0["reason"], "notice", stop0)
        self.assertEqual(stop1["reason"], "peer", stop1)
        self.assertIn("node 0: notice", stop1["detail"])
        t0 = stamp(timed_events(sv0.text(), "stopping")[0])
        t1 = stamp(timed_events(sv1.text(), "stopping")[0])
        self.assertLess(t1 - t0, 1.0, "the peer's trainer must get its stop within 1 s of the first node's")

        saved = sv0.wait_for(r"\[trainer\] saved step=(\d+) reason=stop path=(\S+)", 120)
        step, path = int(saved.group(1)), saved.group(2)
        drained = sv0.wait_event("drained", 120, lambda e: "newest_good" in e)
        self.assertEqual((drained["newest_good"], drained["step"]), (path, str(step)), drained)
        sv0.signal(signal.SIGTERM)  # the machine goes away
        self.assert_exit(sv0, 75, 90)

        # The survivor: its attempt ended as peer-stopped, nothing counted, waiting.
        ended = sv1.wait_event("attempt_ended", 120)
        self.assertEqual(ended["outcome"], "peer-stopped", ended)
        end = deadline(60)
        while len(events(sv1.text(), "group_waiting")) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        self.assertEqual(len(events(sv1.text(), "group_waiting")), 2, "the survivor waits for the group again")
        self.assertEqual(events(sv1.text(), "exit"), [], "the survivor must not exit for a peer's stop")

        time.sleep(3)  # the replacement VM boots
        mock.clear()
        sv0b = self.supervise(job0, "n0-run2")
        self.assertEqual(sv0b.wait_event("group_joined", 60)["rank"], "0")
        for sv in (sv0b, sv1):
            agreed = sv.wait_event("group_agreed", 120, lambda e: e["epoch"] == "2")
            self.assertEqual(agreed["step"], str(step), agreed)
        self.assert_exit(sv0b, 0, 400)
        self.assert_exit(sv1, 0, 120)
        self.assertEqual(self.result_of(self.dir / "n0"), digest,
                         "the group's resumed run differs from an uninterrupted torchrun run")
        self.assertRegex(sv0b.text(), rf"\[trainer\] resumed from=\S*ckpt_step{step} step={step}")
        outcomes = [a.get("outcome") for a in read_attempts(self.dir / "n1" / "state")]
        self.assertEqual(outcomes, ["peer-stopped", "done"], outcomes)
        state1 = json.loads((self.dir / "n1" / "state" / "state.json").read_text())
        self.assertEqual((state1.get("failures"), state1.get("consecutive_failures")), (0, 0), state1)


class Spares(GroupCase):
    """coordination.spares: three spotvisors for a group of two; a notice on rank 0's node."""

    def test_a_spare_takes_the_preempted_rank_and_the_group_trains_again_within_5_s(self):
        digest = reference_digest("torchrun")
        mock = self.mock("aws")
        trainer = [str(TORCH_TRAINER), "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
                   *EXAMPLE_ARGS, "--step-sleep", "0.15"]
        resume = ["--resume_from={checkpoint}"]
        common = dict(name="spares", node_rank="auto", script=trainer, resume_args=resume, grace="60s", spares=1)
        job0 = self.node_job("n0", provider="aws", endpoint=mock.url, **common)
        job1 = self.node_job("n1", **common)
        job2 = self.node_job("n2", **common)
        sv0 = self.supervise(job0, "n0")
        self.assertEqual(sv0.wait_event("group_joined", 60)["rank"], "0")
        sv1 = self.supervise(job1, "n1")
        self.assertEqual(sv1.wait_event("group_joined", 60)["rank"], "1")
        for sv in (sv0, sv1):
            self.assertEqual(sv.wait_event("group_agreed", 60)["epoch"], "1")
        # The third: every rank is held, it validates the checkpoints and waits, no trainer.
        sv2 = self.supervise(job2, "n2")
        waiting = sv2.wait_event("spare_waiting", 60)
        self.assertEqual((waiting["nodes"], waiting["spares"]), ("2", "1"), waiting)
        status = json.loads(subprocess.run([self.binary, "status", "--config", str(job2), "--json"],
                                           capture_output=True, text=True, timeout=60).stdout)
        self.assertEqual([(m["rank"]) for m in status["members"]], [0, 1], status)
        self.assertEqual(len(status["spares"]), 1, status)
        state = self.dir / "n2" / "state" / "state.json"
        end = deadline(30)
        while not (state.exists() and json.loads(state.read_text()).get("phase") == "spare"):
            self.assertLess(time.monotonic(), end, f"state.json never said spare: {sv2.tail()}")
            time.sleep(0.1)

        sv0.wait_for(r"\[trainer\] saved step=10 reason=periodic", 240)
        sv0.wait_for(r"(?:^|:)step=1[3-9] ", 60)
        mock.preempt()
        saved = sv0.wait_for(r"\[trainer\] saved step=(\d+) reason=stop path=(\S+)", 120)
        step = int(saved.group(1))
        released = sv0.wait_event("group_rank_released", 120)
        self.assertEqual(released["rank"], "0")
        took = sv2.wait_event("group_joined", 60)
        self.assertEqual((took["rank"], took.get("from")), ("0", "spare"), took)
        for sv in (sv1, sv2):
            agreed = sv.wait_event("group_agreed", 120, lambda e: e["epoch"] == "2")
            self.assertEqual(agreed["step"], str(step), agreed)
        # Each starts its trainer a moment after it logs the agreement: wait for those lines
        # (rank 1's second attempt, the spare's first), not only for the agreement.
        sv1.wait_event("trainer_started", 60, lambda e: e["attempt"] == "2")
        sv2.wait_event("trainer_started", 60)
        starts = [timed_events(sv.text(), "trainer_started")[-1] for sv in (sv1, sv2)]
        self.assertEqual([s["attempt"] for s in starts], ["2", "1"], starts)
        t_released = stamp(timed_events(sv0.text(), "group_rank_released")[0])
        t_notice = stamp(timed_events(sv0.text(), "stopping")[0])
        again = max(stamp(s) for s in starts) - t_released
        print(f"\n[spares] notice -> rank 0 given up {t_released - t_notice:.2f}s (the save and the drain); "
              f"given up -> both trainers started again {again:.2f}s", flush=True)
        self.assertLessEqual(again, 5.0, "the group waited for more than the spare")

        sv0.signal(signal.SIGTERM)  # the preempted machine goes away; no replacement comes
        self.assert_exit(sv0, 75, 90)
        self.assert_exit(sv2, 0, 400)
        self.assert_exit(sv1, 0, 120)
        self.assertEqual(self.result_of(self.dir / "n2"), digest,
                         "the group resumed with the spare differs from an uninterrupted torchrun run")
        self.assertRegex(sv2.text(), rf"\[trainer\] resumed from=\S*ckpt_step{step} step={step}")
        self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / "n1" / "state")],
                         ["peer-stopped", "done"])
        # The spare's wait is the group's (goodput `waiting`), not idle time.
        report = json.loads((self.dir / "n2" / "state" / "report.json").read_text())
        waited = stamp(starts[1]) - stamp(timed_events(sv2.text(), "spare_waiting")[0])
        self.assertGreaterEqual(report["attempts"][0]["waited_for_group_s"], waited - 0.5, report["attempts"])
        self.assertGreaterEqual(report["goodput"]["buckets"]["waiting_s"], waited - 0.5, report["goodput"])


class GroupExitZero(GroupCase):
    """(b) trainers that exit 0 after a stop (python/README.md's advice): tests/e2e/dist_worker.py
    under the same two-node torchrun."""

    def worker_job(self, node: str, node_rank: str, **kw) -> Path:
        script = [str(DIST_WORKER), "--ckpt-dir", "{checkpoint_dir}", "--pid-dir", str(self.dir / "pids"),
                  "--stop-exit", "0"]
        return self.node_job(node, name="exit0", node_rank=node_rank, script=script, resume_args=[],
                             result_file=None, **kw)

    def test_b_trainers_that_exit_0_after_a_peers_stop_are_neither_done_nor_failed(self):
        mock = self.mock("aws")
        sv0 = self.supervise(self.worker_job("n0", "0", provider="aws", endpoint=mock.url), "n0")
        sv1 = self.supervise(self.worker_job("n1", "1"), "n1")
        for sv in (sv0, sv1):
            sv.wait_for(r"\[worker\] start step=0 ", 120)
        mock.preempt()
        self.assertEqual(sv1.wait_event("stopping", 30)["reason"], "peer")
        ended0 = sv0.wait_event("attempt_ended", 120)
        ended1 = sv1.wait_event("attempt_ended", 120)
        # The workers saved and exited 0; torchrun itself ends with 1 (spotvisor's SIGTERM
        # after its workers are gone): neither code decides, the stop does.
        sv0.wait_for(r"\[worker\] stopping step=\d+ exit=0 rank=0", 10)
        sv1.wait_for(r"\[worker\] stopping step=\d+ exit=0 rank=1", 10)
        self.assertEqual(ended0["outcome"], "preempted", ended0)
        self.assertEqual(ended1["outcome"], "peer-stopped", ended1)
        sv1.wait_event("group_waiting", 30, lambda e: e["good_steps"] != "0")
        time.sleep(1)
        self.assertEqual(events(sv1.text(), "exit"), [], "exit 0 after a peer's stop is not done")
        for sv in (sv0, sv1):
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 60)
        state1 = json.loads((self.dir / "n1" / "state" / "state.json").read_text())
        self.assertEqual(state1.get("failures"), 0, state1)


class SleeperCase(GroupCase):
    """Nodes whose trainer is a shell that sleeps until SIGTERM (exit 0): the group's
    mechanics without a model."""
    needs_torch = False

    def sleeper_job(self, node: str, name: str, rank, **kw) -> Path:
        workdir = self.dir / name / node
        workdir.mkdir(parents=True, exist_ok=True)
        trainer = kw.pop("trainer", ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"])
        return write_job(workdir / "job.yaml", name=name, command=trainer, resume_args=kw.pop("resume_args", []),
                         pattern="ckpt_step{step}", result_file=None,
                         extra=self.coordination(rank) + kw.pop("hooks", ""), **kw)


class OneCrash(SleeperCase):
    def test_c_one_rank_crashes_one_group_restart_the_job_wide_budget_used_once(self):
        crash_once = ["/bin/sh", "-c", "if [ ! -e crashed ]; then touch crashed; sleep 1; exit 3; fi; "
                      "trap 'exit 0' TERM; sleep 600 & wait"]
        job1 = self.sleeper_job("n1", "job", 1, trainer=crash_once)
        sv0 = self.supervise(self.sleeper_job("n0", "job", 0), "n0")
        sv1 = self.supervise(job1, "n1")
        ended1 = sv1.wait_event("attempt_ended", 60)
        self.assertEqual((ended1["outcome"], ended1["status"]), ("failed", "exit code 3"), ended1)
        stop0 = sv0.wait_event("stopping", 15)
        self.assertEqual(stop0["reason"], "peer", stop0)
        self.assertIn("trainer failed: exit code 3", stop0["detail"])
        for sv in (sv0, sv1):
            self.assertEqual(sv.wait_event("group_agreed", 60, lambda e: e["epoch"] == "2")["epoch"], "2")
            sv.wait_event("trainer_started", 30, lambda e: e["attempt"] == "2")
        for sv in (sv0, sv1):
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 30)
        # One crash, counted once for the job: on every node, not once per node.
        for node in ("n0", "n1"):
            state = json.loads((self.dir / "job" / node / "state" / "state.json").read_text())
            self.assertEqual(state.get("failures"), 1, (node, state))
        attempts0 = read_attempts(self.dir / "job" / "n0" / "state")
        self.assertEqual([a.get("outcome") for a in attempts0], ["peer-stopped", "stopped"])
        # The ledger (and so the report) names the node that stopped the group, and why.
        self.assertEqual(attempts0[0].get("stopped_by"), "node 1: trainer failed: exit code 3", attempts0)
        self.assertIsNone(attempts0[1].get("stopped_by"), attempts0)
        status = json.loads(subprocess.run([self.binary, "status", "--config", str(job1), "--json"],
                                           capture_output=True, text=True, timeout=60).stdout)
        self.assertEqual((status["failures"], status["epoch"]), (1, 2), status)


class ThreeMembers(SleeperCase):
    """Sleeper cases on an etcd of three members (`self.members`), every one in the job files."""

    def setUp(self) -> None:
        E2ECase.setUp(self)
        reason = etcd_missing_reason()
        if reason:
            self.skipTest(reason)
        self.members = Etcd.cluster(self.dir, 3)
        for m in self.members:
            self.addCleanup(m.stop)
        self.etcd = self.members[0]

    def etcd_urls(self) -> List[str]:
        return [m.url for m in self.members]


class EtcdFaults(ThreeMembers):
    """(f) three etcd members: one killed mid-run changes nothing; all of them gone, the
    trainers train on and the trouble is logged."""

    def test_f_a_lost_member_stops_nothing_and_no_etcd_at_all_stops_no_training(self):
        # Trainers that compute: cut off from etcd, each node's sample shows progress, so
        # neither is fenced off.
        jobs = [self.sleeper_job(f"n{r}", "job", r, trainer=COMPUTING) for r in (0, 1)]
        sv = [self.supervise(job, f"n{r}") for r, job in enumerate(jobs)]
        for s in sv:
            self.assertEqual(s.wait_event("group_agreed", 60)["epoch"], "1")
            s.wait_event("trainer_started", 30)
        self.members[0].stop()
        time.sleep(5)  # longer than lease_ttl: the leases live on through the other members
        for m in self.members[1:]:
            m.stop()
        time.sleep(5)
        for s in sv:
            self.assertEqual(events(s.text(), "stopping"), [], s.text())
            self.assertEqual(events(s.text(), "exit"), [], s.text())
            self.assertGreater(len(events(s.text(), "group_trouble")), 0, s.text())
            self.assertEqual([e["trainer"] for e in events(s.text(), "group_cut_off")], ["progressing"], s.text())
            self.assertIsNone(s.proc.poll())
        for s in sv:
            s.signal(signal.SIGTERM)
            self.assert_exit(s, 75, 30)


class Fencing(ThreeMembers):
    """(h) one node cut off from etcd while the others are not: its blocked trainer stops,
    since its rank can be taken; the group starts again when it is back."""

    def only(self, job: Path, urls: List[str]) -> Path:
        text = job.read_text()
        line = f"  etcd: {json.dumps(self.etcd_urls())}"
        self.assertIn(line, text)
        job.write_text(text.replace(line, f"  etcd: {json.dumps(urls)}"))
        return job

    def test_h_a_cut_off_node_stops_its_blocked_trainer_and_the_group_starts_again_when_it_is_back(self):
        sv0 = self.supervise(self.only(self.sleeper_job("n0", "job", 0), [self.members[0].url]), "n0")
        # Node 1's trainer computes: killing member 0 may cost the cluster an election long
        # enough for node 1's keeper to give up too (seen on a loaded machine); a computing
        # trainer is not fenced then, a blocked one would be, rightly.
        sv1 = self.supervise(self.only(self.sleeper_job("n1", "job", 1, trainer=COMPUTING),
                                       [m.url for m in self.members[1:]]), "n1")
        for sv in (sv0, sv1):
            self.assertEqual(sv.wait_event("group_agreed", 60)["epoch"], "1")
            sv.wait_event("trainer_started", 30)
        cut_at = time.time()
        self.members[0].stop()  # node 0's only way to etcd; the cluster keeps its quorum
        lost = sv0.wait_event("group_lease_lost", 20)
        self.assertEqual(lost["rank"], "0", lost)
        stop0 = sv0.wait_event("stopping", 15)
        self.assertEqual(stop0["reason"], "peer", stop0)
        self.assertIn("this node is cut off from the group (its lease lapsed) and its trainer shows no progress",
                      stop0["detail"])
        took = stamp(timed_events(sv0.text(), "stopping")[0]) - cut_at
        self.assertLess(took, 3 + 2 + 2.5, "lease_ttl, the 2 s sample, and room for a loaded machine")
        self.assertEqual(sv0.wait_event("attempt_ended", 15)["outcome"], "peer-stopped")
        stop1 = sv1.wait_event("stopping", 15)
        self.assertIn("node 0: left the group", stop1["detail"])
        self.assertEqual(sv1.wait_event("attempt_ended", 15)["outcome"], "peer-stopped")

        back = self.members[0].restarted()
        self.addCleanup(back.stop)
        for sv, rank in ((sv0, "0"), (sv1, "1")):
            agreed = sv.wait_event("group_agreed", 60, lambda e: e["epoch"] == "2")
            self.assertEqual(agreed["rank"], rank, agreed)
            sv.wait_event("trainer_started", 30, lambda e: e["attempt"] == "2")
        for sv in (sv0, sv1):
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 30)
        for n in ("n0", "n1"):
            state = json.loads((self.dir / "job" / n / "state" / "state.json").read_text())
            self.assertEqual(state.get("failures"), 0, state)


class GroupDone(SleeperCase):
    def test_every_trainer_succeeds_every_node_exits_0_and_hooks_see_the_group(self):
        # A hook sees the group's place of the newest start, as templates and environment.
        hooks = ("hooks:\n  on_finish: {command: [/bin/sh, -c, 'echo \"$0 $SPOTVISOR_NODE_RANK\" > finish-hook.txt', "
                 "'{node_rank} {nnodes} {epoch} {master_addr} {master_port}'], timeout: 10s}\n")
        finish = ["/bin/sh", "-c", "sleep 1; exit 0"]
        svs = [self.supervise(self.sleeper_job(f"n{r}", "job", r, trainer=finish, hooks=hooks), f"n{r}")
               for r in (0, 1)]
        for sv in svs:
            self.assert_exit(sv, 0, 60)
            self.assertEqual(events(sv.text(), "stopping"), [], sv.text())
        for rank in (0, 1):
            self.assertEqual((self.dir / "job" / f"n{rank}" / "finish-hook.txt").read_text(),
                             f"{rank} 2 1 127.0.0.1 29500 {rank}\n")
            self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / "job" / f"n{rank}" / "state")],
                             ["done"])
        # Goodput buckets (issue 24): node 0, started first, waited for node 1 to join; on
        # every node the buckets add up to the billed time.
        for rank in (0, 1):
            goodput = json.loads((self.dir / "job" / f"n{rank}" / "state" / "report.json").read_text())["goodput"]
            self.assertAlmostEqual(sum(goodput["buckets"].values()), goodput["billed_s"], delta=0.01, msg=goodput)
            if rank == 0:
                self.assertGreater(goodput["buckets"]["waiting_s"], 0, goodput)
        # Per attempt, the group it ran in and the node-seconds waited for it (issue 23).
        for rank in (0, 1):
            state = self.dir / "job" / f"n{rank}" / "state"
            attempts = json.loads((state / "report.json").read_text())["attempts"]
            self.assertEqual([(a["epoch"], a["nodes"]) for a in attempts], [(1, 2)], attempts)
            waited = attempts[0]["waited_for_group_s"]
            if rank == 0:
                # The wait before the start, a part of the goodput's waiting (which also has
                # the wait after this node's trainer finished, for node 1's).
                goodput = json.loads((state / "report.json").read_text())["goodput"]
                self.assertGreater(waited, 0, attempts)
                self.assertLessEqual(waited, goodput["buckets"]["waiting_s"] + 0.001, msg=attempts)
            markdown = subprocess.run([self.binary, "report", str(state)], capture_output=True, text=True, timeout=60)
            self.assertIn(f"| epoch 1, 2 nodes, waited {waited:g} s for the group |", markdown.stdout)
        # The group on one page (report --html --node): a section per node, each node's
        # attempts drawn; --node without --html is a usage error.
        states = [self.dir / "job" / f"n{rank}" / "state" for rank in (0, 1)]
        page = self.dir / "group.html"
        out = subprocess.run([self.binary, "report", str(states[0]), "--html", str(page), "--node", str(states[1])],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        html = page.read_text()
        self.assertEqual(html.count('<section class="run"'), 2, html[:2000])
        self.assertEqual(html.count('class="attempt-bar"'), 2, html[:2000])
        self.assertIn('data-run="node-1"', html)
        usage = subprocess.run([self.binary, "report", str(states[0]), "--node", str(states[1])],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(usage.returncode, 64, usage.stderr)
        self.assertIn("--node needs --html", usage.stderr)


    def test_a_peer_that_fails_after_this_node_finished_brings_it_back(self):
        # Node 0's trainer finishes at once; node 1's fails after that, once. Node 0 must not
        # have said "done": it waits, rejoins, and both finish the next epoch together.
        finish = ["/bin/sh", "-c", "sleep 1; exit 0"]
        late_crash = ["/bin/sh", "-c", "if [ ! -e crashed ]; then touch crashed; sleep 4; exit 3; fi; sleep 1; exit 0"]
        sv0 = self.supervise(self.sleeper_job("n0", "job", 0, trainer=finish), "n0")
        sv1 = self.supervise(self.sleeper_job("n1", "job", 1, trainer=late_crash), "n1")
        sv0.wait_event("group_finishing", 30)
        self.assertIn("node 1: trainer failed: exit code 3", sv0.wait_event("group_not_finished", 30)["detail"])
        for sv in (sv0, sv1):
            self.assertEqual(sv.wait_event("group_agreed", 60, lambda e: e["epoch"] == "2")["epoch"], "2")
        for sv in (sv0, sv1):
            self.assert_exit(sv, 0, 60)
        self.assertEqual(len(events(sv0.text(), "group_finished")), 1, sv0.text())
        self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / "job" / "n0" / "state")], ["done", "done"])
        self.assertEqual([a.get("outcome") for a in read_attempts(self.dir / "job" / "n1" / "state")],
                         ["failed", "done"])


class TwoJobs(SleeperCase):
    def test_g_two_jobs_on_one_etcd_never_see_each_other(self):
        a0, a1 = (self.supervise(self.sleeper_job(f"n{r}", "job-a", r), f"a{r}") for r in (0, 1))
        b0, b1 = (self.supervise(self.sleeper_job(f"n{r}", "job-b", r), f"b{r}") for r in (0, 1))
        for sv in (a0, a1, b0, b1):
            self.assertEqual(sv.wait_event("group_agreed", 60)["epoch"], "1")
            sv.wait_event("trainer_started", 30)
        status = subprocess.run([self.binary, "status", "--config", str(self.dir / "job-a" / "n1" / "job.yaml"),
                                 "--json"], capture_output=True, text=True, timeout=60)
        self.assertEqual(status.returncode, 0, status.stderr)
        group = json.loads(status.stdout)
        self.assertEqual(([m["rank"] for m in group["members"]], group["epoch"], group["stops"]), ([0, 1], 1, []))
        a0.signal(signal.SIGTERM)  # one node of job a stops: its peer stops too
        self.assert_exit(a0, 75, 30)
        self.assertEqual(a1.wait_event("stopping", 10)["reason"], "peer")
        time.sleep(2)
        for sv in (b0, b1):
            self.assertEqual(events(sv.text(), "stopping"), [], sv.text())
            self.assertEqual(events(sv.text(), "peer_stop"), [], sv.text())
        status = subprocess.run([self.binary, "status", "--config", str(self.dir / "job-a" / "n1" / "job.yaml")],
                                capture_output=True, text=True, timeout=60)
        self.assertIn("epoch 1 stopped by rank 0: signal: SIGTERM to spotvisor", status.stdout)
        self.assertIn("rank 0  free", status.stdout)
        for sv in (a1, b0, b1):
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 30)


class LeaseLapse(SleeperCase):
    def test_d_a_sigkilled_spotvisor_stops_the_others_within_the_lease_and_they_resume_when_it_is_back(self):
        job0 = self.sleeper_job("n0", "job", 0)
        sv0 = self.supervise(job0, "n0-run1")
        sv1 = self.supervise(self.sleeper_job("n1", "job", 1), "n1")
        for sv in (sv0, sv1):
            self.assertEqual(sv.wait_event("group_agreed", 60)["epoch"], "1")
            sv.wait_event("trainer_started", 30)
        killed_at = time.time()
        sv0.proc.kill()  # no notice, no goodbye: its lease lapses after lease_ttl (3 s)
        sv0.proc.wait(10)
        stop = sv1.wait_event("stopping", 15)
        self.assertEqual(stop["reason"], "peer", stop)
        self.assertIn("node 0: left the group", stop["detail"])
        took = stamp(timed_events(sv1.text(), "stopping")[0]) - killed_at
        self.assertLess(took, 3 + 1.5, "the others stop within lease_ttl + about a second")
        self.assertEqual(sv1.wait_event("attempt_ended", 15)["outcome"], "peer-stopped")
        sv0b = self.supervise(job0, "n0-run2")
        for sv in (sv0b, sv1):
            self.assertEqual(sv.wait_event("group_agreed", 60, lambda e: e["epoch"] == "2")["rank"],
                             "0" if sv is sv0b else "1")
            # sv0 was SIGKILLed right after it logged its start: the start was on disk already.
            self.assertEqual(sv.wait_event("trainer_started", 30, lambda e: e["attempt"] != "1")["attempt"], "2")
        for sv in (sv0b, sv1):
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 30)
        state1 = json.loads((self.dir / "job" / "n1" / "state" / "state.json").read_text())
        self.assertEqual(state1.get("failures"), 0, state1)


class NodeLocalCheckpoints(SleeperCase):
    def test_e_a_node_without_the_newest_step_makes_the_group_agree_on_the_previous_one(self):
        jobs = [self.sleeper_job(f"n{r}", "job", r, fmt="any", resume_args=["--from={checkpoint}"]) for r in (0, 1)]
        for r, steps in ((0, (10, 20)), (1, (10,))):  # node 1's copy of step 20 never arrived
            ckpt = self.dir / "job" / f"n{r}" / "ckpt"
            ckpt.mkdir(exist_ok=True)  # node-local: each node its own dir
            for step in steps:
                (ckpt / f"ckpt_step{step}").write_text(f"weights of step {step} on node {r}\n")
        sv = [self.supervise(job, f"n{r}") for r, job in enumerate(jobs)]
        for r in (0, 1):
            agreed = sv[r].wait_event("group_agreed", 60)
            self.assertEqual((agreed["epoch"], agreed["step"]), ("1", "10"), agreed)
            started = sv[r].wait_event("trainer_started", 30)
            self.assertEqual(started["resume"], str(self.dir / "job" / f"n{r}" / "ckpt" / "ckpt_step10"), started)
        for s in sv:
            s.signal(signal.SIGTERM)
            self.assert_exit(s, 75, 30)


if __name__ == "__main__":
    unittest.main()
