// Framework layouts; see framework_layout.hpp. The save orders, from each framework's source:
// - transformers/trainer.py Trainer._save_checkpoint: save_model (weights, config.json,
//   training_args.bin), _save_optimizer_and_scheduler (optimizer.pt, scheduler.pt),
//   _save_rng_state (rng_state*.pth), then state.save_to_json(trainer_state.json) last.
// - deepspeed/runtime/engine.py DeepSpeedEngine.save_checkpoint: _save_checkpoint
//   ([zero_pp_rank_D_]mp_rank_MM_model_states.pt, holding dp_world_size and mp_world_size),
//   _save_zero_checkpoint ([bf16_]zero_pp_rank_D_mp_rank_MM_optim_states.pt on every data
//   parallel rank), then rank 0 writes `latest` (the tag) in the save directory.
// - megatron/training/checkpointing.py save_checkpoint: every rank writes
//   iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt (args holds the parallel sizes), a
//   barrier, then rank 0 writes latest_checkpointed_iteration.txt in the save directory.
// - accelerate/checkpointing.py save_accelerator_state, called by Accelerator.save_state: the
//   main process writes the models (model[_i].safetensors or pytorch_model[_i].bin), the
//   optimizers (optimizer[_i].bin), schedulers, samplers and scaler, then every process its
//   random_states_<process index>.pkl; custom objects (custom_checkpoint_<i>.pkl) follow.
#include "framework_layout.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "spotvisor/checkpoint/safetensors_check.hpp"
#include "spotvisor/checkpoint/safetensors_index.hpp"
#include "spotvisor/checkpoint/torch_pickles.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;

// The number in `name` after `prefix` when the rest is all digits.
std::optional<std::uint64_t> NumberAfter(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix) || name.size() == prefix.size() || name.size() - prefix.size() > 18)
    return std::nullopt;
  std::uint64_t v = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

std::optional<nlohmann::json> ReadJson(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() > (64u << 20) || JsonNestingDepth(text) > 256) return std::nullopt;
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> ReadSmallText(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > 4096) return std::nullopt;
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

// `v` with leading zeros to `width` digits, as the frameworks name their ranks.
std::string ZeroPadded(std::uint64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llu", width, static_cast<unsigned long long>(v));
  return buf;
}

struct Names {
  std::set<std::string> all;
  bool Has(const std::string& rel) const { return all.count(rel) > 0; }
  bool Any(auto pred) const { return std::any_of(all.begin(), all.end(), pred); }
};

// Every process's share <prefix><i><suffix> of a checkpoint, each i below `processes` (0:
// unknown) and below the highest one present. More shares than processes is a save by a
// bigger world, which loads (each process reads its own).
Status CheckShares(const fs::path& dir, const std::set<std::uint64_t>& have, int processes, const std::string& prefix,
                   const std::string& suffix) {
  const auto file = [&](std::uint64_t i) { return prefix + std::to_string(i) + suffix; };
  const std::uint64_t highest = have.empty() ? 0 : *have.rbegin() + 1;
  const std::uint64_t want = std::max<std::uint64_t>(highest, processes > 0 ? processes : 0);
  for (std::uint64_t r = 0; r < want; ++r) {
    if (have.count(r)) continue;
    if (r + 1 < highest) {
      return Error{dir.string() + ": " + file(r) + " is missing but " + file(highest - 1) + " is there: process " +
                   std::to_string(r) + " did not finish its save"};
    }
    return Error{dir.string() + ": " + file(r) + " is missing: the job runs " + std::to_string(processes) +
                 " processes (checkpoints.processes) and each writes its own; process " + std::to_string(r) +
                 " did not finish its save"};
  }
  return Ok{};
}

// --- Hugging Face Trainer ------------------------------------------------------------

bool IsHfWeights(const std::string& n) {
  return n == "pytorch_model.bin" || n == "model.safetensors" || n == "adapter_model.bin" ||
         n == "adapter_model.safetensors" || n.ends_with(".bin.index.json") || n.ends_with(".safetensors.index.json") ||
         (n.starts_with("pytorch_model-") && n.ends_with(".bin")) ||
         (n.starts_with("model-") && n.ends_with(".safetensors"));
}

bool LooksLikeHf(const fs::path& dir, const Names& names) {
  if (names.Has("trainer_state.json") || names.Has("training_args.bin")) return true;
  // checkpoint-N/ with a model the Trainer's save_model wrote, killed before the rest.
  return NumberAfter(dir.filename().string(), "checkpoint-") &&
         (names.Has("config.json") || names.Any([](const std::string& n) { return IsHfWeights(n); }));
}

