// The pickle reader (see pickle.hpp): its run, start to STOP, and the values several opcodes
// build. The machine is pickle_machine.hpp, its opcodes pickle_opcodes.cpp; the bytes come
// through pickle_cursor.hpp; lookups in the result are pickle_tree.cpp.
#include "spotvisor/checkpoint/pickle.hpp"

#include "pickle_machine.hpp"

namespace spotvisor::checkpoint {

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
