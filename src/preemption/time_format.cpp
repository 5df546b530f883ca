// ISO-8601 and RFC 1123 parsing/printing for notice deadlines. A small cursor parser with
// explicit range checks: the input comes from the network and is fuzzed.
#include "spotvisor/preemption/time_format.hpp"

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <optional>

namespace spotvisor::preemption {
namespace {

using namespace std::chrono;

// system_clock counts nanoseconds in 64 bits (1678..2262): stay well inside.
constexpr int kMinYear = 1900;
constexpr int kMaxYear = 2200;

constexpr std::array<std::string_view, 12> kMonths = {"jan", "feb", "mar", "apr", "may", "jun",
                                                      "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<std::string_view, 7> kDays = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};
constexpr std::array<const char*, 12> kMonthNames = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
constexpr std::array<const char*, 7> kDayNames = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};

// Reads characters off the front of a string_view.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}
  bool Done() const { return text_.empty(); }
  // Exactly `n` decimal digits.
  std::optional<int> Digits(std::size_t n) {
    if (text_.size() < n) return std::nullopt;
    int value = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text_[i]))) return std::nullopt;
      value = value * 10 + (text_[i] - '0');
    }
    text_.remove_prefix(n);
    return value;
  }
  // One or two decimal digits.
  std::optional<int> ShortNumber() {
    if (text_.size() >= 2 && std::isdigit(static_cast<unsigned char>(text_[1]))) return Digits(2);
    return Digits(1);
  }
  bool Take(char c) {
    if (text_.empty() || text_.front() != c) return false;
    text_.remove_prefix(1);
    return true;
  }
  bool TakeAny(std::string_view set) {
    if (text_.empty() || set.find(text_.front()) == std::string_view::npos) return false;
    text_.remove_prefix(1);
    return true;
  }
  // A run of letters, lower-cased.
  std::string Word() {
    std::string word;
    while (!text_.empty() && std::isalpha(static_cast<unsigned char>(text_.front()))) {
      word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text_.front()))));
      text_.remove_prefix(1);
    }
    return word;
  }
  void SkipSpaces() {
    while (!text_.empty() && text_.front() == ' ') text_.remove_prefix(1);
  }
  char Peek() const { return text_.empty() ? '\0' : text_.front(); }

 private:
  std::string_view text_;  // what is left to read
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Error Bad(std::string_view format, std::string_view text, std::string_view why) {
  std::string shown(text.substr(0, 64));
  return Error{"not an " + std::string(format) + " time: '" + shown + "' (" + std::string(why) + ")"};
}

// A calendar date and time of day, checked, as a UTC time point.
std::optional<TimePoint> MakeTime(int y, int mo, int d, int h, int mi, int s) {
  if (y < kMinYear || y > kMaxYear || mo < 1 || mo > 12 || h > 23 || mi > 59 || s > 60) return std::nullopt;
  const year_month_day ymd{year{y}, month{static_cast<unsigned>(mo)}, day{static_cast<unsigned>(d)}};
  if (d < 1 || !ymd.ok()) return std::nullopt;
  if (s == 60) s = 59;  // a leap second: close enough for a deadline
  return TimePoint{sys_days{ymd}.time_since_epoch() + hours{h} + minutes{mi} + seconds{s}};
}

// The instant itself, after its zone offset, must lie in [kMinYear, kMaxYear] in UTC too:
// "2200-12-31T23:22:00-02" is 2201 in UTC, and a deadline we accept must print as one we
// accept again (found by preemption_iso8601_fuzz).
std::optional<TimePoint> Shifted(TimePoint local, minutes offset) {
  const TimePoint utc = local - offset;
  const year_month_day ymd{floor<days>(utc)};
  if (ymd.year() < year{kMinYear} || ymd.year() > year{kMaxYear}) return std::nullopt;
  return utc;
}

// "+hh:mm", "+hhmm", "-hh"; returns the offset east of UTC.
std::optional<minutes> TakeOffset(Cursor& c, bool colon_optional) {
  const bool negative = c.Peek() == '-';
  if (!c.TakeAny("+-")) return std::nullopt;
  const auto h = c.Digits(2);
  if (!h || *h > 23) return std::nullopt;
  int m = 0;
  if (!c.Done()) {
    const bool had_colon = c.Take(':');
    if (!had_colon && !colon_optional) return std::nullopt;
    const auto mm = c.Digits(2);
    if (!mm || *mm > 59) return std::nullopt;
    m = *mm;
  }
  const minutes offset{*h * 60 + m};
  return negative ? -offset : offset;
}

}  // namespace

