// `{name}` templates in commands, resume arguments and hooks, substituted per argument
// (never through a shell, so a checkpoint name can never inject a command). `{{` and `}}`
// stand for literal braces. Pure, any thread.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::config {

using TemplateVars = std::map<std::string, std::string>;

// The placeholders a hook's argv may use (hooks/hook_runner.hpp says what each holds): the
// loader refuses others, and a hook gets every one, empty where it has no value.
inline const std::set<std::string> kHookTemplates{
    "job",       "attempt", "checkpoint_dir", "result_file", "checkpoint", "step",
    "state_dir", "report",  "exit_code",      "hook",        "provider",   "notice_kind",
    "node_rank", "nnodes",  "master_addr",    "master_port", "epoch"};

// Every `{name}` in `text` must be in `vars`; the error names the placeholder.
Result<std::string> ExpandTemplate(const std::string& text, const TemplateVars& vars);

// The placeholder names `text` uses; an Error for an unclosed `{`.
Result<std::set<std::string>> TemplateNames(const std::string& text);

// Expands each argument of `argv`.
Result<std::vector<std::string>> ExpandArgv(const std::vector<std::string>& argv, const TemplateVars& vars);

}  // namespace spotvisor::config
