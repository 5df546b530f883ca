// A reader of Python pickles (protocols 0-5) that builds the value tree and runs nothing:
// a global stays a name, a call (REDUCE, NEWOBJ) stays a record of what would be called
// with what, BUILD attaches the state. Enough to read what checkpoint files say about
// themselves: DCP's .metadata, the world sizes DeepSpeed and Megatron record, the storages
// of a legacy torch.save. Bounded (nodes, bytes); every failure names the source and the
// offset. Pure over a ByteSource; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

class PickleTree {
 public:
  using Ref = std::uint32_t;
  static constexpr Ref kNoRef = 0xffffffffu;

  enum class Kind : std::uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kText,
    kBytes,
    kTuple,
    kList,
    kDict,
    kSet,
    kGlobal,      // text = "module.name"
    kCall,        // callable(args), then state (BUILD) and items set on it (an OrderedDict)
    kPersistent,  // a persistent id (torch: a storage); items[0] is the id
  };
  struct Node {
    Kind kind = Kind::kNone;
    bool big = false;          // kInt that does not fit in 64 bits (number is 0)
    std::int64_t number = 0;   // kBool, kInt
    double real = 0;           // kFloat
    std::string text;          // kText, kBytes, kGlobal
    std::vector<Ref> items;    // kTuple, kList, kSet elements; kPersistent: the id
    std::vector<Ref> entries;  // kDict and kCall: key, value, key, value, ...
    Ref callable = kNoRef;     // kCall
    Ref args = kNoRef;         // kCall: a kTuple
    Ref state = kNoRef;        // kCall after BUILD
  };

  const Node& at(Ref r) const { return nodes_.at(r); }
  Ref root() const { return root_; }
  std::size_t size() const { return nodes_.size(); }

  // The value under a text key: of a dict, of a call's items (OrderedDict), or of a call's
  // state (an object's __dict__, also the dict of a (dict, slots) state).
  std::optional<Ref> Get(Ref object, std::string_view key) const;
  std::optional<std::int64_t> Int(Ref r) const;
  const std::string* Text(Ref r) const;
  // What a call calls: "module.name" of its callable (NEWOBJ: the class); "" otherwise.
  std::string_view CallName(Ref r) const;

 private:
  friend class PickleMachine;
  std::vector<Node> nodes_;
  Ref root_ = kNoRef;
};

struct PickleLimits {
  std::uint64_t max_nodes = 2'000'000;
  std::uint64_t max_text_bytes = 256ull << 20;  // strings and bytes together
};

// The pickle that starts at `offset` and must end (STOP) at or before `limit`. `end`
// receives the offset just past its STOP.
Result<PickleTree> ReadPickle(const ByteSource& source, std::uint64_t offset, std::uint64_t limit,
                              std::uint64_t* end = nullptr, const PickleLimits& limits = {});

}  // namespace spotvisor::checkpoint
