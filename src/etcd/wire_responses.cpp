// The answer side of the etcd gateway's wire format: every field is optional (proto3 leaves
// out defaults), int64 may come as a string or a number, bytes as base64. A field of the
// wrong type is an error naming the field; unknown fields are ignored. Pure.
#include <charconv>
#include <nlohmann/json.hpp>

#include "spotvisor/etcd/wire.hpp"

namespace spotvisor::etcd {
namespace {

using Json = nlohmann::json;

// Reads typed fields of one JSON object, remembering the first problem in `*error`.
class Fields {
 public:
  Fields(const Json& object, std::string where, std::string* error)
      : object_(object), where_(std::move(where)), error_(error) {}

  template <class T>
  T Integer(const char* name) {
    const Json* v = Find(name);
    if (v == nullptr) return 0;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned()) return static_cast<T>(v->get<std::uint64_t>());
      return static_cast<T>(v->get<std::int64_t>());
    }
    if (v->is_string()) {
      const auto& s = v->get_ref<const std::string&>();
      T out = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return out;
    }
    Fail(name, "an integer");
    return 0;
  }
  std::int64_t Int(const char* name) { return Integer<std::int64_t>(name); }
  std::uint64_t UInt(const char* name) { return Integer<std::uint64_t>(name); }

  bool Bool(const char* name) {
    const Json* v = Find(name);
    if (v == nullptr) return false;
    if (!v->is_boolean()) Fail(name, "true or false");
    return v->is_boolean() && v->get<bool>();
  }

  std::string Text(const char* name) {
    const Json* v = Find(name);
    if (v == nullptr) return {};
    if (!v->is_string()) {
      Fail(name, "a string");
      return {};
    }
    return v->get<std::string>();
  }

  std::string Bytes(const char* name) {
    const Json* v = Find(name);
    if (v == nullptr) return {};
    if (v->is_string()) {
      if (auto decoded = Base64Decode(v->get_ref<const std::string&>())) return std::move(*decoded);
    }
    Fail(name, "base64 text");
    return {};
  }

  // The member `name` if it is an object (nullptr when absent or of another type).
  const Json* Object(const char* name) { return Typed(name, &Json::is_object, "an object"); }
  const Json* Array(const char* name) { return Typed(name, &Json::is_array, "an array"); }

  const std::string& where() const { return where_; }

