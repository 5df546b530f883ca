// Private to src/config/: the typed reads of one YAML node (string, path, integer, number,
// boolean, duration, signal, list, enum, regex) and the walk of a mapping against a table of
// known keys. A bad value throws a ConfigError naming the file, the line and the key; the
// loader turns it into an Error. One reader per document, used on one thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::config {

class NodeReader {
 public:
  // Reads one key's value; the second argument is the key's full dotted name.
  using Field = std::function<void(const YAML::Node&, const std::string&)>;

  // Fills `job` (key_lines; relative paths start at job.base_dir); `origin` names the file.
  NodeReader(JobConfig& job, std::string origin) : job_(job), origin_(std::move(origin)) {}

  // Throws the message "file:line: key: what" (an empty value says so).
  [[noreturn]] void Fail(const YAML::Node& n, const std::string& key, const std::string& what);

  // Walks the mapping at `path`, handing each key to its field; an unknown key is an error
  // with a suggestion. A null node (a section with nothing under it) is all defaults.
  void Map(const YAML::Node& node, const std::string& path, const std::map<std::string, Field>& fields);

  std::string Scalar(const YAML::Node& n, const std::string& key, const char* expected);
  std::string String(const YAML::Node& n, const std::string& key) { return Scalar(n, key, "a string"); }
  // Absolute and lexically normal; relative paths start at job.base_dir.
  std::filesystem::path Path(const YAML::Node& n, const std::string& key);
  long long Integer(const YAML::Node& n, const std::string& key, long long lo, long long hi);
  int Int(const YAML::Node& n, const std::string& key, int lo = 0, int hi = 1000000) {
    return static_cast<int>(Integer(n, key, lo, hi));
  }
  double Number(const YAML::Node& n, const std::string& key, double lo, double hi);
  bool Bool(const YAML::Node& n, const std::string& key);
  Duration Dur(const YAML::Node& n, const std::string& key);
  int Signal(const YAML::Node& n, const std::string& key);
  std::vector<std::string> StringList(const YAML::Node& n, const std::string& key);
  // An ECMAScript regular expression (std::regex), compiled once here so a bad one is a
  // config error that names the line, not a failure mid-run.
  std::string Regex(const YAML::Node& n, const std::string& key);

  template <class E>
  E Enum(const YAML::Node& n, const std::string& key, const std::vector<std::pair<std::string, E>>& values) {
    const std::string s = Scalar(n, key, "one of the listed words");
    std::string names;
    for (const auto& [name, value] : values) {
      if (s == name) return value;
      names += (names.empty() ? "" : " | ") + name;
    }
    Fail(n, key, "'" + s + "' is not one of " + names);
  }

 protected:
  JobConfig& job_;  // what we fill

 private:
  std::string Where(const YAML::Node& n) const;
  static std::string Suggest(const std::string& key, const std::map<std::string, Field>& fields);

  std::string origin_;  // the file name as shown in messages
  int value_line_ = 0;  // line of the key being read (for a value that has none)
};

}  // namespace spotvisor::config
