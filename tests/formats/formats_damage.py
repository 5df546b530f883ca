"""The formats of tests/formats/test_formats.py, and where to damage each: every class writes
one checkpoint with the real library (writers.py) and says which file, offset and words a
truncation, a flipped data bit, a flipped metadata bit or a lost shard must be reported with."""

import io
import json
import struct
import zipfile
from pathlib import Path

import writers

# --- damage ----------------------------------------------------------------------------------

def flip(path, offset, bit=0):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


def zip_entry_data(blob, start, end, suffix):
    """(name, data offset, size) of the first entry named *`suffix` of the archive(s) in
    blob[start:end], found through its central directory like any ZIP reader."""
    with zipfile.ZipFile(io.BytesIO(blob[start:end])) as z:
        for info in z.infolist():
            if info.filename.endswith(suffix):
                h = start + info.header_offset
                name_len, extra_len = struct.unpack_from("<HH", blob, h + 26)
                return info.filename, h + 30 + name_len + extra_len, info.file_size
    raise AssertionError(f"no ZIP entry *{suffix} in bytes {start}..{end}")


def safetensors_header(path):
    blob = Path(path).read_bytes()
    n = struct.unpack_from("<Q", blob)[0]
    return blob, n, json.loads(blob[8:8 + n])


def first_tensor(header):
    return min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


# --- the formats -----------------------------------------------------------------------------
# Each returns where to damage it: (file relative to the checkpoint, offset, words the reason
# must contain besides the file name).

class Format:
    name = ""
    shards = ()  # files whose loss must be named (relative)
    data_checksum = True  # a data flip is caught without a manifest

    def __init__(self, path):
        self.path = Path(path)

    def files(self):
        if self.path.is_file():
            return [self.path.name]
        return sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file())

    def file(self, rel):
        return self.path.parent / rel if self.path.is_file() else self.path / rel


class TorchSave(Format):
    name = "torch_save"

    def _flip(self, suffix):
        blob = self.path.read_bytes()
        entry, at, size = zip_entry_data(blob, 0, len(blob), suffix)
        return self.path.name, at + size // 2, [f"entry '{entry}'", "CRC-32 mismatch"]

    def data_flip(self):
        return self._flip("/data/0")

    def meta_flip(self):  # the pickle that says what every tensor is
        return self._flip("/data.pkl")


class Dcp(Format):
    name = "dcp"

    def __init__(self, path):
        super().__init__(path)
        md = writers.read_dcp_metadata(path)
        self.items = sorted(((v.relative_path, v.offset, v.length, k.fqn,
                              type(md.state_dict_metadata[k.fqn]).__name__) for k, v in md.storage_data.items()))
        self.shards = sorted({i[0] for i in self.items})

    def tensor_item(self):
        # The last tensor item of the last shard: a rank other than the coordinator where there is one.
        return [i for i in self.items if i[0] == self.shards[-1] and i[4] == "TensorStorageMetadata"][-1]

    def _item_flip(self, suffix):
        shard, offset, length, fqn, _ = self.tensor_item()
        blob = (self.path / shard).read_bytes()
        entry, at, size = zip_entry_data(blob, offset, offset + length, suffix)
        return shard, at + size // 2, [f"item '{fqn}'", "CRC-32 mismatch"]

    def data_flip(self):
        return self._item_flip("/data/0")

    def meta_flip(self):  # the item's own pickle (CRC-checked); .metadata: see test_dcp_metadata_pickle_flip
        return self._item_flip("/data.pkl")


class DcpAsync(Dcp):
    name = "dcp_async"


class DcpSafetensors(Dcp):
    """SerializationFormat.SAFETENSORS: each rank's tensors are one safetensors blob (no
    checksum) after its BYTE_IO items; every tensor item records the blob's start."""
    name = "dcp_safetensors"
    data_checksum = False

    def _blob(self):
        shard, offset, length, fqn, _ = self.tensor_item()
        blob = (self.path / shard).read_bytes()
        n = struct.unpack_from("<Q", blob, offset)[0]
        return shard, offset, n, blob[offset + 8:offset + 8 + n].decode(), fqn

    def data_flip(self):
        shard, offset, n, header, fqn = self._blob()
        begin, end = json.loads(header)[fqn]["data_offsets"]
        return shard, offset + 8 + n + (begin + end) // 2, []

    def meta_flip(self):  # the last digit of the item's end offset in the blob's header
        shard, offset, n, header, fqn = self._blob()
        at = header.index("]", header.index('"data_offsets"', header.index(json.dumps(fqn)))) - 1
        return shard, offset + 8 + at, [f"'{fqn}'"]


class Safetensors(Format):
    name = "safetensors"
    data_checksum = False  # safetensors has no checksum

    def target(self):
        return self.path

    def data_flip(self):
        p = self.target()
        blob, n, header = safetensors_header(p)
        begin, end = header[first_tensor(header)]["data_offsets"]
        return p.name, 8 + n + (begin + end) // 2, []

    def meta_flip(self):
        """The last digit of the first tensor's end offset: its extent no longer fits."""
        p = self.target()
        blob, n, header = safetensors_header(p)
        name = first_tensor(header)
        text = blob[8:8 + n].decode()
        at = text.index("]", text.index('"data_offsets"', text.index(json.dumps(name)))) - 1
        return p.name, 8 + at, [f"tensor '{name}'"]

    def name_flip(self):
        """The last letter of the first tensor's name: still a valid header."""
        p = self.target()
        blob, n, header = safetensors_header(p)
        name = first_tensor(header)
        return p.name, 8 + blob[8:8 + n].decode().index(json.dumps(name)) + len(name), []


class SafetensorsSharded(Safetensors):
    name = "safetensors_sharded"

    def __init__(self, path):
        super().__init__(path)
        self.shards = sorted(p.name for p in self.path.glob("model-*.safetensors"))

    def target(self):
        return self.path / self.shards[-1]


FORMATS = [TorchSave, Dcp, DcpAsync, DcpSafetensors, Safetensors, SafetensorsSharded]
