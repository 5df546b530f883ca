// Placeholder substitution for argv templates; see templates.hpp.
#include "spotvisor/config/templates.hpp"

namespace spotvisor::config {
namespace {

// Walks `text`, calling `on_text` for literal runs and `on_name` for placeholders.
template <class OnText, class OnName>
Status Walk(const std::string& text, OnText on_text, OnName on_name) {
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      on_text(std::string(1, c));
      i += 2;
    } else if (c == '{') {
      const auto close = text.find('}', i);
      if (close == std::string::npos) {
        return Error{"unclosed '{' in '" + text + "' (write '{{' for a literal brace)"};
      }
      if (Status s = on_name(text.substr(i + 1, close - i - 1)); !s) return s;
      i = close + 1;
    } else {
      on_text(std::string(1, c));
      ++i;
    }
  }
  return Ok{};
}

}  // namespace

Result<std::string> ExpandTemplate(const std::string& text, const TemplateVars& vars) {
  std::string out;
  Status s = Walk(
      text, [&](const std::string& literal) { out += literal; },
      [&](const std::string& name) -> Status {
        const auto it = vars.find(name);
        if (it == vars.end()) return Error{"unknown placeholder {" + name + "} in '" + text + "'"};
        out += it->second;
        return Ok{};
      });
  if (!s) return s.error();
  return out;
}

Result<std::set<std::string>> TemplateNames(const std::string& text) {
  std::set<std::string> names;
  Status s = Walk(
      text, [](const std::string&) {},
      [&](const std::string& name) -> Status {
        names.insert(name);
        return Ok{};
      });
  if (!s) return s.error();
  return names;
}

Result<std::vector<std::string>> ExpandArgv(const std::vector<std::string>& argv, const TemplateVars& vars) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  for (const auto& arg : argv) {
    auto expanded = ExpandTemplate(arg, vars);
    if (!expanded) return expanded.error();
    out.push_back(std::move(expanded.value()));
  }
  return out;
}

}  // namespace spotvisor::config
