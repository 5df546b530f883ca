// The request side of the etcd gateway's wire format: base64, and the JSON bodies of the
// POST endpoints (int64 written as strings, as protobuf's JSON mapping does). Pure.
#include <array>
#include <nlohmann/json.hpp>

#include "spotvisor/etcd/wire.hpp"

namespace spotvisor::etcd {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The value of a base64 digit, -1 for anything else (both alphabets accepted).
int DigitValue(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::string Int(std::int64_t v) { return std::to_string(v); }

// Base64 and digits are ASCII; a user or password that is not UTF-8 gets U+FFFD, not an exception.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json PutJson(const PutRequest& r) {
  Json j = {{"key", Base64Encode(r.key)}, {"value", Base64Encode(r.value)}};
  if (r.lease != 0) j["lease"] = Int(r.lease);
  if (r.prev_kv) j["prev_kv"] = true;
  return j;
}

Json RangeJson(const RangeRequest& r) {
  Json j = {{"key", Base64Encode(r.key)}};
  if (!r.range_end.empty()) j["range_end"] = Base64Encode(r.range_end);
  if (r.revision != 0) j["revision"] = Int(r.revision);
  if (r.limit != 0) j["limit"] = Int(r.limit);
  if (r.count_only) j["count_only"] = true;
  if (r.keys_only) j["keys_only"] = true;
  return j;
}

Json DeleteJson(const DeleteRangeRequest& r) {
  Json j = {{"key", Base64Encode(r.key)}};
  if (!r.range_end.empty()) j["range_end"] = Base64Encode(r.range_end);
  if (r.prev_kv) j["prev_kv"] = true;
  return j;
}

Json OpJson(const TxnOp& op) {
  if (const auto* put = std::get_if<PutRequest>(&op)) return {{"request_put", PutJson(*put)}};
  if (const auto* range = std::get_if<RangeRequest>(&op)) return {{"request_range", RangeJson(*range)}};
  return {{"request_delete_range", DeleteJson(std::get<DeleteRangeRequest>(op))}};
}

Json CompareJson(const Compare& c) {
  static constexpr std::array kResults = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  Json j = {{"key", Base64Encode(c.key)}, {"result", kResults.at(static_cast<std::size_t>(c.result))}};
  switch (c.target) {
    case Compare::Target::kVersion:
      j["target"] = "VERSION";
      j["version"] = Int(c.number);
      break;
    case Compare::Target::kCreateRevision:
      j["target"] = "CREATE";
      j["create_revision"] = Int(c.number);
      break;
    case Compare::Target::kModRevision:
      j["target"] = "MOD";
      j["mod_revision"] = Int(c.number);
      break;
    case Compare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = Base64Encode(c.value);
      break;
    case Compare::Target::kLease:
      j["target"] = "LEASE";
      j["lease"] = Int(c.number);
      break;
  }
  return j;
}

Json OpsJson(const std::vector<TxnOp>& ops) {
  Json list = Json::array();
  for (const auto& op : ops) list.push_back(OpJson(op));
  return list;
}

}  // namespace

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Compare Compare::CreateRevision(std::string key, Result result, std::int64_t revision) {
  return {std::move(key), Target::kCreateRevision, result, revision, {}};
}
Compare Compare::ModRevision(std::string key, Result result, std::int64_t revision) {
  return {std::move(key), Target::kModRevision, result, revision, {}};
}
Compare Compare::Version(std::string key, Result result, std::int64_t version) {
  return {std::move(key), Target::kVersion, result, version, {}};
}
Compare Compare::Value(std::string key, Result result, std::string value) {
  return {std::move(key), Target::kValue, result, 0, std::move(value)};
}
Compare Compare::Absent(std::string key) { return CreateRevision(std::move(key), Result::kEqual, 0); }

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto n = (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16) |
                   (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8) |
                   static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    const int v = DigitValue(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string EncodePut(const PutRequest& request) { return Dump(PutJson(request)); }
std::string EncodeRange(const RangeRequest& request) { return Dump(RangeJson(request)); }
std::string EncodeDeleteRange(const DeleteRangeRequest& request) { return Dump(DeleteJson(request)); }

std::string EncodeTxn(const TxnRequest& request) {
  Json compare = Json::array();
  for (const auto& c : request.compare) compare.push_back(CompareJson(c));
  Json j = {{"compare", compare}, {"success", OpsJson(request.success)}, {"failure", OpsJson(request.failure)}};
  return Dump(j);
}

std::string EncodeCompaction(std::int64_t revision) { return Dump(Json{{"revision", Int(revision)}}); }
std::string EncodeLeaseGrant(std::int64_t ttl_seconds) { return Dump(Json{{"TTL", Int(ttl_seconds)}}); }
std::string EncodeLeaseId(std::int64_t id) { return Dump(Json{{"ID", Int(id)}}); }

std::string EncodeLeaseTimeToLive(std::int64_t id, bool keys) {
  Json j = {{"ID", Int(id)}};
  if (keys) j["keys"] = true;
  return Dump(j);
}

std::string EncodeAuthenticate(std::string_view name, std::string_view password) {
  return Dump(Json{{"name", std::string(name)}, {"password", std::string(password)}});
}

std::string EncodeWatchCreate(const WatchCreate& request) {
  Json create = {{"key", Base64Encode(request.key)}};
  if (!request.range_end.empty()) create["range_end"] = Base64Encode(request.range_end);
  if (request.start_revision != 0) create["start_revision"] = Int(request.start_revision);
  if (request.prev_kv) create["prev_kv"] = true;
  if (request.progress_notify) create["progress_notify"] = true;
  return Dump(Json{{"create_request", create}});
}

}  // namespace spotvisor::etcd
