// The pickle reader's opcodes; see pickle.hpp. As CPython's Lib/pickle.py and
// Modules/_pickle.c define them (PEP 307 for protocol 2, PEP 3154 for 4, PEP 574 for 5).
// The bytes come through pickle_cursor.hpp; lookups in the result are pickle_tree.cpp.
#include "spotvisor/checkpoint/pickle.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "pickle_cursor.hpp"

namespace spotvisor::checkpoint {

using Kind = PickleTree::Kind;
using Ref = PickleTree::Ref;

class PickleMachine {
 public:
  PickleMachine(const ByteSource& s, std::uint64_t offset, std::uint64_t limit, const PickleLimits& limits)
      : s_(s), in_(s, offset, limit), start_(offset), limits_(limits) {}

  Result<PickleTree> Run(std::uint64_t* end);

 private:
  Error Fail(const std::string& what) const {
    return Error{s_.name() + ": pickle at offset " + std::to_string(start_) + ": " + what + " (offset " +
                 std::to_string(op_at_) + ")"};
  }
  Result<Ref> New(Kind kind) {
    if (tree_.nodes_.size() >= limits_.max_nodes)
      return Fail("more than " + std::to_string(limits_.max_nodes) + " values");
    tree_.nodes_.push_back(PickleTree::Node{kind});
    return static_cast<Ref>(tree_.nodes_.size() - 1);
  }
  PickleTree::Node& N(Ref r) { return tree_.nodes_[r]; }
  Status Push(Result<Ref> r) {
    if (!r) return r.error();
    stack_.push_back(*r);
    return Ok{};
  }
  Result<Ref> Pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) return Fail("stack underflow");
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Result<std::vector<Ref>> PopMark() {
    if (marks_.empty()) return Fail("no MARK");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Status Text(Kind kind, Result<std::string> text) {
    if (!text) return text.error();
    text_bytes_ += text->size();
    if (text_bytes_ > limits_.max_text_bytes)
      return Fail("strings larger than " + std::to_string(limits_.max_text_bytes) + " bytes");
    auto r = New(kind);
    if (!r) return r.error();
    N(*r).text = std::move(*text);
    stack_.push_back(*r);
    return Ok{};
  }
  Status Int(std::int64_t v, Kind kind = Kind::kInt) {
    auto r = New(kind);
    if (!r) return r.error();
    N(*r).number = v;
    stack_.push_back(*r);
    return Ok{};
  }
  Status SizedText(Kind kind, std::size_t width) {
    auto n = in_.LittleEndian(width);
    if (!n) return n.error();
    return Text(kind, in_.Bytes(*n));
  }
  Status Long(std::uint64_t n);
  Status Sequence(Kind kind, std::vector<Ref> items) {
    auto r = New(kind);
    if (!r) return r.error();
    N(*r).items = std::move(items);
    stack_.push_back(*r);
    return Ok{};
  }
  Status Call(Ref callable, Ref args) {
    auto r = New(Kind::kCall);
    if (!r) return r.error();
    N(*r).callable = callable;
    N(*r).args = args;
    stack_.push_back(*r);
    return Ok{};
  }
  Status Global(std::string module, std::string name) { return Text(Kind::kGlobal, module + "." + name); }
  Status SetItems(std::vector<Ref> kv);
  Status Append(std::vector<Ref> items);
  Status Memo(std::uint64_t index) {
    if (stack_.empty()) return Fail("memo put on an empty stack");
    if (memo_.size() >= limits_.max_nodes) return Fail("memo too large");
    memo_[index] = stack_.back();
    return Ok{};
  }
  Status Recall(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Fail("memo " + std::to_string(index) + " was never stored");
    stack_.push_back(it->second);
    return Ok{};
  }
  Result<std::uint64_t> LineNumber() {
    auto line = in_.Line();
    if (!line) return line.error();
    char* endp = nullptr;
    const auto v = std::strtoull(line->c_str(), &endp, 10);
    if (line->empty() || *endp != '\0') return Fail("'" + *line + "' is not a number");
    return v;
  }
  Status Step(unsigned char op);

  const ByteSource& s_;
  PickleCursor in_;
  std::uint64_t start_;
  std::uint64_t op_at_ = 0;
  PickleLimits limits_;
  PickleTree tree_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Ref> memo_;
  std::uint64_t text_bytes_ = 0;
  bool stopped_ = false;
};

Status PickleMachine::Long(std::uint64_t n) {
  auto bytes = in_.Bytes(n);
  if (!bytes) return bytes.error();
  auto r = New(Kind::kInt);
  if (!r) return r.error();
  if (n > 8) {
    N(*r).big = true;
  } else if (n > 0) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>((*bytes)[i])) << (8 * i);
    if (n < 8 && (static_cast<unsigned char>((*bytes)[n - 1]) & 0x80) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign
    N(*r).number = static_cast<std::int64_t>(v);
  }
  stack_.push_back(*r);
  return Ok{};
}

