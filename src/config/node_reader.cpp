// The typed reads of one YAML node and the walk of a mapping against its known keys; see
// node_reader.hpp. Every failure throws a ConfigError with the finished user message.
#include "node_reader.hpp"

#include <algorithm>
#include <regex>
#include <sstream>

#include "config_error.hpp"
#include "spotvisor/config/signals.hpp"

namespace spotvisor::config {
namespace {

// Levenshtein distance, for "did you mean" on an unknown key.
std::size_t Distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void NodeReader::Fail(const YAML::Node& n, const std::string& key, const std::string& what) {
  std::string message = Where(n);
  if (!key.empty()) message.append(key).append(": ");
  // `key:` or `key: ~` never quietly means the default: say so.
  if (n.IsNull())
    message.append("has no value (nothing, or ~, after the colon); ")
        .append(what)
        .append(", or remove the line to keep the default");
  else message.append(what);
  throw ConfigError(message);
}

std::string NodeReader::Where(const YAML::Node& n) const {
  const int line = n.IsNull() ? value_line_ : n.Mark().line >= 0 ? n.Mark().line + 1 : 0;
  std::string where = origin_;
  if (line > 0) where.append(":").append(std::to_string(line));
  return where.append(": ");
}

void NodeReader::Map(const YAML::Node& node, const std::string& path, const std::map<std::string, Field>& fields) {
  if (node.IsNull()) return;  // `section:` with nothing under it: all defaults
  if (!node.IsMap()) Fail(node, path.empty() ? "document" : path, "expected a mapping of keys");
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    const std::string full = path.empty() ? key : path + "." + key;
    const auto it = fields.find(key);
    if (it == fields.end()) {
      Fail(kv.first, "", "unknown key '" + full + "'" + Suggest(key, fields));
    }
    job_.key_lines[full] = kv.first.Mark().line + 1;
    value_line_ = kv.first.Mark().line + 1;  // an empty value has no position of its own
    it->second(kv.second, full);
  }
}

std::string NodeReader::Suggest(const std::string& key, const std::map<std::string, Field>& fields) {
  std::string best;
  std::size_t best_d = 3;
  for (const auto& [name, _] : fields) {
    const auto d = Distance(key, name);
    if (d < best_d) best_d = d, best = name;
  }
  std::string known;
  for (const auto& [name, _] : fields) known += (known.empty() ? "" : ", ") + name;
  return best.empty() ? " (known keys: " + known + ")" : " (did you mean '" + best + "'?)";
}

std::string NodeReader::Scalar(const YAML::Node& n, const std::string& key, const char* expected) {
  if (!n.IsScalar()) Fail(n, key, std::string("expected ") + expected);
  return n.Scalar();
}

std::filesystem::path NodeReader::Path(const YAML::Node& n, const std::string& key) {
  const std::string s = Scalar(n, key, "a path");
  if (s.empty()) Fail(n, key, "expected a path, got an empty string");
  std::filesystem::path p(s);
  p = p.is_absolute() ? p.lexically_normal() : (job_.base_dir / p).lexically_normal();
  if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p;
}

long long NodeReader::Integer(const YAML::Node& n, const std::string& key, long long lo, long long hi) {
  const std::string s = Scalar(n, key, "an integer");
  long long v = 0;
  std::size_t used = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) Fail(n, key, "'" + s + "' is not an integer");
  if (v < lo || v > hi) {
    Fail(n, key,
         std::to_string(v) + " is out of range (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  }
  return v;
}

double NodeReader::Number(const YAML::Node& n, const std::string& key, double lo, double hi) {
  const std::string s = Scalar(n, key, "a number");
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) Fail(n, key, "'" + s + "' is not a number");
  if (v < lo || v > hi) {
    std::ostringstream range;
    range << lo << ".." << hi;
    Fail(n, key, s + " is out of range (expected " + range.str() + ")");
  }
  return v;
}

bool NodeReader::Bool(const YAML::Node& n, const std::string& key) {
  const std::string s = Scalar(n, key, "true or false");
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  Fail(n, key, "'" + s + "' is not a boolean (expected true or false)");
}

Duration NodeReader::Dur(const YAML::Node& n, const std::string& key) {
  auto d = ParseDuration(Scalar(n, key, "a duration such as 90s"));
  if (!d) Fail(n, key, d.error().message);
  return *d;
}

int NodeReader::Signal(const YAML::Node& n, const std::string& key) {
  auto s = ParseSignal(Scalar(n, key, "a signal name such as SIGTERM"));
  if (!s) Fail(n, key, s.error().message);
  return *s;
}

std::vector<std::string> NodeReader::StringList(const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence()) Fail(n, key, "expected a list of strings, e.g. [\"a\", \"b\"]");
  std::vector<std::string> out;
  for (const auto& item : n) out.push_back(Scalar(item, key, "a string in the list"));
  return out;
}

std::string NodeReader::Regex(const YAML::Node& n, const std::string& key) {
  std::string text = String(n, key);
  try {
    std::regex compiled(text, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    Fail(n, key, "not a valid regular expression (" + std::string(e.what()) + "): " + text);
  }
  return text;
}

}  // namespace spotvisor::config
