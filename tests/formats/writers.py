"""Checkpoint writers for the format tests: each writes with the real library's own save
function (torch.save, torch.distributed.checkpoint, safetensors, transformers), never with
bytes of our own, so the tests see exactly what users' trainers write. Reusable: a test that
wants other contents (a NaN in one layer) builds its state dict or model and calls the same
writer. Works with Debian's torch 1.13 (python3) and torch 2.x (the PyPI environment);
`available()` says which writers the running interpreter has, and why not."""

import datetime
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON_TESTS = HERE.parent / "python"  # dcp_shim: torch 1.13's DCP on Python 3.11
sys.path.insert(0, str(PYTHON_TESTS))
import dcp_shim  # noqa: E402,F401  (before torch)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the hub: tiny models come from configs
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def _importable(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def _dcp_safetensors():
    if not TORCH2 or not _importable("safetensors.torch"):
        return False
    from torch.distributed.checkpoint import filesystem
    return hasattr(filesystem, "SerializationFormat")


def available():
    """{writer name: None if this interpreter can run it, else why not}."""
    v = torch.__version__
    return {
        "torch_save": None,
        "dcp": None,  # torch 1.13: torch.distributed._shard.checkpoint; 2.x: torch.distributed.checkpoint
        "dcp_safetensors": None if _dcp_safetensors() else f"torch {v}: no SerializationFormat.SAFETENSORS for DCP",
        "dcp_async": None if TORCH2 else f"torch {v}: no torch.distributed.checkpoint.async_save (torch >= 2.3)",
        "dcp_async_killed": None if TORCH2 else f"torch {v}: no async_save to kill",
        "safetensors": None if _importable("safetensors.torch") else f"no safetensors package for {sys.executable}",
        "safetensors_sharded": (None if _importable("safetensors.torch") and _importable("transformers") else
                                f"no transformers/safetensors packages for {sys.executable}"),
    }


# --- contents ------------------------------------------------------------------------------

def tiny_model(seed=0):
    """A small MLP (a few KiB of float32), deterministic for `seed`."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def training_state(model, steps=2, seed=0):
    """What a trainer torch.saves: model and Adam state after `steps` steps, and the step."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 16)).square().mean().backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": steps}


def flat_tensors(model):
    """The model's tensors by name, contiguous (what safetensors and DCP take)."""
    return {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}


def tiny_transformers_model(seed=0):
    """A two-layer GPT-2 from a config (no download), about 60 KiB of weights."""
    import transformers
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32)
    return transformers.GPT2LMHeadModel(config)


# --- single files --------------------------------------------------------------------------

def write_torch_save(state, path):
    torch.save(state, str(path))


def write_safetensors(tensors, path, metadata=None):
    from safetensors.torch import save_file
    save_file(tensors, str(path), metadata=metadata or {"format": "pt"})


def write_pretrained(model, directory, max_shard_size="24KB"):
    """transformers' save_pretrained as a Trainer calls it: model-0000K-of-0000N.safetensors
    shards, model.safetensors.index.json (weight_map) and config.json. Returns the shard names."""
    model.save_pretrained(str(directory), max_shard_size=max_shard_size, safe_serialization=True)
    return sorted(p.name for p in Path(directory).glob("model-*.safetensors"))


# --- torch.distributed.checkpoint ----------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Runs in each rank's process: sys.argv = [-, mode, input state dict, directory, ready file].
_CHILD = r'''
import os, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import dcp_shim, writers
writers._child_main(*sys.argv[3:])
'''


def _spawn(mode, state_dict, directory, world_size, ready=""):
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    source = directory.parent / (directory.name + ".input.pt")  # beside, never inside the checkpoint
    torch.save(state_dict, str(source))
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world_size),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(HERE), str(PYTHON_TESTS), mode, str(source),
                               str(directory), ready],
                              env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(world_size)]
    return source, procs


def _finish(source, procs, timeout=180):
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    source.unlink()
    if any(p.returncode for p in procs):
        raise RuntimeError("the DCP writer failed:\n" + "\n".join(outputs))


