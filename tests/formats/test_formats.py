"""The checkpoint formats as the real libraries write them, against `spotvisor validate`.

Every checkpoint here is written at test time by the library itself (writers.py): torch.save,
torch.distributed.checkpoint from two gloo processes, async_save (completed, and SIGKILLed
before it finished), safetensors.torch.save_file, transformers' sharded save_pretrained. Each
good one must be good at every level; then each is damaged the ways disks and killed writers
damage files — truncation at seeded random offsets, one flipped bit in tensor data, one in
the metadata, a lost shard — and `validate --level full` must say bad, naming the file and
the offset (and the DCP item or the index entry). Where a format has no checksum of its own
(safetensors data, DCP's .metadata pickle) an unsealed flip can pass: that is asserted as the
honest limit, and the sealed copy (`spotvisor seal`, our manifest) must be bad.

Runs under Debian's torch 1.13 (/usr/bin/python3) and torch 2.x (the PyPI environment); what
a version cannot write is listed in MISSING_BY_VERSION and reported as a skip with its reason.
SPOTVISOR_FORMATS_REQUIRE_TORCH2=1: torch 2.x is required (ctest's formats.torch2).
SPOTVISOR_FORMATS_SEED: the seed of the random offsets (printed with every case).
"""

import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import writers  # noqa: E402  (imports torch)

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("SPOTVISOR_BINARY", str(ROOT / "build" / "spotvisor"))
SEED = int(os.environ.get("SPOTVISOR_FORMATS_SEED", "20"))
REQUIRE_TORCH2 = os.environ.get("SPOTVISOR_FORMATS_REQUIRE_TORCH2") == "1"
LEVELS = ("structure", "format", "full")
TRUNCATIONS = 5

# What each torch version cannot write, by design of that version or its packages; anything
# else missing is a failure. Debian 12 packages torch 1.13 without safetensors or transformers.
MISSING_BY_VERSION = {
    1: {"dcp_async": "async_save arrived in torch 2.3",
        "dcp_safetensors": "DCP's SerializationFormat.SAFETENSORS arrived in torch 2.x",
        "dcp_async_killed": "async_save arrived in torch 2.3",
        "safetensors": "Debian has no python3-safetensors (only if importable)",
        "safetensors_sharded": "Debian has no python3-transformers / python3-safetensors"},
    2: {},
}
OFFSET = re.compile(r"offset \d+")


from formats_damage import FORMATS, Dcp, first_tensor, flip, safetensors_header, zip_entry_data  # noqa: E402



# --- the test --------------------------------------------------------------------------------

