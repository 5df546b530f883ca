// Loading a job file: the size and nesting limits that keep a hostile file from exhausting
// memory or stack, the YAML parse, then the schema walk (schema.cpp). Every failure becomes
// an Error naming the file and the line. Pure apart from reading the file; any thread.
#include "spotvisor/config/loader.hpp"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "config_error.hpp"
#include "schema.hpp"

namespace spotvisor::config {

JobConfig DefaultConfig(const std::filesystem::path& base_dir) {
  JobConfig job;
  job.base_dir = base_dir;
  return job;
}

namespace {

// yaml-cpp recurses once per nesting level, so a broken or hostile file ("[[[[..." or
// "- - - - ...") must be refused before it parses, not overflow the stack. A conservative
// estimate per line: open indentation levels + leading "- "/"? " indicators + flow depth.
constexpr std::size_t kMaxNesting = 64;

std::optional<int> TooDeep(std::string_view text) {
  std::vector<std::size_t> indents;  // indentation of the open block levels
  std::size_t flow = 0;              // open [ and {
  int line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    std::size_t i = line.find_first_not_of(' ');
    if (i == std::string_view::npos || line[i] == '#') continue;
    if (flow == 0) {
      while (!indents.empty() && indents.back() >= i) indents.pop_back();
      indents.push_back(i);
    }
    std::size_t indicators = 0;
    while (i + 1 < line.size() && (line[i] == '-' || line[i] == '?') && line[i + 1] == ' ') {
      ++indicators;
      i = line.find_first_not_of(' ', i + 1);
      if (i == std::string_view::npos) i = line.size();
    }
    char quote = 0;
    for (std::size_t k = i; k < line.size(); ++k) {
      const char c = line[k];
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '#' && k > 0 && line[k - 1] == ' ') {
        break;
      } else if (c == '[' || c == '{') {
        ++flow;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
      if (indents.size() + indicators + flow > kMaxNesting) return line_no;
    }
    if (indents.size() + indicators + flow > kMaxNesting) return line_no;
  }
  return std::nullopt;
}

}  // namespace

Result<JobConfig> LoadJobText(const std::string& yaml, const std::filesystem::path& origin,
                              const std::filesystem::path& base_dir) {
  JobConfig job = DefaultConfig(base_dir);
  job.source_file = origin;
  if (const auto line = TooDeep(yaml)) {
    return Error{origin.string() + ":" + std::to_string(*line) + ": nested deeper than " + std::to_string(kMaxNesting) +
                 " levels: not a job file"};
  }
  try {
    const YAML::Node root = YAML::Load(yaml);
    ReadJobDocument(root, job, origin.string());
  } catch (const ConfigError& e) {
    return Error{e.what()};
  } catch (const YAML::Exception& e) {
    return Error{origin.string() + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg};
  }
  if (job.job.name.empty()) job.job.name = origin.stem().string();
  return job;
}

Result<JobConfig> LoadJobFile(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return Error{file.string() + ": cannot read the job file (" + std::strerror(errno) + ")"};
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (4u << 20)) return Error{file.string() + ": job file larger than 4 MiB"};
  const auto absolute = std::filesystem::absolute(file).lexically_normal();
  return LoadJobText(text.str(), file, absolute.parent_path());
}

}  // namespace spotvisor::config