Status CheckHf(const fs::path& dir, const Names& names, int processes) {
  if (!names.Has("trainer_state.json")) {
    return Error{dir.string() +
                 ": Hugging Face Trainer checkpoint without trainer_state.json: the save did not "
                 "finish (the Trainer writes it last, after the model, optimizer, scheduler and RNG state)"};
  }
  // Each process writes its rng_state_<process index>.pth (one process: rng_state.pth), and
  // the main process trainer_state.json, with no barrier between them.
  std::set<std::uint64_t> ranks;
  for (const auto& n : names.all) {
    if (n.ends_with(".pth")) {
      if (auto r = NumberAfter(std::string_view(n).substr(0, n.size() - 4), "rng_state_")) ranks.insert(*r);
    }
  }
  if (!ranks.empty()) {
    if (auto st = CheckShares(dir, ranks, processes, "rng_state_", ".pth"); !st) return st;
  }
  auto state = ReadJson(dir / "trainer_state.json");
  if (!state || !state->is_object())
    return Error{(dir / "trainer_state.json").string() + ": not a JSON object (cut short?)"};
  const auto step = NumberAfter(dir.filename().string(), "checkpoint-");
  if (step && state->contains("global_step") && (*state)["global_step"].is_number_integer() &&
      (*state)["global_step"].get<std::int64_t>() != static_cast<std::int64_t>(*step)) {
    return Error{(dir / "trainer_state.json").string() + ": global_step " +
                 std::to_string((*state)["global_step"].get<std::int64_t>()) + " in a directory named for step " +
                 std::to_string(*step) + " (the state of another checkpoint)"};
  }
  return Ok{};
}

// --- accelerate's save_state ----------------------------------------------------------

// random_states_<i>.pkl: the process index, else none.
std::optional<std::uint64_t> RngStateRank(const std::string& n) {
  if (!n.ends_with(".pkl")) return std::nullopt;
  return NumberAfter(std::string_view(n).substr(0, n.size() - 4), "random_states_");
}

bool IsAccelerateModel(const std::string& n) {
  for (const char* base : {"model", "pytorch_model"}) {
    const std::string b(base);
    if (n == b + ".safetensors" || n == b + ".bin") return true;
    const auto dot = n.rfind('.');
    if (dot != std::string::npos && NumberAfter(std::string_view(n).substr(0, dot), b + "_") &&
        (n.ends_with(".safetensors") || n.ends_with(".bin")))
      return true;
  }
  return false;
}

// By its files, or by the name ProjectConfiguration(automatic_checkpoint_naming=True) gives it
// (checkpoints/checkpoint_<i>) with the model written first and nothing else yet. A directory
// of another name holding only a model is a model: `format: accelerate` judges it as a save.
bool LooksLikeAccelerate(const fs::path& dir, const Names& names) {
  const bool model = names.Any([](const std::string& n) { return IsAccelerateModel(n); });
  return names.Any([](const std::string& n) { return RngStateRank(n).has_value(); }) ||
         (model && names.Has("optimizer.bin")) ||
         (model && NumberAfter(dir.filename().string(), "checkpoint_") &&
          dir.parent_path().filename() == "checkpoints");
}

// The main process writes random_states_0.pkl after everything else of its own, each other
// process its own file: process 0's file, and every share below `processes` (the job's
// count, when known) or below the highest one seen. The directory records no count: a save
// cut short on the last processes alone is what only the count (or a manifest) can tell.
Status CheckAccelerate(const fs::path& dir, const Names& names, int processes) {
  std::set<std::uint64_t> ranks;
  for (const auto& n : names.all) {
    if (auto r = RngStateRank(n)) ranks.insert(*r);
  }
  if (!ranks.count(0)) {
    return Error{dir.string() +
                 ": accelerate save_state directory without random_states_0.pkl: the save did not finish "
                 "(the main process writes it last, after the models, optimizers and schedulers)"};
  }
  if (auto st = CheckShares(dir, ranks, processes, "random_states_", ".pkl"); !st) return st;
  if (!names.Any([](const std::string& n) { return IsAccelerateModel(n); }) &&
      !names.Any([](const std::string& n) { return n.ends_with(".index.json"); })) {
    return Error{dir.string() +
                 ": accelerate save_state directory without model weights (model.safetensors or "
                 "pytorch_model.bin)"};
  }
  return Ok{};
}

// --- DeepSpeed and Megatron: the marker beside the directory --------------------------

