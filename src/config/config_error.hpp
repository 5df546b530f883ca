// Private to src/config/: carries a finished user message from deep inside the schema
// walk to the module boundary, where it becomes an Error. Never escapes the module.
#pragma once

#include <stdexcept>
#include <string>

namespace spotvisor::config {

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace spotvisor::config
