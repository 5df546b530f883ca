// What a torch.save file says in its pickles. The legacy (pre-1.6) format is five pickles
// and then every storage they name, back to back: each pickle must parse, each storage be
// there in full with the element count its header states, and nothing follow. A ZIP-format
// file's object is its data.pkl (tensors as calls, storages as persistent ids). Sources:
// torch/serialization.py (_legacy_save, _save) and torch/csrc/StorageMethods.cpp
// (writeFileRaw: an int64 element count, then the bytes). Pure over a ByteSource.
#pragma once

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/pickle.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

// A whole legacy torch.save file; with `read_every_byte`, the storage bytes are read too.
Status CheckTorchLegacy(const ByteSource& source, bool read_every_byte, HashPool* pool);

// The object in a torch.save archive (after CheckZipLayout): its data.pkl, read.
Result<PickleTree> ReadTorchObject(const ByteSource& source, const ZipArchive& archive);

// The object of the torch.save file at `path`, legacy or ZIP.
Result<PickleTree> ReadTorchFile(const std::filesystem::path& path);

}  // namespace spotvisor::checkpoint
