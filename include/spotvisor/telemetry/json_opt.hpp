// An optional as JSON: its value, or null.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace spotvisor::telemetry {

template <class T>
nlohmann::json OptJson(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace spotvisor::telemetry
