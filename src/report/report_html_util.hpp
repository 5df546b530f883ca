// Helpers shared by the HTML report's files (report_html*.cpp): escaping, number and time
// formatting, the palette. Internal to the report room.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace spotvisor::report::html {

// The Okabe-Ito palette: distinguishable with every common colour-vision deficiency.
inline constexpr const char* kBlue = "#0072B2";
inline constexpr const char* kOrange = "#E69F00";
inline constexpr const char* kSky = "#56B4E9";
inline constexpr const char* kGreen = "#009E73";
inline constexpr const char* kYellow = "#F0E442";
inline constexpr const char* kVermillion = "#D55E00";
inline constexpr const char* kPurple = "#CC79A7";
inline constexpr const char* kGrey = "#999999";

// Text and attribute values: & < > " ' escaped.
std::string Esc(std::string_view s);
// A JSON value as text ("unknown" for null or empty); floats with 4 significant digits.
std::string Text(const nlohmann::json& v, const std::string& unknown = "unknown");
// The member `key` of `object` as text, `unknown` when the key is absent (older reports).
std::string Field(const nlohmann::json& object, const char* key, const std::string& unknown = "unknown");
// An attempt's group: "epoch 2, 3 nodes, waited 4.12 s for the group" ("-" for a single node
// or a report from before the fields).
std::string GroupCell(const nlohmann::json& attempt);
// "2026-12-03T13:55:01.123Z".
std::string IsoMs(std::int64_t ms);
// "12.3 s", "4 min 05 s", "1 h 02 min".
std::string Duration(double seconds);
std::string Num(double v, int decimals);

// The timeline of one run as an inline <svg>; `id` keeps pattern ids apart on one page;
// `width`: of its viewBox (1000 for the page's width, less for half of it).
std::string TimelineSvg(const nlohmann::json& report, const std::string& id, double width);
// The report's tables (summary, work, attempts, notices, cost, hooks, measurement).
std::string Tables(const nlohmann::json& report);

}  // namespace spotvisor::report::html
