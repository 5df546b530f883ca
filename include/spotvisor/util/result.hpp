// The error type every fallible function of ours returns instead of throwing across a
// module boundary. A message names the file, key, URL or checkpoint involved, so that it
// can be shown to a user as it is.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace spotvisor {

// What went wrong, in words a user can act on.
struct Error {
  std::string message;
};

// A value or an Error. Small on purpose: `if (!r) return r.error();`.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  explicit operator bool() const { return v_.index() == 0; }
  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;  // the value, or why there is none
};

// For functions that return nothing on success.
struct Ok {};
using Status = Result<Ok>;

}  // namespace spotvisor