 private:
  const Json* Find(const char* name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  const Json* Typed(const char* name, bool (Json::*is)() const noexcept, const char* what) {
    const Json* v = Find(name);
    if (v != nullptr && !(v->*is)()) {
      Fail(name, what);
      return nullptr;
    }
    return v;
  }
  void Fail(const char* name, const char* what) {
    if (error_->empty()) *error_ = "field " + where_ + name + " is not " + what;
  }

  const Json& object_;  // the object read
  std::string where_;   // its path, "responses[0].kvs[1]."
  std::string* error_;  // the first problem (shared by nested readers)
};

ResponseHeader ReadHeader(Fields& f, std::string* error) {
  ResponseHeader h;
  const Json* j = f.Object("header");
  if (j == nullptr) return h;
  Fields hf(*j, f.where() + "header.", error);
  h.cluster_id = hf.UInt("cluster_id");
  h.member_id = hf.UInt("member_id");
  h.revision = hf.Int("revision");
  h.raft_term = hf.UInt("raft_term");
  return h;
}

KeyValue ReadKeyValue(const Json& j, const std::string& where, std::string* error) {
  KeyValue kv;
  if (!j.is_object()) {
    if (error->empty()) *error = "field " + where + " is not an object";
    return kv;
  }
  Fields f(j, where + ".", error);
  kv.key = f.Bytes("key");
  kv.value = f.Bytes("value");
  kv.create_revision = f.Int("create_revision");
  kv.mod_revision = f.Int("mod_revision");
  kv.version = f.Int("version");
  kv.lease = f.Int("lease");
  return kv;
}

std::optional<KeyValue> ReadOptionalKeyValue(Fields& f, const char* name, std::string* error) {
  const Json* j = f.Object(name);
  if (j == nullptr) return std::nullopt;
  return ReadKeyValue(*j, f.where() + name, error);
}

std::vector<KeyValue> ReadKeyValues(Fields& f, const char* name, std::string* error) {
  std::vector<KeyValue> out;
  const Json* list = f.Array(name);
  if (list == nullptr) return out;
  for (std::size_t i = 0; i < list->size(); ++i) {
    out.push_back(ReadKeyValue((*list)[i], f.where() + name + "[" + std::to_string(i) + "]", error));
  }
  return out;
}

PutResponse ReadPut(Fields& f, std::string* error) {
  PutResponse r;
  r.header = ReadHeader(f, error);
  r.prev_kv = ReadOptionalKeyValue(f, "prev_kv", error);
  return r;
}

RangeResponse ReadRange(Fields& f, std::string* error) {
  RangeResponse r;
  r.header = ReadHeader(f, error);
  r.kvs = ReadKeyValues(f, "kvs", error);
  r.more = f.Bool("more");
  r.count = f.Int("count");
  return r;
}

DeleteRangeResponse ReadDelete(Fields& f, std::string* error) {
  DeleteRangeResponse r;
  r.header = ReadHeader(f, error);
  r.deleted = f.Int("deleted");
  r.prev_kvs = ReadKeyValues(f, "prev_kvs", error);
  return r;
}

TxnOpResponse ReadOpResponse(const Json& j, const std::string& where, std::string* error) {
  if (j.is_object()) {
    Fields op(j, where + ".", error);
    if (const Json* put = op.Object("response_put")) {
      Fields f(*put, where + ".response_put.", error);
      return ReadPut(f, error);
    }
    if (const Json* range = op.Object("response_range")) {
      Fields f(*range, where + ".response_range.", error);
      return ReadRange(f, error);
    }
    if (const Json* del = op.Object("response_delete_range")) {
      Fields f(*del, where + ".response_delete_range.", error);
      return ReadDelete(f, error);
    }
  }
  if (error->empty()) *error = "field " + where + " is not a put, range or delete_range response";
  return PutResponse{};
}

TxnResponse ReadTxn(Fields& f, std::string* error) {
  TxnResponse r;
  r.header = ReadHeader(f, error);
  r.succeeded = f.Bool("succeeded");
  if (const Json* list = f.Array("responses")) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      r.responses.push_back(ReadOpResponse((*list)[i], f.where() + "responses[" + std::to_string(i) + "]", error));
    }
  }
  return r;
}

Event ReadEvent(const Json& j, const std::string& where, std::string* error) {
  Event e;
  if (!j.is_object()) {
    if (error->empty()) *error = "field " + where + " is not an object";
    return e;
  }
  Fields f(j, where + ".", error);
  const std::string type = f.Text("type");
  if (type == "DELETE") {
    e.type = Event::Type::kDelete;
  } else if (!type.empty() && type != "PUT" && error->empty()) {
    *error = "field " + where + ".type is not PUT or DELETE";
  }
  if (const Json* kv = f.Object("kv")) e.kv = ReadKeyValue(*kv, where + ".kv", error);
  e.prev_kv = ReadOptionalKeyValue(f, "prev_kv", error);
  return e;
}

WatchResponse ReadWatch(Fields& f, std::string* error) {
  WatchResponse r;
  r.header = ReadHeader(f, error);
  r.watch_id = f.Int("watch_id");
  r.created = f.Bool("created");
  r.canceled = f.Bool("canceled");
  r.compact_revision = f.Int("compact_revision");
  r.cancel_reason = f.Text("cancel_reason");
  r.fragment = f.Bool("fragment");
  if (const Json* list = f.Array("events")) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      r.events.push_back(ReadEvent((*list)[i], f.where() + "events[" + std::to_string(i) + "]", error));
    }
  }
  return r;
}

// Parses `body` as one JSON object and reads it with `read`.
template <class T, class Read>
Result<T> ParseObject(std::string_view body, Read read) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"the answer is not JSON"};
  if (!j.is_object()) return Error{"the answer is not a JSON object"};
  std::string error;
  Fields f(j, "", &error);
  T value = read(f, &error);
  if (!error.empty()) return Error{"unexpected answer: " + error};
  return value;
}

