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

// Whole-text match of `glob`, where `*` is any run of characters (a name has no '/').
bool GlobMatch(std::string_view glob, std::string_view text) {
  std::size_t g = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (g < glob.size() && glob[g] == '*') {
      star = g++;
      resume = t;
    } else if (g < glob.size() && glob[g] == text[t]) {
      ++g, ++t;
    } else if (star != std::string_view::npos) {
      g = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

// The step written in `digits`; nullopt past 2^64.
std::optional<std::uint64_t> StepOf(std::string_view digits) {
  std::uint64_t step = 0;
  for (char c : digits) {
    const std::uint64_t next = step * 10 + static_cast<std::uint64_t>(c - '0');
    if (next / 10 != step) return std::nullopt;  // overflow: not a step we can order
    step = next;
  }
  return step;
}

bool IsDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// A pattern without {step}: the one name a trainer saves over in place.
Status CheckFixedName(std::string_view pattern) {
  const std::string text(pattern);
  if (pattern.empty()) return Error{"pattern is empty: give a name such as 'ckpt.pt' or 'checkpoint-{step}'"};
  if (pattern == "." || pattern == "..") return Error{"pattern '" + text + "' is not a name"};
  if (pattern.find('*') != std::string_view::npos) {
    return Error{"pattern '" + text + "' has '*' but no {step}: a name without {step} names one file or directory"};
  }
  if (IsTempName(pattern)) return Error{"pattern '" + text + "' is a temp name, which is never a checkpoint"};
  return Ok{};
}
}  // namespace

Result<NamePattern> NamePattern::Parse(std::string_view pattern) {
  if (pattern.find('/') != std::string_view::npos) {
    return Error{"pattern '" + std::string(pattern) + "' must be a name, without '/'"};
  }
  const auto at = pattern.find(kStep);
  if (at == std::string_view::npos) {
    if (auto st = CheckFixedName(pattern); !st) return st.error();
    NamePattern p;
    p.prefix_ = std::string(pattern);
    p.prefix_and_suffix_text_ = std::string(pattern);
    p.fixed_ = true;
    return p;
  }
  if (pattern.find(kStep, at + 1) != std::string_view::npos) {
    return Error{"pattern '" + std::string(pattern) + "' has {step} more than once"};
  }
  NamePattern p;
  p.prefix_ = std::string(pattern.substr(0, at));
  p.suffix_ = std::string(pattern.substr(at + kStep.size()));
  p.prefix_and_suffix_text_ = std::string(pattern);
  return p;
}

std::optional<std::uint64_t> NamePattern::Match(std::string_view name) const {
  if (IsTempName(name)) return std::nullopt;
  if (fixed_) return name == prefix_ ? std::optional<std::uint64_t>(0) : std::nullopt;
  // The leftmost place where the text before matches the prefix and a run of digits follows
  // whose rest matches the suffix; the longest such run (`*{step}` on "a12" is step 12).
  for (std::size_t at = 0; at < name.size(); ++at) {
    if (!IsDigit(name[at]) || !GlobMatch(prefix_, name.substr(0, at))) continue;
    std::size_t end = at;
    while (end < name.size() && IsDigit(name[end])) ++end;
    for (; end > at; --end) {
      if (GlobMatch(suffix_, name.substr(end))) return StepOf(name.substr(at, end - at));
    }
  }
  return std::nullopt;
}

bool IsTempName(std::string_view name) {
  return EndsWith(name, ".tmp") || StartsWith(name, ".tmp") || StartsWith(name, "tmp-") || StartsWith(name, "tmp.") ||
         name.find(".orbax-checkpoint-tmp") != std::string_view::npos || EndsWith(name, ".partial") ||
         EndsWith(name, ".incomplete") || StartsWith(name, ".spotvisor-");
}

}  // namespace spotvisor::config
