// Checkpoint names: the job's `pattern` ("ckpt_step{step}", "step_{step}.pt", Lightning's
// "epoch=*-step={step}.ckpt") matched against a whole directory entry name, or a fixed name
// without {step} ("ckpt.pt": one file or directory the trainer saves over in place), and
// the temp names that never count as a checkpoint. Pure, any thread. It lives with the config because the schema
// refuses a bad pattern at load time; the catalog and the mirrors match names with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor::config {

class NamePattern {
 public:
  // `pattern` contains `{step}` once, `*` anywhere else standing for any run of characters
  // (none included); or it is a fixed name: no `{step}`, no `*`, not a temp name.
  static Result<NamePattern> Parse(std::string_view pattern);

  // The step when `name` matches the whole pattern ({step} = one or more digits, leading
  // zeros allowed); nullopt otherwise, and always for temp names. Where `*` makes more than
  // one reading possible, {step} is the leftmost run of digits that fits, taken whole. A
  // fixed name matches itself only, with step 0 (the catalog numbers its versions).
  std::optional<std::uint64_t> Match(std::string_view name) const;

  // No {step}: one entry saved over in place, whose versions spotvisor keeps itself.
  bool fixed() const { return fixed_; }
  const std::string& text() const { return prefix_and_suffix_text_; }

 private:
  std::string prefix_;                  // what comes before {step}; a fixed name: all of it
  std::string suffix_;                  // what comes after {step}
  std::string prefix_and_suffix_text_;  // the pattern as written
  bool fixed_ = false;                  // no {step}
};

// Names that writers use while a checkpoint is incomplete: `*.tmp`, `.tmp*`, `tmp-*`,
// `*.orbax-checkpoint-tmp*`, `*.partial`, `*.incomplete`, and our own `.spotvisor-*`.
bool IsTempName(std::string_view name);

}  // namespace spotvisor::config