// The first line of a stream body: `{"result":{...}}` (or an error object).
template <class T, class Read>
Result<T> ParseStreamLine(std::string_view body, Read read) {
  const auto newline = body.find('\n');
  if (newline != std::string_view::npos) body = body.substr(0, newline);
  if (auto err = ParseGatewayError(body)) return Error{err->message + " (code " + std::to_string(err->code) + ")"};
  return ParseObject<T>(body, [&](Fields& f, std::string* error) {
    const Json* result = f.Object("result");
    if (result == nullptr) {
      if (error->empty()) *error = "no result object";
      return T{};
    }
    Fields rf(*result, "result.", error);
    return read(rf, error);
  });
}

}  // namespace

std::optional<GatewayError> ParseGatewayError(std::string_view body) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find("error");
  if (it == j.end()) return std::nullopt;
  GatewayError e;
  std::string ignored;
  Fields f(j, "", &ignored);
  if (it->is_string()) {
    e.message = it->get<std::string>();
    e.code = static_cast<int>(f.Int("code"));
  } else if (it->is_object()) {  // a stream's error: {"grpc_code":N,"http_code":N,"message":...}
    Fields ef(*it, "error.", &ignored);
    e.message = ef.Text("message");
    e.code = static_cast<int>(ef.Int("grpc_code"));
  } else {
    return std::nullopt;
  }
  if (e.message.empty()) e.message = "an error without a message";
  return e;
}

Result<PutResponse> ParsePutResponse(std::string_view body) { return ParseObject<PutResponse>(body, ReadPut); }
Result<RangeResponse> ParseRangeResponse(std::string_view body) { return ParseObject<RangeResponse>(body, ReadRange); }
Result<DeleteRangeResponse> ParseDeleteRangeResponse(std::string_view body) {
  return ParseObject<DeleteRangeResponse>(body, ReadDelete);
}
Result<TxnResponse> ParseTxnResponse(std::string_view body) { return ParseObject<TxnResponse>(body, ReadTxn); }

Result<CompactionResponse> ParseCompactionResponse(std::string_view body) {
  return ParseObject<CompactionResponse>(
      body, [](Fields& f, std::string* error) { return CompactionResponse{ReadHeader(f, error)}; });
}

Result<LeaseGrantResponse> ParseLeaseGrantResponse(std::string_view body) {
  return ParseObject<LeaseGrantResponse>(body, [](Fields& f, std::string* error) {
    return LeaseGrantResponse{ReadHeader(f, error), f.Int("ID"), f.Int("TTL")};
  });
}

Result<LeaseRevokeResponse> ParseLeaseRevokeResponse(std::string_view body) {
  return ParseObject<LeaseRevokeResponse>(
      body, [](Fields& f, std::string* error) { return LeaseRevokeResponse{ReadHeader(f, error)}; });
}

Result<LeaseTimeToLiveResponse> ParseLeaseTimeToLiveResponse(std::string_view body) {
  return ParseObject<LeaseTimeToLiveResponse>(body, [](Fields& f, std::string* error) {
    LeaseTimeToLiveResponse r{ReadHeader(f, error), f.Int("ID"), f.Int("TTL"), f.Int("grantedTTL"), {}};
    if (const Json* keys = f.Array("keys")) {
      for (const auto& k : *keys) {
        auto decoded = k.is_string() ? Base64Decode(k.get_ref<const std::string&>()) : std::nullopt;
        if (!decoded) {
          if (error->empty()) *error = "field keys holds something other than base64 text";
          break;
        }
        r.keys.push_back(std::move(*decoded));
      }
    }
    return r;
  });
}

Result<AuthenticateResponse> ParseAuthenticateResponse(std::string_view body) {
  return ParseObject<AuthenticateResponse>(body, [](Fields& f, std::string* error) {
    return AuthenticateResponse{ReadHeader(f, error), f.Text("token")};
  });
}

Result<LeaseKeepAliveResponse> ParseLeaseKeepAliveResponse(std::string_view body) {
  return ParseStreamLine<LeaseKeepAliveResponse>(body, [](Fields& f, std::string* error) {
    return LeaseKeepAliveResponse{ReadHeader(f, error), f.Int("ID"), f.Int("TTL")};
  });
}

Result<WatchResponse> ParseWatchLine(std::string_view line) { return ParseStreamLine<WatchResponse>(line, ReadWatch); }

}  // namespace spotvisor::etcd
