// The pickle reader's opcodes, one case each; see pickle.hpp. As CPython's Lib/pickle.py
// and Modules/_pickle.c define them (PEP 307 for protocol 2, PEP 3154 for 4, PEP 574 for 5).
#include "pickle_machine.hpp"

namespace spotvisor::checkpoint {

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

}  // namespace spotvisor::checkpoint
