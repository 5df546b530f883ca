// Private to src/checkpoint/: the pickle reader's machine (see pickle.hpp). Its opcodes,
// one case each, are pickle_opcodes.cpp; running it and the values several opcodes build
// (integers, dict items, list items) are pickle.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "pickle_cursor.hpp"
#include "spotvisor/checkpoint/pickle.hpp"

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

}  // namespace spotvisor::checkpoint