def write_dcp(state_dict, directory, world_size=2, serialization="torch_save"):
    """torch.distributed.checkpoint (1.13: torch.distributed._shard.checkpoint) from
    `world_size` real processes over gloo, every rank holding `state_dict` as after DDP. Every
    tensor whose first dimension divides by the world size is sharded row-wise across the ranks
    (2.x: a DTensor, 1.13: a ShardedTensor), so each rank writes its own __<rank>_0.distcp;
    other values are BYTE_IO items. `serialization`: "torch_save" (one torch.save archive per
    tensor, the default) or "safetensors" (torch 2.x: FileSystemWriter(serialization_format=
    SerializationFormat.SAFETENSORS), one safetensors blob per shard)."""
    source, procs = _spawn("save" if serialization == "torch_save" else "save-" + serialization, state_dict,
                           directory, world_size)
    _finish(source, procs)


def write_dcp_async(state_dict, directory):
    """torch.distributed.checkpoint.async_save from one process (no process group), waited for."""
    source, procs = _spawn("async", state_dict, directory, 1)
    _finish(source, procs)


def write_dcp_async_killed(state_dict, directory, stage="shard", timeout=120):
    """async_save whose process is SIGKILLed before the save finished: `stage` "shard" = while
    the shard is written (after its first item), "metadata" = after .metadata.tmp is written,
    before torch renames it to .metadata. Returns what the writer left."""
    ready = Path(directory).parent / (Path(directory).name + ".ready")
    source, procs = _spawn("async-kill-" + stage, state_dict, directory, 1, str(ready))
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if procs[0].poll() is not None or time.monotonic() > deadline:
            procs[0].kill()
            raise RuntimeError("the killed async_save never reached its stage:\n" + procs[0].communicate()[0])
        time.sleep(0.05)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].communicate()
    source.unlink()
    ready.unlink()
    return sorted(p.name for p in Path(directory).iterdir())


def _sharded(state_dict, world_size):
    if world_size == 1:
        return state_dict
    out = {}
    if TORCH2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (world_size,))
        shard = lambda t: distribute_tensor(t, mesh, [Shard(0)])  # noqa: E731
    else:
        from torch.distributed._shard.api import _shard_tensor
        from torch.distributed._shard.sharding_spec import ChunkShardingSpec
        spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world_size)])
        shard = lambda t: _shard_tensor(t, spec)  # noqa: E731
    for k, v in state_dict.items():
        sharded = isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] % world_size == 0
        out[k] = shard(v) if sharded else v
    return out


def _hold(ready):
    """Says the stage is reached, then waits for the SIGKILL."""
    Path(ready).write_text("ready")
    while True:
        time.sleep(1)


def _child_main(mode, source, directory, ready):
    import torch.distributed as dist
    world_size = int(os.environ["WORLD_SIZE"])
    state_dict = torch.load(source)
    if mode.startswith("save"):
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
        state_dict = _sharded(state_dict, world_size)
        if mode == "save-safetensors":
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.filesystem import FileSystemWriter, SerializationFormat
            dcp.save(state_dict, storage_writer=FileSystemWriter(
                directory, serialization_format=SerializationFormat.SAFETENSORS))
        elif TORCH2:
            import torch.distributed.checkpoint as dcp
            dcp.save(state_dict, checkpoint_id=directory)
        else:
            from torch.distributed._shard.checkpoint import FileSystemWriter, save_state_dict
            save_state_dict(state_dict, FileSystemWriter(directory))
        dist.barrier()
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import filesystem
        if mode == "async-kill-shard":
            write_item = filesystem._write_item

            def write_then_hold(*args, **kwargs):
                result = write_item(*args, **kwargs)
                args[1].flush()  # the stream: what a killed writer leaves is on disk
                _hold(ready)
                return result
            filesystem._write_item = write_then_hold
        elif mode == "async-kill-metadata":
            filesystem.FileSystem.rename = lambda self, path, new_path: _hold(ready)
        dcp.async_save(state_dict, checkpoint_id=directory).result()
    # Written; leave without torch 1.13's gloo teardown, which can abort or hang.
    sys.stdout.flush()
    os._exit(0)


def read_dcp_metadata(directory):
    """The Metadata torch pickled into .metadata (unpickled with torch's own classes)."""
    with open(Path(directory) / ".metadata", "rb") as f:
        return pickle.load(f)