// Committed when the marker beside `dir` names it, or a later step of the same series.
Status CheckMarkerBeside(const fs::path& dir, const std::string& marker, const std::string& framework,
                         std::string_view step_prefix, bool marker_is_number) {
  const fs::path file = dir.parent_path() / marker;
  const auto text = ReadSmallText(file);
  const std::string name = dir.filename().string();
  if (!text) {
    return Error{dir.string() + ": no " + framework + " '" + marker + "' beside it (" + file.string() + "), which " +
                 framework + " writes at the end of its save: the save did not finish"};
  }
  const auto mine = NumberAfter(name, step_prefix);
  const auto named = marker_is_number ? NumberAfter(*text, "") : NumberAfter(*text, step_prefix);
  if (*text == name || (mine && named && *named >= *mine)) return Ok{};
  return Error{dir.string() + ": " + framework + "'s '" + marker + "' names " +
               (text->empty() ? "nothing" : "'" + *text + "'") + ", an earlier save: this one did not finish (" +
               framework + " writes " + file.string() + " at the end of its save)"};
}

Result<std::int64_t> Recorded(const PickleTree& tree, PickleTree::Ref in, const char* key, const fs::path& file) {
  const auto value = tree.Get(in, key);
  const auto v = value ? tree.Int(*value) : std::nullopt;
  if (!v || *v < 1 || *v > 65536) return Error{file.string() + ": no " + std::string(key) + " recorded in it"};
  return *v;
}

Status Require(const fs::path& dir, const Names& names, const std::string& rel, const std::string& why) {
  if (names.Has(rel)) return Ok{};
  return Error{dir.string() + ": missing " + rel + " (" + why + ")"};
}

Status CheckDeepSpeed(const fs::path& dir, const Names& names) {
  const bool zero3 = names.Has("zero_pp_rank_0_mp_rank_00_model_states.pt");
  const std::string first = zero3 ? "zero_pp_rank_0_mp_rank_00_model_states.pt" : "mp_rank_00_model_states.pt";
  if (!names.Has(first)) return Error{dir.string() + ": missing " + first + " (DeepSpeed's rank 0 writes it first)"};
  auto tree = ReadTorchFile(dir / first);
  if (!tree) return Error{tree.error().message + " (reading the world size DeepSpeed recorded)"};
  auto dp = Recorded(*tree, tree->root(), "dp_world_size", dir / first);
  if (!dp) return dp.error();
  auto mp = Recorded(*tree, tree->root(), "mp_world_size", dir / first);
  if (!mp) return mp.error();
  const std::string sizes =
      "dp_world_size " + std::to_string(*dp) + " and mp_world_size " + std::to_string(*mp) + " recorded in " + first;
  const bool zero = names.Any([](const std::string& n) { return n.ends_with("_optim_states.pt"); });
  const bool bf16 = names.Any([](const std::string& n) { return n.starts_with("bf16_zero_pp_rank_"); });
  for (std::int64_t m = 0; m < *mp; ++m) {
    const std::string mm = "mp_rank_" + ZeroPadded(static_cast<std::uint64_t>(m), 2);
    if (!zero3) {
      if (auto st = Require(dir, names, mm + "_model_states.pt", sizes); !st) return st;
    }
    for (std::int64_t d = 0; d < *dp && (zero || zero3); ++d) {
      const std::string rank = "zero_pp_rank_" + std::to_string(d) + "_" + mm;
      if (zero3) {
        if (auto st = Require(dir, names, rank + "_model_states.pt", sizes); !st) return st;
      }
      if (zero) {
        if (auto st = Require(dir, names, (bf16 ? "bf16_" : "") + rank + "_optim_states.pt", sizes); !st) return st;
      }
    }
  }
  return Ok{};
}

Status CheckMegatron(const fs::path& dir, const Names& names) {
  std::string first;
  for (const char* candidate : {"mp_rank_00/model_optim_rng.pt", "mp_rank_00_000/model_optim_rng.pt"}) {
    if (names.Has(candidate)) first = candidate;
  }
  if (first.empty())
    return Error{dir.string() + ": missing mp_rank_00/model_optim_rng.pt (Megatron's first rank writes it)"};
  auto tree = ReadTorchFile(dir / first);
  if (!tree) return Error{tree.error().message + " (reading the parallel sizes Megatron recorded)"};
  const auto args = tree->Get(tree->root(), "args");
  if (!args)
    return Error{(dir / first).string() + ": no args recorded in it (Megatron keeps the parallel sizes there)"};
  auto tp = Recorded(*tree, *args, "tensor_model_parallel_size", dir / first);
  if (!tp) return tp.error();
  auto pp = Recorded(*tree, *args, "pipeline_model_parallel_size", dir / first);
  if (!pp) return pp.error();
  const std::string sizes = "tensor_model_parallel_size " + std::to_string(*tp) + " and pipeline_model_parallel_size " +
                            std::to_string(*pp) + " recorded in " + first;
  const bool distributed_optimizer = names.Any([](const std::string& n) { return n.ends_with("/distrib_optim.pt"); });
  for (std::int64_t t = 0; t < *tp; ++t) {
    for (std::int64_t p = 0; p < *pp; ++p) {
      const std::string sub = "mp_rank_" + ZeroPadded(static_cast<std::uint64_t>(t), 2) +
                              (*pp > 1 ? "_" + ZeroPadded(static_cast<std::uint64_t>(p), 3) : "");
      if (auto st = Require(dir, names, sub + "/model_optim_rng.pt", sizes); !st) return st;
      if (distributed_optimizer) {
        if (auto st = Require(dir, names, sub + "/distrib_optim.pt", sizes); !st) return st;
      }
    }
  }
  return Ok{};
}

