// Sharded weights as transformers' save_pretrained writes them: shards
// `<p>-0000K-of-0000N.safetensors` (or `.bin`), then the index `<p>.safetensors.index.json`
// whose weight_map names each tensor's shard. Complete when the index is there for every
// series of shards, every shard of a series and every shard the index names exists, and
// (safetensors, format level and deeper) every weight_map entry is a tensor in the header of
// the shard it names and every tensor of a shard is in the weight_map. Reads only; any thread.
#pragma once

#include <filesystem>
#include <set>
#include <string>

#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

// `names`: every file of the checkpoint directory `dir` ('/'-separated, relative to it).
// `read_shards`: compare the index with the safetensors shards' headers (false: names only).
// A failure names the index or shard file, the weight_map entry and the offset where one applies.
Status CheckShardedWeights(const std::filesystem::path& dir, const std::set<std::string>& names, bool read_shards);

}  // namespace spotvisor::checkpoint