Status PickleMachine::SetItems(std::vector<Ref> kv) {
  if (kv.size() % 2 != 0) return Fail("SETITEMS with an odd number of values");
  auto target = Pop();
  if (!target) return target.error();
  auto& t = N(*target);
  if (t.kind != Kind::kDict && t.kind != Kind::kCall) return Fail("SETITEM on something that is not a dict");
  t.entries.insert(t.entries.end(), kv.begin(), kv.end());
  stack_.push_back(*target);
  return Ok{};
}

Status PickleMachine::Append(std::vector<Ref> items) {
  auto target = Pop();
  if (!target) return target.error();
  auto& t = N(*target);
  if (t.kind != Kind::kList && t.kind != Kind::kCall && t.kind != Kind::kSet)
    return Fail("APPEND to something that is not a list");
  t.items.insert(t.items.end(), items.begin(), items.end());
  stack_.push_back(*target);
  return Ok{};
}

Status PickleMachine::Step(unsigned char op) {
  switch (op) {
    case 0x80: {  // PROTO
      auto v = in_.LittleEndian(1);
      if (!v) return v.error();
      if (*v > 5) return Fail("protocol " + std::to_string(*v) + " is newer than 5");
      return Ok{};
    }
    case 0x95: {  // FRAME: a length hint only
      auto v = in_.LittleEndian(8);
      return v ? Status(Ok{}) : Status(v.error());
    }
    case '.':
      stopped_ = true;
      return Ok{};
    case '(':
      marks_.push_back(stack_.size());
      return Ok{};
    case '0': {
      auto r = Pop();
      return r ? Status(Ok{}) : Status(r.error());
    }
    case '1': {
      auto r = PopMark();
      return r ? Status(Ok{}) : Status(r.error());
    }
    case '2':
      if (stack_.empty()) return Fail("DUP on an empty stack");
      stack_.push_back(stack_.back());
      return Ok{};
    case 'N':
      return Push(New(Kind::kNone));
    case 0x88:
      return Int(1, Kind::kBool);
    case 0x89:
      return Int(0, Kind::kBool);
    case 'J': {
      auto v = in_.LittleEndian(4);
      if (!v) return v.error();
      return Int(static_cast<std::int32_t>(static_cast<std::uint32_t>(*v)));
    }
    case 'K': {
      auto v = in_.LittleEndian(1);
      return v ? Int(static_cast<std::int64_t>(*v)) : Status(v.error());
    }
    case 'M': {
      auto v = in_.LittleEndian(2);
      return v ? Int(static_cast<std::int64_t>(*v)) : Status(v.error());
    }
    case 0x8a: {
      auto n = in_.LittleEndian(1);
      return n ? Long(*n) : Status(n.error());
    }
    case 0x8b: {
      auto n = in_.LittleEndian(4);
      if (!n) return n.error();
      if (*n > 0x7fffffffu) return Fail("LONG4 with a negative length");
      return Long(*n);
    }
    case 'I':
    case 'L': {
      auto line = in_.Line();
      if (!line) return line.error();
      if (op == 'I' && (*line == "00" || *line == "01")) return Int(*line == "01", Kind::kBool);
      std::string digits = *line;
      if (!digits.empty() && digits.back() == 'L') digits.pop_back();
      char* endp = nullptr;
      errno = 0;
      const long long v = std::strtoll(digits.c_str(), &endp, 10);
      if (digits.empty() || *endp != '\0') return Fail("'" + *line + "' is not an integer");
      if (errno == ERANGE) {
        auto r = New(Kind::kInt);
        if (!r) return r.error();
        N(*r).big = true;
        stack_.push_back(*r);
        return Ok{};
      }
      return Int(v);
    }
    case 'F': {
      auto line = in_.Line();
      if (!line) return line.error();
      auto r = New(Kind::kFloat);
      if (!r) return r.error();
      N(*r).real = std::strtod(line->c_str(), nullptr);
      stack_.push_back(*r);
      return Ok{};
    }
    case 'G': {
      auto v = in_.LittleEndian(8);
      if (!v) return v.error();
      auto r = New(Kind::kFloat);
      if (!r) return r.error();
      N(*r).real = std::bit_cast<double>(__builtin_bswap64(*v));  // big-endian on the wire
      stack_.push_back(*r);
      return Ok{};
    }
    case 'S':
    case 'V': {  // repr / raw-unicode-escape text, kept as written
      auto line = in_.Line();
      if (!line) return line.error();
      std::string t = *line;
      if (op == 'S' && t.size() >= 2 && (t.front() == '\'' || t.front() == '"')) t = t.substr(1, t.size() - 2);
      return Text(Kind::kText, std::move(t));
    }
    case 'T':
      return SizedText(Kind::kBytes, 4);
    case 'U':
      return SizedText(Kind::kBytes, 1);
    case 'X':
      return SizedText(Kind::kText, 4);
    case 0x8c:
      return SizedText(Kind::kText, 1);
    case 0x8d:
      return SizedText(Kind::kText, 8);
    case 'B':
      return SizedText(Kind::kBytes, 4);
    case 'C':
      return SizedText(Kind::kBytes, 1);
    case 0x8e:
    case 0x96:
      return SizedText(Kind::kBytes, 8);
    case ')':
      return Sequence(Kind::kTuple, {});
    case 't': {
      auto items = PopMark();
      return items ? Sequence(Kind::kTuple, std::move(*items)) : Status(items.error());
    }
    case 0x85:
    case 0x86:
    case 0x87: {
      const std::size_t n = op - 0x84u;
      if (stack_.size() < n + (marks_.empty() ? 0 : marks_.back())) return Fail("stack underflow");
      std::vector<Ref> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
      stack_.resize(stack_.size() - n);
      return Sequence(Kind::kTuple, std::move(items));
    }
    case ']':
      return Sequence(Kind::kList, {});
    case 'l': {
      auto items = PopMark();
      return items ? Sequence(Kind::kList, std::move(*items)) : Status(items.error());
    }
    case 0x8f:
      return Sequence(Kind::kSet, {});
    case 0x91: {
      auto items = PopMark();
      return items ? Sequence(Kind::kSet, std::move(*items)) : Status(items.error());
    }
    case 'a': {
      auto v = Pop();
      return v ? Append({*v}) : Status(v.error());
    }
    case 'e':
    case 0x90: {
      auto items = PopMark();
      return items ? Append(std::move(*items)) : Status(items.error());
    }
    case '}':
      return Push(New(Kind::kDict));
    case 'd': {
      auto kv = PopMark();
      if (!kv) return kv.error();
      if (kv->size() % 2 != 0) return Fail("DICT with an odd number of values");
      auto r = New(Kind::kDict);
      if (!r) return r.error();
      N(*r).entries = std::move(*kv);
      stack_.push_back(*r);
      return Ok{};
    }
    case 's': {
      auto v = Pop();
      if (!v) return v.error();
      auto k = Pop();
      if (!k) return k.error();
      return SetItems({*k, *v});
    }
    case 'u': {
      auto kv = PopMark();
      return kv ? SetItems(std::move(*kv)) : Status(kv.error());
    }
    case 'c': {
      auto module = in_.Line();
      if (!module) return module.error();
      auto name = in_.Line();
      if (!name) return name.error();
      return Global(*module, *name);
    }
    case 0x93: {  // STACK_GLOBAL
      auto name = Pop();
      if (!name) return name.error();
      auto module = Pop();
      if (!module) return module.error();
      if (N(*name).kind != Kind::kText || N(*module).kind != Kind::kText) return Fail("STACK_GLOBAL needs two strings");
      return Global(N(*module).text, N(*name).text);
    }
    case 'R':
    case 0x81: {  // REDUCE, NEWOBJ: callable args
      auto args = Pop();
      if (!args) return args.error();
      auto callable = Pop();
      if (!callable) return callable.error();
      return Call(*callable, *args);
    }
    case 0x92: {  // NEWOBJ_EX: cls args kwargs
      auto kwargs = Pop();
      if (!kwargs) return kwargs.error();
      auto args = Pop();
      if (!args) return args.error();
      auto cls = Pop();
      if (!cls) return cls.error();
      return Call(*cls, *args);
    }
    case 'i': {  // INST module name, MARK args
      auto module = in_.Line();
      if (!module) return module.error();
      auto name = in_.Line();
      if (!name) return name.error();
      auto args = PopMark();
      if (!args) return args.error();
      if (auto st = Global(*module, *name); !st) return st;
      const Ref cls = stack_.back();
      stack_.pop_back();
      if (auto st = Sequence(Kind::kTuple, std::move(*args)); !st) return st;
      const Ref tuple = stack_.back();
      stack_.pop_back();
      return Call(cls, tuple);
    }
    case 'o': {  // OBJ: MARK cls args
      auto items = PopMark();
      if (!items) return items.error();
      if (items->empty()) return Fail("OBJ without a class");
      const Ref cls = items->front();
      if (auto st = Sequence(Kind::kTuple, std::vector<Ref>(items->begin() + 1, items->end())); !st) return st;
      const Ref tuple = stack_.back();
      stack_.pop_back();
      return Call(cls, tuple);
    }
    case 'b': {  // BUILD
      auto state = Pop();
      if (!state) return state.error();
      if (stack_.empty()) return Fail("BUILD on an empty stack");
      auto& target = N(stack_.back());
      if (target.kind == Kind::kCall) target.state = *state;
      return Ok{};
    }
    case 'p': {
      auto i = LineNumber();
      return i ? Memo(*i) : Status(i.error());
    }
    case 'q': {
      auto i = in_.LittleEndian(1);
      return i ? Memo(*i) : Status(i.error());
    }
    case 'r': {
      auto i = in_.LittleEndian(4);
      return i ? Memo(*i) : Status(i.error());
    }
    case 0x94:
      return Memo(memo_.size());
    case 'g': {
      auto i = LineNumber();
      return i ? Recall(*i) : Status(i.error());
    }
    case 'h': {
      auto i = in_.LittleEndian(1);
      return i ? Recall(*i) : Status(i.error());
    }
    case 'j': {
      auto i = in_.LittleEndian(4);
      return i ? Recall(*i) : Status(i.error());
    }
    case 'P':
    case 'Q': {
      Ref id = 0;
      if (op == 'P') {
        if (auto st = Text(Kind::kText, in_.Line()); !st) return st;
      }
      auto popped = Pop();
      if (!popped) return popped.error();
      id = *popped;
      auto r = New(Kind::kPersistent);
      if (!r) return r.error();
      N(*r).items = {id};
      stack_.push_back(*r);
      return Ok{};
    }
    default:
      break;
  }
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  return Fail(std::string("opcode ") + hex +
              " is not one this reader knows (extension registry, out-of-band buffer, or not a pickle)");
}

Result<PickleTree> PickleMachine::Run(std::uint64_t* end) {
  while (!stopped_) {
    op_at_ = in_.pos();
    std::array<std::byte, 1> op{};
    if (auto st = in_.Read(op); !st) return st.error();
    if (auto st = Step(static_cast<unsigned char>(op[0])); !st) return st.error();
  }
  if (stack_.size() != 1 || !marks_.empty())
    return Fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
  tree_.root_ = stack_.back();
  if (end != nullptr) *end = in_.pos();
  return std::move(tree_);
}

Result<PickleTree> ReadPickle(const ByteSource& source, std::uint64_t offset, std::uint64_t limit, std::uint64_t* end,
                              const PickleLimits& limits) {
  PickleMachine machine(source, offset, limit, limits);
  return machine.Run(end);
}

}  // namespace spotvisor::checkpoint
