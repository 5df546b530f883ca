// Private to src/config/: the job file schema, one table of keys per section, each key with
// its parser. Unknown keys are errors (a typo must never silently disable a safety feature).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::config {

// Reads one parsed YAML document over `job`; `origin` names the file in messages. Throws
// ConfigError with the finished message (file:line: key: what) on the first bad key or value.
void ReadJobDocument(const YAML::Node& root, JobConfig& job, const std::string& origin);

class NodeReader;
// The `cost:` section at `path` into `cost` (schema_cost.cpp); throws as ReadJobDocument does.
void ReadCostSection(NodeReader& reader, const YAML::Node& node, const std::string& path, CostSection& cost);

}  // namespace spotvisor::config
