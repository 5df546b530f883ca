import json
import os
import tempfile
import unittest
import zlib
from pathlib import Path

import harness  # noqa: F401
from spotvisor_helper import MANIFEST_NAME, ManifestError, atomic_checkpoint_dir, verify_manifest
from spotvisor_helper.manifest import read_manifest


def write_checkpoint(root: Path) -> Path:
    final = root / "ckpt_step5"
    with atomic_checkpoint_dir(final) as tmp:
        (tmp / "state.pt").write_bytes(os.urandom(5000))
        (tmp / "sub").mkdir()
        (tmp / "sub" / "rank1.bin").write_bytes(b"x" * 1234)
        (tmp / "empty.txt").write_bytes(b"")
    return final


class ManifestFormatTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)
        self.ckpt = write_checkpoint(self.root)

    def tearDown(self):
        self._tmp.cleanup()

    def test_manifest_is_exactly_the_agreed_format(self):
        doc = json.loads((self.ckpt / MANIFEST_NAME).read_text())
        self.assertEqual(list(doc), ["format", "version", "algorithm", "files"])
        self.assertEqual(doc["format"], "spotvisor-manifest")
        self.assertEqual(doc["version"], 1)
        self.assertEqual(doc["algorithm"], "crc32")
        paths = [f["path"] for f in doc["files"]]
        self.assertEqual(paths, ["empty.txt", "state.pt", "sub/rank1.bin"])   # sorted, '/'
        self.assertNotIn(MANIFEST_NAME, paths)
        for entry in doc["files"]:
            self.assertEqual(sorted(entry), ["hash", "path", "size"])
            data = (self.ckpt / entry["path"]).read_bytes()
            # Recompute independently of the helper.
            self.assertEqual(entry["size"], len(data))
            self.assertEqual(entry["hash"], format(zlib.crc32(data) & 0xFFFFFFFF, "08x"))
            self.assertRegex(entry["hash"], r"^[0-9a-f]{8}$")

    def test_good_checkpoint_verifies(self):
        manifest = verify_manifest(self.ckpt)
        self.assertEqual(len(manifest.files), 3)

    def _expect_bad(self, fragment: str):
        with self.assertRaises(ManifestError) as cm:
            verify_manifest(self.ckpt)
        self.assertIn(str(self.ckpt), str(cm.exception))
        self.assertIn(fragment, str(cm.exception))

    def test_flipped_byte_is_caught_by_crc(self):
        path = self.ckpt / "state.pt"
        data = bytearray(path.read_bytes())
        data[2500] ^= 0x01
        path.write_bytes(bytes(data))
        self._expect_bad("'state.pt' has CRC-32")

    def test_truncated_file_is_caught_by_size(self):
        path = self.ckpt / "sub" / "rank1.bin"
        path.write_bytes(path.read_bytes()[:100])
        self._expect_bad("'sub/rank1.bin' is 100 bytes")

    def test_missing_and_extra_files(self):
        (self.ckpt / "empty.txt").unlink()
        self._expect_bad("'empty.txt' is missing")
        (self.ckpt / "empty.txt").write_bytes(b"")
        verify_manifest(self.ckpt)
        (self.ckpt / "stray.bin").write_bytes(b"?")
        self._expect_bad("'stray.bin' is not listed")

    def test_missing_manifest_means_uncommitted(self):
        (self.ckpt / MANIFEST_NAME).unlink()
        self._expect_bad("never committed")

    def _rewrite(self, mutate):
        path = self.ckpt / MANIFEST_NAME
        doc = json.loads(path.read_text())
        mutate(doc)
        path.write_text(json.dumps(doc))

    def test_path_traversal_and_bad_entries_are_rejected(self):
        cases = [
            (lambda d: d["files"][0].update(path="../outside"), "unsafe path"),
            (lambda d: d["files"][0].update(path="/etc/passwd"), "unsafe path"),
            (lambda d: d["files"][0].update(path="a//b"), "unsafe path"),
            (lambda d: d["files"].append(dict(d["files"][0])), "listed twice"),
            (lambda d: d["files"][0].update(hash="ABCDEF01"), "invalid crc32 hash"),
            (lambda d: d["files"][0].update(size=-1), "invalid size"),
            (lambda d: d.update(format="other"), "format is 'other'"),
            (lambda d: d.update(version=2), "unsupported version"),
            (lambda d: d.update(algorithm="md5"), "unknown algorithm"),
            (lambda d: d["files"].append({"path": MANIFEST_NAME, "size": 1, "hash": "00000000"}),
             "must not list itself"),
        ]
        original = (self.ckpt / MANIFEST_NAME).read_text()
        for mutate, fragment in cases:
            with self.subTest(fragment=fragment):
                (self.ckpt / MANIFEST_NAME).write_text(original)
                self._rewrite(mutate)
                with self.assertRaises(ManifestError) as cm:
                    read_manifest(self.ckpt)
                self.assertIn(fragment, str(cm.exception))

    def test_garbage_manifest(self):
        (self.ckpt / MANIFEST_NAME).write_bytes(b"\x00\xffnot json")
        self._expect_bad("not valid JSON")

    def test_xxh3_manifest_from_spotvisor_seal_is_checked_by_size(self):
        def to_xxh3(doc):
            doc["algorithm"] = "xxh3-128"
            for entry in doc["files"]:
                entry["hash"] = "0" * 32
        self._rewrite(to_xxh3)
        self.assertEqual(verify_manifest(self.ckpt).algorithm, "xxh3-128")
        (self.ckpt / "state.pt").write_bytes(b"short")
        self._expect_bad("'state.pt' is 5 bytes")

    def test_symlink_inside_checkpoint_is_refused(self):
        os.symlink("/etc/hostname", self.ckpt / "link")
        self._expect_bad("symlinks are not allowed")


if __name__ == "__main__":
    unittest.main()
