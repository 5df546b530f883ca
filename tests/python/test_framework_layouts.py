"""`spotvisor validate` on the checkpoint layouts real frameworks write, caught at every
step of their save order: a half-written checkpoint is BAD and names what is missing,
the finished one is good.

Every file is real (torch.save, json.dump, torch's own DCP writer over gloo); the only
thing wrong with a half-written checkpoint is what is missing. Runs only where a built
`spotvisor` binary exists: $SPOTVISOR_BINARY, else <repo>/build/spotvisor."""

import argparse
import dataclasses
import json
import os
import pickletools
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import unittest
from collections import OrderedDict
from pathlib import Path

import harness


SPOTVISOR = harness.find_spotvisor()


@dataclasses.dataclass
class TrainingArguments:
    """Stands in for transformers.TrainingArguments: training_args.bin pickles an object of
    a class the validator cannot import, as the real one does."""
    output_dir: str = "out"
    save_steps: int = 100
    learning_rate: float = 5e-5
    seed: int = 42


@unittest.skipIf(SPOTVISOR is None, "no built spotvisor binary (set SPOTVISOR_BINARY)")
@unittest.skipUnless(harness.HAS_TORCH, "torch is not installed")
def launch_job(command, processes=None):
    """A job file whose command is `command` (a launcher's argv: the count of processes is
    read from it), or with checkpoints.processes set."""
    return (f"job:\n  name: t\n  command: {json.dumps(command)}\n"
            + (f"checkpoints:\n  processes: {processes}\n" if processes else ""))


class LayoutTest(unittest.TestCase):
    """Templates: the finished layout, written once per class under `cls.templates` with
    the same relative paths a test places under `self.root`."""

    @classmethod
    def setUpClass(cls):
        cls._class_tmp = tempfile.TemporaryDirectory()
        cls.templates = Path(cls._class_tmp.name)
        cls.write_templates(cls.templates)

    @classmethod
    def tearDownClass(cls):
        cls._class_tmp.cleanup()

    @classmethod
    def write_templates(cls, t):
        pass

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def place(self, *rels):
        """Copy template files (or whole directories) to the same place under the root."""
        for rel in rels:
            src, dst = self.templates / rel, self.root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst)
            else:
                shutil.copyfile(src, dst)

    def validate(self, rel, fmt=None, save_dir=None, job=None):
        """`spotvisor validate`, with a job file setting checkpoints.format when `fmt` is given
        (or `job`: a whole job file's text)."""
        args = [str(SPOTVISOR), "validate"]
        if fmt:
            job = (f'job:\n  name: t\n  command: ["true"]\ncheckpoints:\n'
                   f'  dir: {self.root / save_dir}\n  format: {fmt}\n')
        if job:
            path = self.root / "job.yaml"
            path.write_text(job)
            args += ["--config", str(path)]
        return subprocess.run(args + [str(self.root / rel)], capture_output=True, text=True, timeout=60)

    def assertGood(self, rel, fmt=None, save_dir=None, job=None):
        result = self.validate(rel, fmt, save_dir, job)
        self.assertEqual(result.returncode, 0, f"{rel} should be good:\n{result.stdout}{result.stderr}")
        self.assertRegex(result.stdout, r": good \([a-z]+\): ")
        return result.stdout

    def assertBad(self, rel, phrase, fmt=None, save_dir=None, job=None):
        result = self.validate(rel, fmt, save_dir, job)
        self.assertEqual(result.returncode, 1, f"{rel} should be BAD ({phrase}):\n{result.stdout}{result.stderr}")
        reason = re.search(r": BAD \([a-z]+\): (.*)", result.stdout, re.S)
        self.assertIsNotNone(reason, result.stdout + result.stderr)
        self.assertIn(phrase, reason.group(1), f"{rel}: the reason should name {phrase!r}")

    def assert_save_order(self, target, order, phrase, fmt=None, save_dir=None):
        """Place `order` one file at a time: BAD naming `phrase` until the last, then good."""
        for i, rel in enumerate(order):
            self.place(rel)
            with self.subTest(written=rel):
                if i < len(order) - 1:
                    self.assertBad(target, phrase, fmt, save_dir)
                else:
                    self.assertGood(target, fmt, save_dir)