def spotvisor(*args):
    r = subprocess.run([BINARY, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout.strip()


class FormatsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        major = 2 if writers.TORCH2 else 1
        print(f"\nformats: torch {writers.torch.__version__} ({sys.executable}), seed {SEED}", file=sys.stderr)
        if REQUIRE_TORCH2 and not writers.TORCH2:
            raise AssertionError(f"SPOTVISOR_FORMATS_REQUIRE_TORCH2=1 but {sys.executable} has torch "
                                 f"{writers.torch.__version__}")
        cls.missing = {k: why for k, why in writers.available().items() if why}
        unexpected = set(cls.missing) - set(MISSING_BY_VERSION[major])
        if unexpected:
            raise AssertionError(f"torch {major}.x should write {sorted(unexpected)}: " +
                                 "; ".join(cls.missing[k] for k in sorted(unexpected)))
        for k, why in sorted(cls.missing.items()):
            print(f"formats: not on torch {writers.torch.__version__}: {k} ({MISSING_BY_VERSION[major][k]}; {why})",
                  file=sys.stderr)
        cls.tmp = Path(tempfile.mkdtemp(prefix="spotvisor-formats-"))
        t = cls.tmp / "templates"
        model = writers.tiny_model()
        tensors = writers.flat_tensors(model)
        dcp_state = dict(tensors, step=7)  # step: a BYTE_IO item
        jobs = {
            "torch_save": lambda: writers.write_torch_save(writers.training_state(model), t / "model.pt"),
            "dcp": lambda: writers.write_dcp(dcp_state, t / "dcp"),
            "dcp_async": lambda: writers.write_dcp_async(dcp_state, t / "dcp_async"),
            "dcp_safetensors": lambda: writers.write_dcp(dcp_state, t / "dcp_safetensors",
                                                         serialization="safetensors"),
            "dcp_async_killed": lambda: [writers.write_dcp_async_killed(dcp_state, t / f"killed_{s}", s)
                                         for s in ("shard", "metadata")],
            "safetensors": lambda: writers.write_safetensors(tensors, t / "model.safetensors"),
            "safetensors_sharded": lambda: writers.write_pretrained(writers.tiny_transformers_model(), t / "hf",
                                                                    max_shard_size="64KB"),
        }
        t.mkdir(parents=True)
        # The writers are mostly separate processes waiting on imports: side by side.
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                futures = {k: pool.submit(fn) for k, fn in jobs.items() if k not in cls.missing}
                for k, f in futures.items():
                    f.result()
        except BaseException:
            cls.tearDownClass()  # unittest does not call it when setUpClass fails
            raise
        paths = {"torch_save": t / "model.pt", "dcp": t / "dcp", "dcp_async": t / "dcp_async",
                 "dcp_safetensors": t / "dcp_safetensors",
                 "safetensors": t / "model.safetensors", "safetensors_sharded": t / "hf"}
        cls.formats = {f.name: f(paths[f.name]) for f in FORMATS if f.name not in cls.missing}
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("SPOTVISOR_FORMATS_KEEP"):
            print(f"formats: kept {cls.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    # -- helpers

    def fmt(self, name):
        if name in self.missing:
            major = 2 if writers.TORCH2 else 1
            self.skipTest(f"not on torch {writers.torch.__version__}: {MISSING_BY_VERSION[major][name]} "
                          f"({self.missing[name]})")
        return self.formats.get(name)

    def scratch(self, f, sealed=False):
        """A fresh copy of the template (sealed: with our manifest); the copy as a Format."""
        type(self).n += 1
        d = self.tmp / f"case{self.n}"
        d.mkdir()
        dst = d / f.path.name
        (shutil.copytree if f.path.is_dir() else shutil.copy2)(f.path, dst)
        copy = type(f).__new__(type(f))
        copy.__dict__.update(f.__dict__)
        copy.path = dst
        if sealed:
            rc, out = spotvisor("seal", str(dst))
            self.assertEqual(rc, 0, out)
        return copy

    def validate(self, path, level="full"):
        rc, out = spotvisor("validate", "--level", level, str(path))
        self.assertIn(rc, (0, 1), out)
        return rc == 0, out

    def assertGood(self, path, level="full"):
        good, out = self.validate(path, level)
        self.assertTrue(good, f"{path} should be good at {level}: {out}")
        return out

    def assertBadNaming(self, path, file, words=(), offset=True, case=""):
        good, out = self.validate(path)
        self.assertFalse(good, f"{case}: should be bad: {out}")
        self.assertIn(Path(file).name, out, f"{case}: the reason should name {file}")
        if offset:
            self.assertRegex(out, OFFSET, f"{case}: the reason should name the offset")
        for w in words:
            self.assertIn(w, out, f"{case}: the reason should say {w!r}")
        print(f"formats: {case}: {out}", file=sys.stderr)
        return out

    # -- the cases, for every format

    def check_good_at_every_level(self, name):
        f = self.fmt(name)
        for level in LEVELS:
            with self.subTest(level=level):
                print(f"formats: {name} good at {level}: {self.assertGood(f.path, level)}", file=sys.stderr)
        s = self.scratch(f, sealed=True)
        self.assertGood(s.path)

    def check_truncations(self, name):
        f = self.fmt(name)
        rng = random.Random(f"{SEED}/{name}")
        for i in range(TRUNCATIONS):
            s = self.scratch(f)
            rel = rng.choice(s.files())
            size = s.file(rel).stat().st_size
            at = rng.randrange(1, size)
            case = f"{name}: {rel} ({size} bytes) truncated at offset {at} (seed {SEED}, #{i})"
            with self.subTest(case=case):
                os.truncate(s.file(rel), at)
                out = self.assertBadNaming(s.path, rel, case=case)
                if isinstance(s, Dcp) and rel.endswith(".distcp"):
                    self.assertIn("item '", out, f"{case}: the reason should name the DCP item")

    def check_flip(self, name, where):
        f = self.fmt(name)
        for sealed in (False, True):
            s = self.scratch(f, sealed)
            rel, at, words = getattr(s, where)()
            case = f"{name}: {where} in {rel} at offset {at}{' (sealed)' if sealed else ''}"
            with self.subTest(case=case):
                flip(s.file(rel), at)
                if sealed:  # the manifest's hash catches every flipped bit, checksum or not
                    self.assertBadNaming(s.path, rel, offset=False, case=case)
                elif where == "data_flip" and not s.data_checksum:
                    # The honest limit: safetensors has no checksum, so a flipped bit in tensor
                    # data passes `full` unless our manifest (seal) covers the file.
                    print(f"formats: {case}: {self.assertGood(s.path)} (no checksum: expected)", file=sys.stderr)
                else:
                    self.assertBadNaming(s.path, rel, words, case=case)

    def check_missing_shards(self, name):
        f = self.fmt(name)
        for rel in f.shards:
            s = self.scratch(f)
            (s.path / rel).unlink()
            case = f"{name}: {rel} missing"
            with self.subTest(case=case):
                if isinstance(s, Dcp):  # the shard and an item .metadata records in it
                    out = self.assertBadNaming(s.path, rel, ["missing"], offset=False, case=case)
                    self.assertTrue(any(f"'{i[3]}'" in out for i in s.items if i[0] == rel), f"{case}: no item named")
                else:  # the shard and the weight_map entry that names it
                    index = json.loads((s.path / "model.safetensors.index.json").read_text())["weight_map"]
                    out = self.assertBadNaming(s.path, rel, ["missing", "model.safetensors.index.json"], offset=False,
                                               case=case)
                    self.assertTrue(any(f"'{t}'" in out for t, sh in index.items() if sh == rel),
                                    f"{case}: no weight_map entry named")


    # -- cases of one format

    def test_the_files_are_what_this_torch_writes(self):
        """The corpus is what users get from this version, not an older shape of it."""
        f = self.fmt("torch_save")
        blob = f.path.read_bytes()
        with zipfile.ZipFile(f.path) as z:
            names = [i.filename.split("/", 1)[1] for i in z.infolist()]
            offsets = [zip_entry_data(blob, 0, len(blob), "/" + n)[1] for n in names]
        print(f"formats: torch.save records on torch {writers.torch.__version__}: {names}", file=sys.stderr)
        self.assertIn("data.pkl", names)
        if writers.TORCH2:  # torch 2.x: 64-byte aligned records, byteorder, a serialization id
            self.assertIn("byteorder", names)
            self.assertIn(".data/serialization_id", names)
            self.assertEqual([o % 64 for o in offsets], [0] * len(offsets))
        d = self.fmt("dcp")
        ranks = {i[0].split("_")[2] for i in d.items}
        self.assertEqual(ranks, {"0", "1"}, f"both ranks should have written shards: {d.shards}")
        for shard, offset, length, fqn, kind in d.items:  # every item is a torch.save archive: CRC-32s
            head = (d.path / shard).read_bytes()[offset:offset + 4]
            self.assertEqual(head, b"PK\x03\x04", f"item {fqn} ({kind}) in {shard}")

    def test_dcp_metadata_pickle_flip(self):
        """.metadata is a pickle with no checksum: a flipped bit is caught when it breaks the
        pickle or what it records about the shards, not always (a chunk's size, a dtype); the
        sealed copy always is. Seeded offsets, each verdict printed."""
        f = self.fmt("dcp")
        rng = random.Random(f"{SEED}/dcp/.metadata")
        size = (f.path / ".metadata").stat().st_size
        for i in range(3):
            at, bit = rng.randrange(size), rng.randrange(8)
            case = f"dcp: .metadata bit {bit} at offset {at} flipped (seed {SEED}, #{i})"
            with self.subTest(case=case):
                s = self.scratch(f)
                flip(s.path / ".metadata", at, bit)
                good, out = self.validate(s.path)
                print(f"formats: {case}, unsealed: {'good (no checksum)' if good else out}", file=sys.stderr)
                s = self.scratch(f, sealed=True)
                flip(s.path / ".metadata", at, bit)
                self.assertBadNaming(s.path, ".metadata", ["contents changed"], offset=False, case=case + ", sealed")

    def test_dcp_async_killed_is_never_good(self):
        self.fmt("dcp_async_killed")
        for stage, left in (("shard", "__0_0.distcp"), ("metadata", ".metadata.tmp")):
            path = self.tmp / "templates" / f"killed_{stage}"
            self.assertTrue((path / left).exists(), f"async_save killed at the {stage} should leave {left}")
            for level in LEVELS:
                with self.subTest(stage=stage, level=level):
                    good, out = self.validate(path, level)
                    self.assertFalse(good, f"SIGKILLed during the {stage}: {out}")
                    self.assertIn("'.metadata'", out)
                    print(f"formats: dcp_async SIGKILLed at the {stage}, {level}: {out}", file=sys.stderr)

    def test_safetensors_name_bit_flip(self):
        # A renamed tensor leaves a valid file: no rule of the format can see it (the honest
        # limit), the manifest can.
        f = self.fmt("safetensors")
        for sealed in (False, True):
            s = self.scratch(f, sealed)
            rel, at, _ = s.name_flip()
            flip(s.path, at)
            case = f"safetensors: tensor name bit flip at offset {at}{' (sealed)' if sealed else ''}"
            if sealed:
                self.assertBadNaming(s.path, rel, offset=False, case=case)
            else:
                print(f"formats: {case}: {self.assertGood(s.path)} (no checksum: expected)", file=sys.stderr)

    def test_safetensors_sharded_name_bit_flip(self):
        # In a sharded set the index names every tensor's shard: a renamed one is caught.
        f = self.fmt("safetensors_sharded")
        s = self.scratch(f)
        rel, at, _ = s.name_flip()
        _, _, header = safetensors_header(s.path / rel)
        tensor = first_tensor(header)
        flip(s.path / rel, at)
        self.assertBadNaming(s.path, rel, ["model.safetensors.index.json", f"'{tensor}'"], offset=False,
                             case=f"safetensors_sharded: name of '{tensor}' in {rel} flipped at offset {at}")

    def test_safetensors_sharded_index_missing(self):
        # transformers writes model.safetensors.index.json after the shards; without it the
        # set cannot be loaded (nothing says which tensor is where), and a shard may be missing.
        f = self.fmt("safetensors_sharded")
        s = self.scratch(f)
        (s.path / "model.safetensors.index.json").unlink()
        self.assertBadNaming(s.path, "model.safetensors.index.json", offset=False,
                             case="safetensors_sharded: index missing")


def _add(name, check, *args):
    def test(self):
        getattr(self, check)(*args)
    test.__name__ = f"test_{name}"
    setattr(FormatsTest, test.__name__, test)


for _f in FORMATS:
    _add(f"{_f.name}_good_at_every_level", "check_good_at_every_level", _f.name)
    _add(f"{_f.name}_truncated", "check_truncations", _f.name)
    _add(f"{_f.name}_data_bit_flip", "check_flip", _f.name, "data_flip")
    _add(f"{_f.name}_metadata_bit_flip", "check_flip", _f.name, "meta_flip")
    if _f.shards or _f.name.startswith("dcp"):
        _add(f"{_f.name}_missing_shard", "check_missing_shards", _f.name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
