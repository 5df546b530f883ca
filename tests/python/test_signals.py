import datetime as dt
import json
import os
import signal
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

import harness  # noqa: F401
from spotvisor_helper import NoticeError, SignalFlags, parse_signal, read_notice


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class SignalFlagsTest(unittest.TestCase):
    def test_checkpoint_then_stop(self):
        with SignalFlags() as flags:
            self.assertFalse(flags.save_requested)
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(wait_until(lambda: flags.checkpoint_requested))
            self.assertFalse(flags.stop_requested)
            self.assertTrue(flags.save_requested)
            flags.clear_checkpoint()
            self.assertFalse(flags.checkpoint_requested)
            os.kill(os.getpid(), signal.SIGTERM)
            self.assertTrue(wait_until(lambda: flags.stop_requested))
            flags.clear_checkpoint()
            self.assertTrue(flags.stop_requested)          # a stop is never cleared
            self.assertEqual(flags.received, (signal.SIGUSR1, signal.SIGTERM))
            self.assertEqual(flags.agree(), (True, False))  # no torch.distributed: local flags

    def test_clear_keeps_a_checkpoint_signal_that_came_after_agree(self):
        with SignalFlags() as flags:
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(wait_until(lambda: flags.checkpoint_requested))
            self.assertEqual(flags.agree(), (False, True))
            os.kill(os.getpid(), signal.SIGUSR1)           # lands during the save
            self.assertTrue(wait_until(lambda: len(flags.received) == 2))
            flags.clear_checkpoint()
            self.assertTrue(flags.checkpoint_requested)    # asks for the next save
            self.assertEqual(flags.agree(), (False, True))
            flags.clear_checkpoint()
            self.assertFalse(flags.checkpoint_requested)

    def test_configured_signals_and_previous_handlers_restored(self):
        seen = []
        # Whatever SIGINT had: Python's default_int_handler, or SIG_IGN when the runner was
        # started in the background by a shell without job control (`cmd &`).
        sigint_before = signal.getsignal(signal.SIGINT)
        previous = signal.signal(signal.SIGUSR2, lambda s, f: seen.append(s))
        try:
            with SignalFlags(notice="INT", checkpoint="SIGUSR2") as flags:
                os.kill(os.getpid(), signal.SIGUSR2)
                self.assertTrue(wait_until(lambda: flags.checkpoint_requested))
                os.kill(os.getpid(), signal.SIGINT)
                self.assertTrue(wait_until(lambda: flags.stop_requested))
                self.assertEqual(seen, [])
            os.kill(os.getpid(), signal.SIGUSR2)       # the old handler is back
            self.assertTrue(wait_until(lambda: seen == [signal.SIGUSR2]))
        finally:
            signal.signal(signal.SIGUSR2, previous)
        self.assertIs(signal.getsignal(signal.SIGINT), sigint_before)

    def test_disabled_signal_is_not_touched(self):
        before = signal.getsignal(signal.SIGUSR1)
        with SignalFlags(checkpoint=None):
            self.assertIs(signal.getsignal(signal.SIGUSR1), before)

    def test_parse_signal(self):
        self.assertEqual(parse_signal("SIGTERM"), signal.SIGTERM)
        self.assertEqual(parse_signal("usr1"), signal.SIGUSR1)
        self.assertEqual(parse_signal("10"), 10)
        self.assertEqual(parse_signal(signal.SIGHUP), signal.SIGHUP)
        self.assertIsNone(parse_signal(None))
        with self.assertRaises(ValueError):
            parse_signal("SIGNOPE")
        with self.assertRaises(ValueError):
            SignalFlags(notice="TERM", checkpoint=15, install=False)


class NoticeFileTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.path = Path(self._tmp.name) / "notice.json"
        patcher = mock.patch.dict(os.environ, {"SPOTVISOR_NOTICE_FILE": str(self.path)})
        patcher.start()
        self.addCleanup(patcher.stop)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, doc):
        self.path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)

    def test_no_file_no_notice(self):
        self.assertIsNone(read_notice())
        flags = SignalFlags(install=False)
        self.assertIsNone(flags.notice())
        self.assertIsNone(flags.deadline())
        with mock.patch.dict(os.environ, {"SPOTVISOR_NOTICE_FILE": ""}):
            self.assertIsNone(read_notice())

    def test_aws_style_notice_with_deadline(self):
        self.write({"kind": "preemption", "provider": "aws", "deadline": "2030-01-02T03:04:05Z",
                    "action": "terminate", "detected_at": "2030-01-02T03:02:05Z"})
        flags = SignalFlags(install=False)
        notice = flags.notice()
        self.assertEqual((notice.kind, notice.provider, notice.action),
                         ("preemption", "aws", "terminate"))
        want = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
        self.assertEqual(flags.deadline(), want)
        self.assertEqual(notice.seconds_left(now=want - dt.timedelta(seconds=90)), 90.0)
        self.assertEqual(notice.raw["detected_at"], "2030-01-02T03:02:05Z")   # extra keys kept
        self.assertGreater(flags.seconds_left(), 0)

    def test_offsets_and_naive_times_are_utc(self):
        self.write({"kind": "preemption", "provider": "azure", "action": "Preempt",
                    "deadline": "2030-01-02T05:04:05+02:00"})
        self.assertEqual(read_notice().deadline,
                         dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc))
        self.write({"kind": "preemption", "provider": "gcp", "action": None,
                    "deadline": "2030-01-02T03:04:05"})
        self.assertEqual(read_notice().deadline.tzinfo, dt.timezone.utc)

    def test_unknown_deadline(self):
        self.write({"kind": "preemption", "provider": "gcp", "deadline": None, "action": "terminate"})
        notice = read_notice()
        self.assertIsNone(notice.deadline)
        self.assertIsNone(notice.seconds_left())

    def test_bad_notice_files_name_the_file(self):
        for doc, fragment in (("{not json", "not valid JSON"),
                              ("[1, 2]", "not a JSON object"),
                              ({"provider": "aws"}, "no 'kind'"),
                              ({"kind": "preemption", "deadline": "soon"}, "not an ISO-8601"),
                              ({"kind": "preemption", "deadline": 17}, "'deadline' must be"),
                              ({"kind": "preemption", "provider": 3}, "'provider' must be"),
                              ("x" * 70000, "larger than")):
            with self.subTest(fragment=fragment):
                self.write(doc)
                with self.assertRaises(NoticeError) as cm:
                    read_notice()
                self.assertIn(str(self.path), str(cm.exception))
                self.assertIn(fragment, str(cm.exception))

    def test_explicit_path_wins(self):
        other = Path(self._tmp.name) / "other.json"
        other.write_text(json.dumps({"kind": "maintenance", "provider": "file",
                                     "deadline": None, "action": "stop"}))
        self.assertEqual(SignalFlags(install=False, notice_file=other).notice().kind, "maintenance")


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(harness.HAS_TORCH, "torch is needed")
class AgreeUnderTorchDistributedTest(unittest.TestCase):
    """agree() returns what the all-reduce agreed, never the local flags read again."""

    def setUp(self):
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_gloo_available()):
            self.skipTest("torch.distributed with gloo is not available")
        self.dist = dist
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        dist.init_process_group("gloo", init_method=f"file://{tmp.name}/store", rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)

    def test_a_signal_handled_after_the_all_reduce_waits_for_the_next_boundary(self):
        # The race seen with torchrun and a cadence: one rank handled SIGUSR1 between the
        # all-reduce and the return, saved alone (all_gather_object) while its peer ran the
        # next step's backward, and both hung.
        real = self.dist.all_reduce
        signalled = []

        def all_reduce_then_signal(*args, **kwargs):
            result = real(*args, **kwargs)
            if not signalled:
                signalled.append(True)
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.05)                           # the handler runs in here
            return result

        with SignalFlags() as flags, mock.patch.object(self.dist, "all_reduce", all_reduce_then_signal):
            self.assertEqual(flags.agree(), (False, False))
            self.assertTrue(flags.checkpoint_requested)    # kept for the next boundary
            self.assertEqual(flags.agree(), (False, True))
            flags.clear_checkpoint()
            self.assertFalse(flags.checkpoint_requested)

    def peer_has_the_request(self):
        """An all-reduce that answers as a peer that brought a checkpoint request would, with
        this rank's own copy of the request landing late, while it runs."""
        real = self.dist.all_reduce

        def all_reduce(flags_tensor, *args, **kwargs):
            result = real(flags_tensor, *args, **kwargs)
            flags_tensor[1] = 1                            # the peer's flag
            os.kill(os.getpid(), signal.SIGUSR1)           # this rank's copy, late
            time.sleep(0.05)                               # the handler runs in here
            return result
        return all_reduce

    def test_this_ranks_copy_of_a_request_its_peer_brought_is_answered_by_the_same_save(self):
        # Seen under load with torchrun (e2e.TorchrunSignals, rebalance): spotvisor signals each
        # worker once per request, but the copies land at different moments. Rank 0 handled its
        # SIGUSR1 before the all-reduce; rank 1's landed after its agree() had read the flags,
        # while the all-reduce (already "checkpoint", from rank 0) ran. Rank 1 saved with rank 0
        # and then took its own copy for a new request: a second save at the next boundary, two
        # saves for one request. The peer here is the all-reduce answering "checkpoint".
        with SignalFlags() as flags:
            with mock.patch.object(self.dist, "all_reduce", self.peer_has_the_request()):
                self.assertEqual(flags.agree(), (False, True))
            self.assertEqual(len(flags.received), 1)
            flags.clear_checkpoint()                       # the save both ranks took
            self.assertFalse(flags.checkpoint_requested)   # no second save for it
            self.assertEqual(flags.agree(), (False, False))
            # A request that comes during a save this rank asked for itself still asks for the next.
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(wait_until(lambda: flags.checkpoint_requested))
            self.assertEqual(flags.agree(), (False, True))
            os.kill(os.getpid(), signal.SIGUSR1)           # lands during the save
            self.assertTrue(wait_until(lambda: len(flags.received) == 3))
            flags.clear_checkpoint()
            self.assertTrue(flags.checkpoint_requested)

    def test_a_late_copy_and_a_new_request_during_one_save_leave_one_more_save(self):
        with SignalFlags() as flags:
            with mock.patch.object(self.dist, "all_reduce", self.peer_has_the_request()):
                self.assertEqual(flags.agree(), (False, True))
            os.kill(os.getpid(), signal.SIGUSR1)           # a new request during the save
            self.assertTrue(wait_until(lambda: len(flags.received) == 2))
            flags.clear_checkpoint()
            self.assertTrue(flags.checkpoint_requested)
