// Looking things up in a pickle's value tree; see pickle.hpp.
#include "spotvisor/checkpoint/pickle.hpp"

namespace spotvisor::checkpoint {

using Kind = PickleTree::Kind;
using Ref = PickleTree::Ref;

std::optional<Ref> PickleTree::Get(Ref object, std::string_view key) const {
  if (object >= nodes_.size()) return std::nullopt;
  const Node& n = nodes_[object];
  auto find = [&](const std::vector<Ref>& entries) -> std::optional<Ref> {
    for (std::size_t i = 0; i + 1 < entries.size(); i += 2) {
      const Node& k = nodes_[entries[i]];
      if (k.kind == Kind::kText && k.text == key) return entries[i + 1];
    }
    return std::nullopt;
  };
  if (n.kind == Kind::kDict) return find(n.entries);
  if (n.kind != Kind::kCall) return std::nullopt;
  if (auto hit = find(n.entries)) return hit;
  if (n.state == kNoRef) return std::nullopt;
  const Node& st = nodes_[n.state];
  if (st.kind == Kind::kDict) return find(st.entries);
  if (st.kind == Kind::kTuple) {  // (dict or None, slots dict)
    for (Ref part : st.items) {
      if (nodes_[part].kind == Kind::kDict) {
        if (auto hit = find(nodes_[part].entries)) return hit;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::int64_t> PickleTree::Int(Ref r) const {
  if (r >= nodes_.size() || nodes_[r].kind != Kind::kInt || nodes_[r].big) return std::nullopt;
  return nodes_[r].number;
}

const std::string* PickleTree::Text(Ref r) const {
  if (r >= nodes_.size() || nodes_[r].kind != Kind::kText) return nullptr;
  return &nodes_[r].text;
}

std::string_view PickleTree::CallName(Ref r) const {
  if (r >= nodes_.size() || nodes_[r].kind != Kind::kCall) return {};
  const Node& callable = nodes_[nodes_[r].callable];
  if (callable.kind == Kind::kGlobal) {
    // copyreg.__newobj__ / _reconstructor(cls, ...): the class is the first argument.
    if ((callable.text == "copyreg.__newobj__" || callable.text == "copy_reg._reconstructor" ||
         callable.text == "copyreg._reconstructor") &&
        nodes_[r].args != kNoRef && !nodes_[nodes_[r].args].items.empty()) {
      const Node& cls = nodes_[nodes_[nodes_[r].args].items.front()];
      if (cls.kind == Kind::kGlobal) return cls.text;
    }
    return callable.text;
  }
  return {};
}

}  // namespace spotvisor::checkpoint