Result<TimePoint> ParseIso8601(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  Cursor c(trimmed);
  const auto y = c.Digits(4);
  if (!y || !c.Take('-')) return Bad("ISO-8601", trimmed, "expected YYYY-");
  const auto mo = c.Digits(2);
  if (!mo || !c.Take('-')) return Bad("ISO-8601", trimmed, "expected MM-");
  const auto d = c.Digits(2);
  if (!d || !c.TakeAny("Tt ")) return Bad("ISO-8601", trimmed, "expected DDThh");
  const auto h = c.Digits(2);
  if (!h || !c.Take(':')) return Bad("ISO-8601", trimmed, "expected hh:");
  const auto mi = c.Digits(2);
  if (!mi || !c.Take(':')) return Bad("ISO-8601", trimmed, "expected mm:");
  const auto s = c.Digits(2);
  if (!s) return Bad("ISO-8601", trimmed, "expected ss");
  nanoseconds fraction{0};
  if (c.TakeAny(".,")) {
    int digits = 0;
    std::int64_t value = 0;
    while (std::isdigit(static_cast<unsigned char>(c.Peek()))) {
      const int digit = c.Peek() - '0';
      c.Digits(1);
      if (digits < 9) {
        value = value * 10 + digit;
        ++digits;
      }
    }
    if (digits == 0) return Bad("ISO-8601", trimmed, "empty fraction");
    for (int i = digits; i < 9; ++i) value *= 10;
    fraction = nanoseconds{value};
  }
  minutes offset{0};
  if (!c.TakeAny("Zz")) {
    const auto parsed = TakeOffset(c, /*colon_optional=*/true);
    if (!parsed) return Bad("ISO-8601", trimmed, "expected Z or a +hh:mm offset");
    offset = *parsed;
  }
  if (!c.Done()) return Bad("ISO-8601", trimmed, "trailing characters");
  const auto t = MakeTime(*y, *mo, *d, *h, *mi, *s);
  const auto utc = t ? Shifted(*t + duration_cast<TimePoint::duration>(fraction), offset) : std::nullopt;
  if (!utc) return Bad("ISO-8601", trimmed, "date or time out of range");
  return *utc;
}

Result<TimePoint> ParseRfc1123(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  Cursor c(trimmed);
  if (std::isalpha(static_cast<unsigned char>(c.Peek()))) {
    const std::string name = c.Word();
    bool known = false;
    for (const auto day : kDays) known = known || name.substr(0, 3) == day;
    if (!known || !c.Take(',')) return Bad("RFC 1123", trimmed, "expected a day name and ','");
    c.SkipSpaces();
  }
  const auto d = c.ShortNumber();
  if (!d || !c.Take(' ')) return Bad("RFC 1123", trimmed, "expected a day of month");
  const std::string month_name = c.Word();
  int mo = 0;
  for (std::size_t i = 0; i < kMonths.size(); ++i) {
    if (month_name == kMonths[i]) mo = static_cast<int>(i) + 1;
  }
  if (mo == 0 || !c.Take(' ')) return Bad("RFC 1123", trimmed, "expected a month name");
  const auto y = c.Digits(4);
  if (!y || !c.Take(' ')) return Bad("RFC 1123", trimmed, "expected a four-digit year");
  const auto h = c.Digits(2);
  if (!h || !c.Take(':')) return Bad("RFC 1123", trimmed, "expected hh:");
  const auto mi = c.Digits(2);
  if (!mi || !c.Take(':')) return Bad("RFC 1123", trimmed, "expected mm:");
  const auto s = c.Digits(2);
  if (!s) return Bad("RFC 1123", trimmed, "expected ss");
  c.SkipSpaces();
  minutes offset{0};
  if (c.Peek() == '+' || c.Peek() == '-') {
    const auto parsed = TakeOffset(c, /*colon_optional=*/true);
    if (!parsed) return Bad("RFC 1123", trimmed, "bad zone offset");
    offset = *parsed;
  } else {
    const std::string zone = c.Word();
    if (zone != "gmt" && zone != "ut" && zone != "utc" && zone != "z") {
      return Bad("RFC 1123", trimmed, "expected the zone GMT");
    }
  }
  if (!c.Done()) return Bad("RFC 1123", trimmed, "trailing characters");
  const auto t = MakeTime(*y, mo, *d, *h, *mi, *s);
  const auto utc = t ? Shifted(*t, offset) : std::nullopt;
  if (!utc) return Bad("RFC 1123", trimmed, "date or time out of range");
  return *utc;
}

namespace {

struct Civil {
  int y, mo, d, h, mi, s, weekday;
};

Civil ToCivil(TimePoint t) {
  const auto secs = floor<seconds>(t);
  const auto day_point = floor<days>(secs);
  const year_month_day ymd{day_point};
  const hh_mm_ss hms{secs - day_point};
  return Civil{static_cast<int>(ymd.year()),
               static_cast<int>(unsigned(ymd.month())),
               static_cast<int>(unsigned(ymd.day())),
               static_cast<int>(hms.hours().count()),
               static_cast<int>(hms.minutes().count()),
               static_cast<int>(hms.seconds().count()),
               static_cast<int>(weekday{day_point}.c_encoding())};
}

}  // namespace

std::string FormatIso8601(TimePoint t) {
  const Civil c = ToCivil(t);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", c.y, c.mo, c.d, c.h, c.mi, c.s);
  return buf;
}

std::string FormatRfc1123(TimePoint t) {
  const Civil c = ToCivil(t);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDayNames[c.weekday], c.d,
                kMonthNames[c.mo - 1], c.y, c.h, c.mi, c.s);
  return buf;
}

}  // namespace spotvisor::preemption