bool LooksLikeDeepSpeed(const Names& names) {
  return names.Any([](const std::string& n) {
    return n.find('/') == std::string::npos && (n.ends_with("_model_states.pt") || n.ends_with("_optim_states.pt")) &&
           n.find("mp_rank_") != std::string::npos;
  });
}

bool LooksLikeMegatron(const fs::path& dir, const Names& names) {
  const std::string name = dir.filename().string();
  if (name.size() == 12 && NumberAfter(name, "iter_")) return true;
  return names.Any(
      [](const std::string& n) { return n.starts_with("mp_rank_") && n.ends_with("/model_optim_rng.pt"); });
}

// --- Orbax ---------------------------------------------------

Result<bool> CheckOrbax(const fs::path& dir, const Names& names, bool forced) {
  if (!forced && !names.Has("_CHECKPOINT_METADATA") && !names.Has("commit_success.txt")) return false;
  bool committed = names.Has("commit_success.txt");
  if (!committed && names.Has("_CHECKPOINT_METADATA")) {
    auto meta = ReadJson(dir / "_CHECKPOINT_METADATA");
    committed = meta && meta->is_object() && meta->contains("commit_timestamp_nsecs") &&
                !(*meta)["commit_timestamp_nsecs"].is_null();
  }
  if (!committed) return Error{dir.string() + ": missing Orbax commit marker 'commit_success.txt'"};
  return true;
}

}  // namespace

Result<LayoutVerdict> CheckLayout(const fs::path& dir, const std::vector<CheckpointFile>& files,
                                  const ValidatorOptions& o, bool has_manifest) {
  Names names;
  for (const auto& f : files) names.all.insert(f.rel);
  const bool detect = o.format == "auto";
  LayoutVerdict v;
  if (auto st = CheckDcpLayout(dir, files, o, v); !st) return st.error();
  auto orbax = CheckOrbax(dir, names, o.format == "orbax");
  if (!orbax) return orbax.error();
  if (*orbax) v = {"commit_success.txt", "orbax", std::move(v.checked)};
  if (o.format == "hf" || (detect && LooksLikeHf(dir, names))) {
    if (auto st = CheckHf(dir, names, o.processes); !st) return st.error();
    if (v.kind.empty()) v = {"trainer_state.json", "hf", std::move(v.checked)};
  } else if (o.format == "accelerate" || (detect && LooksLikeAccelerate(dir, names))) {
    if (auto st = CheckAccelerate(dir, names, o.processes); !st) return st.error();
    if (v.kind.empty()) v = {"random_states_0.pkl", "accelerate", std::move(v.checked)};
  } else if (o.format == "deepspeed" || (detect && LooksLikeDeepSpeed(names))) {
    // What the framework writes last is the first thing a half-written save lacks.
    if (!has_manifest) {
      if (auto st = CheckMarkerBeside(dir, kMarkersBeside[0], "DeepSpeed", "global_step", false); !st)
        return st.error();
    }
    if (auto st = CheckDeepSpeed(dir, names); !st) return st.error();
    v = {has_manifest ? "" : "latest", "deepspeed", std::move(v.checked)};
  } else if (o.format == "megatron" || (detect && LooksLikeMegatron(dir, names))) {
    if (!has_manifest) {
      if (auto st = CheckMarkerBeside(dir, kMarkersBeside[1], "Megatron", "iter_", true); !st) return st.error();
    }
    if (auto st = CheckMegatron(dir, names); !st) return st.error();
    v = {has_manifest ? "" : "latest_checkpointed_iteration.txt", "megatron", std::move(v.checked)};
  }
  // Sharded weights (safetensors_index.hpp): the index last, every shard, every weight_map entry.
  if (auto st = CheckShardedWeights(dir, names.all, o.level != config::ValidateLevel::kStructure); !st)
    return st.error();
  return v;
}

}  // namespace spotvisor::checkpoint
