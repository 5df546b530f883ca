// Whole-name matching of checkpoint patterns; see name_pattern.hpp.
#include "spotvisor/config/name_pattern.hpp"

#include <cctype>

namespace spotvisor::config {
namespace {
constexpr std::string_view kStep = "{step}";

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}
bool StartsWith(std::string_view s, std::string_view head) { return s.substr(0, head.size()) == head; }
}  // namespace

Result<NamePattern> NamePattern::Parse(std::string_view pattern) {
  const auto at = pattern.find(kStep);
  if (at == std::string_view::npos) {
    return Error{"pattern '" + std::string(pattern) + "' has no {step} placeholder"};
  }
  if (pattern.find(kStep, at + 1) != std::string_view::npos) {
    return Error{"pattern '" + std::string(pattern) + "' has {step} more than once"};
  }
  if (pattern.find('/') != std::string_view::npos) {
    return Error{"pattern '" + std::string(pattern) + "' must be a name, without '/'"};
  }
  NamePattern p;
  p.prefix_ = std::string(pattern.substr(0, at));
  p.suffix_ = std::string(pattern.substr(at + kStep.size()));
  p.prefix_and_suffix_text_ = std::string(pattern);
  return p;
}

std::optional<std::uint64_t> NamePattern::Match(std::string_view name) const {
  if (IsTempName(name)) return std::nullopt;
  if (name.size() <= prefix_.size() + suffix_.size()) return std::nullopt;
  if (!StartsWith(name, prefix_) || !EndsWith(name, suffix_)) return std::nullopt;
  const std::string_view digits = name.substr(prefix_.size(), name.size() - prefix_.size() - suffix_.size());
  std::uint64_t step = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    const std::uint64_t next = step * 10 + static_cast<std::uint64_t>(c - '0');
    if (next / 10 != step) return std::nullopt;  // overflow: not a step we can order
    step = next;
  }
  return step;
}

bool IsTempName(std::string_view name) {
  return EndsWith(name, ".tmp") || StartsWith(name, ".tmp") || StartsWith(name, "tmp-") || StartsWith(name, "tmp.") ||
         name.find(".orbax-checkpoint-tmp") != std::string_view::npos || EndsWith(name, ".partial") ||
         EndsWith(name, ".incomplete") || StartsWith(name, ".spotvisor-");
}

}  // namespace spotvisor::config