def torch_save(path, obj, **kwargs):
    import torch
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path, **kwargs)


def json_save(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)  # as TrainerState.save_to_json
        f.write("\n")


def text_save(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def trainer_state(step):
    return {"best_metric": None, "best_model_checkpoint": None, "epoch": 0.5, "eval_steps": 500,
            "global_step": step, "is_hyper_param_search": False, "is_local_process_zero": True,
            "is_world_process_zero": True, "log_history": [], "logging_steps": 10, "max_steps": 400,
            "num_train_epochs": 1, "save_steps": 100, "total_flos": 0.0, "train_batch_size": 8,
            "trial_name": None, "trial_params": None}


HF_CKPT = "out/checkpoint-200"


class HuggingFaceTrainerTest(LayoutTest):
    # transformers/trainer.py Trainer._save_checkpoint: save_model (-> _save: model.save_pretrained
    # writes config.json then the weights, then torch.save(args, training_args.bin)), then
    # _save_optimizer_and_scheduler (optimizer.pt, scheduler.pt), _save_rng_state (rng_state.pth),
    # then state.save_to_json(trainer_state.json) last.
    CKPT = HF_CKPT
    ORDER = [f"{HF_CKPT}/{name}" for name in ("config.json", "pytorch_model.bin", "training_args.bin",
                                              "optimizer.pt", "scheduler.pt", "rng_state.pth",
                                              "trainer_state.json")]

    @classmethod
    def write_templates(cls, t):
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        ckpt = t / cls.CKPT
        json_save(ckpt / "config.json", {"architectures": ["TinyModel"], "hidden_size": 4,
                                         "model_type": "tiny", "torch_dtype": "float32"})
        torch_save(ckpt / "pytorch_model.bin", model.state_dict())
        torch_save(ckpt / "training_args.bin", TrainingArguments())
        torch_save(ckpt / "optimizer.pt", optimizer.state_dict())
        torch_save(ckpt / "scheduler.pt", scheduler.state_dict())
        torch_save(ckpt / "rng_state.pth", {"python": random.getstate(), "cpu": torch.random.get_rng_state()})
        json_save(ckpt / "trainer_state.json", trainer_state(200))
        torch_save(t / "mine/ckpt-5/model.pt", model.state_dict())

    def test_every_step_of_the_trainer_save_order(self):
        self.assert_save_order(self.CKPT, self.ORDER, "trainer_state.json")

    def test_a_truncated_trainer_state_json_is_bad(self):
        self.place(*self.ORDER)
        state = self.root / self.CKPT / "trainer_state.json"
        data = state.read_bytes()
        state.write_bytes(data[:len(data) // 2])
        self.assertBad(self.CKPT, "trainer_state.json")

    def test_trainer_state_of_another_step_is_bad(self):
        self.place(*self.ORDER)
        json_save(self.root / self.CKPT / "trainer_state.json", trainer_state(100))
        self.assertBad(self.CKPT, "global_step")

    def test_two_processes_each_write_their_rng_state(self):
        # world_size > 1: rng_state_<process index>.pth from every process, trainer_state.json
        # from the main one, with no barrier between them.
        two = [r for r in self.ORDER if not r.endswith("rng_state.pth")]
        self.place(*two)
        for rank in (0, 1):
            shutil.copyfile(self.templates / HF_CKPT / "rng_state.pth", self.root / HF_CKPT / f"rng_state_{rank}.pth")
        torchrun = launch_job(["torchrun", "--standalone", "--nproc_per_node", "2", "train.py"])
        self.assertGood(self.CKPT, job=torchrun)
        (self.root / HF_CKPT / "rng_state_1.pth").unlink()
        self.assertBad(self.CKPT, "rng_state_1.pth is missing: the job runs 2 processes", job=torchrun)
        self.assertGood(self.CKPT)  # without the count, rank 0's alone cannot be told from a whole save
        (self.root / HF_CKPT / "rng_state_0.pth").rename(self.root / HF_CKPT / "rng_state_2.pth")
        self.assertBad(self.CKPT, "rng_state_0.pth is missing but rng_state_2.pth is there")

    def test_a_directory_without_hugging_face_files_gets_no_hugging_face_rules(self):
        self.place("mine/ckpt-5/model.pt")
        self.assertGood("mine/ckpt-5")


ACC_CKPT = "acc/checkpoints/checkpoint_3"  # ProjectConfiguration(automatic_checkpoint_naming=True)


class AccelerateTest(LayoutTest):
    # accelerate/checkpointing.py save_accelerator_state (Accelerator.save_state): the main process
    # saves the model (model.safetensors, or pytorch_model.bin with safe_serialization=False), the
    # optimizer (optimizer.bin), the scheduler (scheduler.bin), then every process torch.saves its
    # random_states_<process index>.pkl; here two processes, process 1 finishing after process 0.
    CKPT = ACC_CKPT
    ORDER = [f"{ACC_CKPT}/{name}" for name in ("pytorch_model.bin", "optimizer.bin", "scheduler.bin",
                                               "random_states_0.pkl")]

    @classmethod
    def write_templates(cls, t):
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        ckpt = t / cls.CKPT
        torch_save(ckpt / "pytorch_model.bin", model.state_dict())
        torch_save(ckpt / "optimizer.bin", optimizer.state_dict())
        torch_save(ckpt / "scheduler.bin", scheduler.state_dict())
        for rank in range(3):
            torch_save(ckpt / f"random_states_{rank}.pkl",
                       {"random_state": random.getstate(), "torch_manual_seed": torch.get_rng_state()})

    def test_every_step_of_the_save_order(self):
        self.assert_save_order(self.CKPT, self.ORDER, "random_states_0.pkl")
        self.place(f"{self.CKPT}/random_states_1.pkl")
        self.assertIn("committed by random_states_0.pkl", self.assertGood(self.CKPT))

    def test_every_step_of_the_save_order_with_format_accelerate(self):
        self.assert_save_order(self.CKPT, self.ORDER, "random_states_0.pkl", "accelerate", "acc/checkpoints")

    def test_a_model_alone_under_a_name_of_its_own_is_a_model_unless_the_format_says_accelerate(self):
        self.place(self.ORDER[0])
        (self.root / self.CKPT).rename(self.root / "acc/step-300")
        self.assertGood("acc/step-300")
        self.assertBad("acc/step-300", "random_states_0.pkl", "accelerate", "acc")

    def test_another_process_done_first_is_not_enough(self):
        self.place(*self.ORDER[:-1], f"{self.CKPT}/random_states_1.pkl")
        self.assertBad(self.CKPT, "random_states_0.pkl")

    def test_a_process_missing_between_others_is_named(self):
        self.place(*self.ORDER, f"{self.CKPT}/random_states_2.pkl")
        self.assertBad(self.CKPT, "random_states_1.pkl is missing")

    def test_the_job_s_process_count_requires_every_share(self):
        # The count from `accelerate launch --num_processes 2`: a save cut short before the
        # last process wrote its random state is bad, though nothing in it says so.
        self.place(*self.ORDER)
        launch = launch_job(["accelerate", "launch", "--multi_gpu", "--mixed_precision", "no",
                             "--num_processes", "2", "train.py"])
        self.assertBad(self.CKPT, "random_states_1.pkl is missing: the job runs 2 processes", job=launch)
        self.assertBad(self.CKPT, "random_states_1.pkl is missing: the job runs 3 processes",
                       job=launch_job(["python3", "train.py"], processes=3))
        self.place(f"{self.CKPT}/random_states_1.pkl")
        self.assertGood(self.CKPT, job=launch)
        # Two machines: the other machine's processes write elsewhere; the count is unknown.
        self.assertGood(self.CKPT, job=launch_job(["accelerate", "launch", "--num_processes=4", "--num_machines=2",
                                                   "train.py"]))
        # A save by three processes loads in two (each reads its own).
        self.place(f"{self.CKPT}/random_states_2.pkl")
        self.assertGood(self.CKPT, job=launch)

    def test_a_truncated_random_state_is_bad(self):
        self.place(*self.ORDER)
        state = self.root / self.CKPT / "random_states_0.pkl"
        state.write_bytes(state.read_bytes()[:-40])
        self.assertBad(self.CKPT, "random_states_0.pkl")


def ds_files(tag):
    """The files of one DeepSpeed tag with dp_world_size=2, mp_world_size=2, in save order."""
    model = [f"ds/{tag}/mp_rank_{mp:02d}_model_states.pt" for mp in range(2)]
    optim = [f"ds/{tag}/zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt" for mp in range(2) for dp in range(2)]
    return model + optim


class DeepSpeedTest(LayoutTest):
    # deepspeed/runtime/engine.py DeepSpeedEngine.save_checkpoint: _save_checkpoint (data-parallel
    # rank 0 of each model-parallel rank torch.saves mp_rank_{mp:02d}_model_states.pt: module,
    # dp_world_size, mp_world_size, global_steps, ds_version, ...), then _save_zero_checkpoint (every
    # data-parallel rank torch.saves zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt; global rank 0
    # then copies zero_to_fp32.py into the save dir), then rank 0 writes the save dir's text file
    # `latest` holding the tag, last.
    ORDER = ds_files("global_step100") + ["ds/zero_to_fp32.py", "ds/latest"]

    @classmethod
    def write_templates(cls, t):
        import torch
        torch.manual_seed(0)
        for step in (50, 100):
            for mp in range(2):
                torch_save(t / f"ds/global_step{step}/mp_rank_{mp:02d}_model_states.pt", dict(
                    module=OrderedDict([("linear.weight", torch.randn(2, 4)), ("linear.bias", torch.zeros(2))]),
                    buffer_names=[], optimizer=None, lr_scheduler=None, sparse_tensor_module_names=set(),
                    skipped_steps=0, global_steps=step, global_samples=step * 8, dp_world_size=2,
                    mp_world_size=2, ds_config={"train_batch_size": 8, "zero_optimization": {"stage": 2}},
                    ds_version="0.14.0"))
                for dp in range(2):
                    torch_save(t / f"ds/global_step{step}/zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt", dict(
                        optimizer_state_dict={"zero_stage": 2, "partition_count": [2], "loss_scaler": None,
                                              "single_partition_of_fp32_groups": [torch.randn(5)],
                                              "base_optimizer_state": {"state": {0: {"step": torch.tensor(float(step)),
                                                                                     "exp_avg": torch.zeros(5),
                                                                                     "exp_avg_sq": torch.zeros(5)}},
                                                                       "param_groups": [{"lr": 1e-4, "params": [0]}]}},
                        param_shapes=[OrderedDict([("linear.weight", torch.Size([2, 4])),
                                                   ("linear.bias", torch.Size([2]))])],
                        ds_config={"train_batch_size": 8}, ds_version="0.14.0"))
        text_save(t / "ds/zero_to_fp32.py", "#!/usr/bin/env python\n# recovers fp32 weights from ZeRO shards\n")
        text_save(t / "ds/latest", "global_step100")

    def save_order(self, fmt):
        self.assert_save_order("ds/global_step100", self.ORDER, "latest", fmt, "ds")

    def test_every_step_of_the_engine_save_order(self):
        self.save_order(None)

    def test_every_step_of_the_engine_save_order_with_format_deepspeed(self):
        self.save_order("deepspeed")

    def test_a_missing_optimizer_shard_is_named(self):
        self.place(*self.ORDER)
        (self.root / "ds/global_step100/zero_pp_rank_1_mp_rank_01_optim_states.pt").unlink()
        self.assertBad("ds/global_step100", "zero_pp_rank_1_mp_rank_01_optim_states.pt")

    def test_a_missing_model_states_file_is_named(self):
        self.place(*self.ORDER)
        (self.root / "ds/global_step100/mp_rank_01_model_states.pt").unlink()
        self.assertBad("ds/global_step100", "mp_rank_01_model_states.pt")

    def test_latest_naming_an_older_tag_leaves_the_newer_one_uncommitted(self):
        self.place(*self.ORDER, *ds_files("global_step50"))
        text_save(self.root / "ds/latest", "global_step50")
        self.assertBad("ds/global_step100", "latest")
        self.assertGood("ds/global_step50")

    def test_latest_naming_the_newest_tag_commits_the_older_ones_too(self):
        self.place(*self.ORDER, *ds_files("global_step50"))
        self.assertGood("ds/global_step100")
        self.assertGood("ds/global_step50")


class MegatronTest(LayoutTest):
    # megatron/training/checkpointing.py save_checkpoint: every (data-parallel rank 0) rank torch.saves
    # iter_{iteration:07d}/mp_rank_{tp:02d}/model_optim_rng.pt (mp_rank_{tp:02d}_{pp:03d}/ with pipeline
    # parallel > 1), barrier, then rank 0 writes the tracker latest_checkpointed_iteration.txt in the
    # save dir holding the iteration as text, last.
    TP = [f"mg/iter_0000300/mp_rank_{tp:02d}/model_optim_rng.pt" for tp in range(2)] + \
         ["mg/latest_checkpointed_iteration.txt"]
    PP = [f"mgpp/iter_0000300/mp_rank_00_{pp:03d}/model_optim_rng.pt" for pp in range(2)] + \
         ["mgpp/latest_checkpointed_iteration.txt"]

    @classmethod
    def write_templates(cls, t):
        import torch
        torch.manual_seed(0)
        for order, tp_size, pp_size in ((cls.TP, 2, 1), (cls.PP, 1, 2)):
            args = argparse.Namespace(tensor_model_parallel_size=tp_size, pipeline_model_parallel_size=pp_size,
                                      num_layers=2, hidden_size=8, save_interval=100, iteration=300)
            for rel in order[:-1]:
                torch_save(t / rel, {
                    "args": args, "checkpoint_version": 3.0, "iteration": 300,
                    "model": OrderedDict([("language_model.encoder.layers.0.weight", torch.randn(4, 8))]),
                    "optimizer": {"optimizer": {"state": {}, "param_groups": [{"lr": 1e-4, "params": [0]}]},
                                  "fp32_from_fp16_params": [[torch.randn(4, 8)]]},
                    "opt_param_scheduler": {"max_lr": 1e-4, "num_steps": 300},
                    "rng_state": [{"random_rng_state": random.getstate(),
                                   "torch_rng_state": torch.get_rng_state(), "rng_tracker_states": {}}]})
            text_save(t / order[-1], "300")

    def test_every_step_of_the_save_order(self):
        self.assert_save_order("mg/iter_0000300", self.TP, "latest_checkpointed_iteration.txt")

    def test_every_step_of_the_save_order_with_format_megatron(self):
        self.assert_save_order("mg/iter_0000300", self.TP, "latest_checkpointed_iteration.txt", "megatron", "mg")

    def test_a_missing_tensor_parallel_rank_is_named(self):
        self.place(*self.TP)
        shutil.rmtree(self.root / "mg/iter_0000300/mp_rank_01")
        self.assertBad("mg/iter_0000300", "mp_rank_01")

    def test_pipeline_parallel_ranks(self):
        self.place(*self.PP)
        self.assertGood("mgpp/iter_0000300")
        shutil.rmtree(self.root / "mgpp/iter_0000300/mp_rank_00_001")
        self.assertBad("mgpp/iter_0000300", "mp_rank_00_001")


# Two ranks over gloo, each running torch's own DCP writer (dcp_shim first: torch 1.13's DCP
# does not import on Python 3.11 without it).
DCP_WRITER = r'''
import datetime, json, os, pickle, sys
sys.path.insert(0, sys.argv[2])
import dcp_shim

import torch, torch.distributed as dist
from torch.distributed._shard import sharded_tensor
from torch.distributed._shard.sharding_spec import ChunkShardingSpec
from torch.distributed._shard.checkpoint import FileSystemWriter, save_state_dict

out = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(rank)
# The default planner of 1.13 writes plain tensors and other values on the coordinator only and
# each rank's own shards of a ShardedTensor, so rank 1 writes its half of layer.weight.
state = {"layer.weight": sharded_tensor.rand(ChunkShardingSpec(dim=0, placements=["rank:0/cpu", "rank:1/cpu"]), 64, 16),
         "bias": torch.arange(32, dtype=torch.float16), "ids": torch.arange(100, dtype=torch.int64),
         "step": 7, "extra": {"lr": 0.1}}  # the last two are BytesIO items
for name, single in (("single", True), ("per_item", False)):
    save_state_dict(state, FileSystemWriter(os.path.join(out, name), single_file_per_rank=single))
if rank == 0:
    def load(name):
        with open(os.path.join(out, name, ".metadata"), "rb") as f:
            return pickle.load(f)
    items = {name: [dict(fqn=k.fqn, file=v.relative_path, offset=v.offset, length=v.length,
                         kind=type(load(name).state_dict_metadata[k.fqn]).__name__)
                    for k, v in load(name).storage_data.items()] for name in ("single", "per_item")}
    with open(os.path.join(out, "items.json"), "w") as f:
        json.dump(items, f, indent=1)
    md = load("single")  # the last item of __0_0.distcp recorded 1000 bytes longer than the file
    last = max((k for k, v in md.storage_data.items() if v.relative_path == "__0_0.distcp"),
               key=lambda k: md.storage_data[k].offset)
    md.storage_data[last].length += 1000
    with open(os.path.join(out, "longer.metadata"), "wb") as f:
        pickle.dump(md, f)
dist.barrier()
# Everything is written; leave without torch 1.13's gloo teardown, which can abort
# ("terminate called without an active exception") or hang (examples/torch_trainer/train.py).
sys.stdout.flush()
os._exit(0)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zip_entry_data(blob, start, end, suffix):
    """Offset of the data of the first ZIP entry named *`suffix` between `start` and `end`."""
    pos = blob.find(b"PK\x03\x04", start, end)
    while pos >= 0:
        name_len, extra_len = struct.unpack_from("<HH", blob, pos + 26)
        if blob[pos + 30:pos + 30 + name_len].decode().endswith(suffix):
            return pos + 30 + name_len + extra_len
        pos = blob.find(b"PK\x03\x04", pos + 4, end)
    raise AssertionError(f"no ZIP entry *{suffix} in bytes {start}..{end}")


class DistributedCheckpointTest(LayoutTest):
    # torch/distributed/_shard/checkpoint/filesystem.py FileSystemWriter.write_data: every rank writes
    # its __{rank}_{n}.distcp files (BytesIO items first, then one torch.save archive per tensor), then
    # FileSystemWriter.finish on the coordinator pickles the Metadata to .metadata.tmp and renames it
    # to .metadata, last.
    @classmethod
    def write_templates(cls, t):
        port = free_port()
        here = str(Path(__file__).resolve().parent)
        procs = [subprocess.Popen([sys.executable, "-c", DCP_WRITER, str(t), here], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=harness.child_env({
                                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                      "WORLD_SIZE": "2", "RANK": str(rank)}))
                 for rank in range(2)]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError("the DCP writer failed:\n" + "\n".join(outputs))
        cls.items = json.loads((t / "items.json").read_text())

    def item(self, layout, fqn):
        return next(i for i in self.items[layout] if i["fqn"] == fqn)

    def test_the_files_torch_wrote(self):
        names = sorted(p.name for p in (self.templates / "single").iterdir())
        self.assertEqual(names, [".metadata", "__0_0.distcp", "__1_0.distcp"])
        self.assertEqual(self.item("single", "step")["kind"], "BytesStorageMetadata")

    def test_complete_is_good_and_said_to_be_dcp(self):
        for layout in ("single", "per_item"):
            self.place(layout)
            with self.subTest(layout=layout):
                self.assertIn("dcp", self.assertGood(layout))

    def test_without_metadata_is_bad(self):
        self.place("single")
        (self.root / "single/.metadata").unlink()
        self.assertBad("single", ".metadata")

    def test_only_metadata_tmp_is_bad(self):
        self.place("single")
        (self.root / "single/.metadata").rename(self.root / "single/.metadata.tmp")
        self.assertBad("single", ".metadata")

    def test_a_truncated_shard_is_named(self):
        self.place("single")
        shard = self.root / "single/__0_0.distcp"
        os.truncate(shard, shard.stat().st_size - 100)
        self.assertBad("single", "__0_0.distcp")

    def test_a_missing_shard_is_named(self):
        self.place("single")
        (self.root / "single/__1_0.distcp").unlink()
        self.assertBad("single", "__1_0.distcp")

    def test_a_missing_bytes_item_file_is_named(self):
        self.place("per_item")
        name = self.item("per_item", "step")["file"]
        (self.root / "per_item" / name).unlink()
        self.assertBad("per_item", name)

    def test_a_flipped_bit_in_tensor_data_is_bad(self):
        self.place("single")
        ids = self.item("single", "ids")
        shard = self.root / "single" / ids["file"]
        blob = bytearray(shard.read_bytes())
        blob[zip_entry_data(blob, ids["offset"], ids["offset"] + ids["length"], "/data/0") + 100] ^= 0x10
        shard.write_bytes(bytes(blob))
        self.assertBad("single", ids["file"])

    def test_an_item_recorded_past_the_end_of_its_file_is_named(self):
        self.place("single")
        shutil.copyfile(self.templates / "longer.metadata", self.root / "single/.metadata")
        self.assertBad("single", "__0_0.distcp")


class LegacyTorchSaveTest(LayoutTest):
    # torch/serialization.py _legacy_save: pickles of the magic number, the protocol version and
    # sys_info, then the object, then the list of storage keys, then each storage's raw bytes.
    @classmethod
    def write_templates(cls, t):
        import torch
        torch_save(t / "legacy.pt", {"w": torch.randn(4, 4), "ids": torch.arange(10), "h": torch.ones(6).half()},
                   _use_new_zipfile_serialization=False)

    def test_complete_is_good(self):
        self.place("legacy.pt")
        self.assertGood("legacy.pt")

    def test_truncated_anywhere_is_bad(self):
        data = (self.templates / "legacy.pt").read_bytes()
        first_pickle_end = next(pos for op, _, pos in pickletools.genops(data) if op.name == "STOP") + 1
        for size in (len(data) - 1, len(data) - 100, len(data) // 2, first_pickle_end):
            with self.subTest(size=size):
                (self.root / "legacy.pt").write_bytes(data[:size])
                self.assertBad("legacy.pt", "legacy.pt")

    def test_trailing_garbage_is_bad(self):
        data = (self.templates / "legacy.pt").read_bytes()
        (self.root / "legacy.pt").write_bytes(data + b"\x00garbage\xff\xfe")
        self.assertBad("legacy.pt", "legacy.pt")


if __name__ == "__main__":
    unittest.main()
