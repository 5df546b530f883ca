// The pickle reader against pickles CPython 3.11 wrote (the bytes below are
// `pickle.dumps(...)` of the value in each comment), and against the ways a file is broken:
// cut short, an unknown opcode, a memo never stored, more values than the limit.
#include <gtest/gtest.h>

#include <string>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/pickle.hpp"

namespace spotvisor::checkpoint {
namespace {

using Kind = PickleTree::Kind;

// {'dp_world_size': 4, 'x': [1, 2.5, None, True], 'big': 2**70, 'neg': N} in protocols 0, 2, 4.
const std::string kProtocol0(
    "\x28\x64\x70\x30\x0a\x56\x64\x70\x5f\x77\x6f\x72\x6c\x64\x5f\x73\x69\x7a\x65\x0a\x70\x31\x0a\x49\x34\x0a\x73\x56"
    "\x78"
    "\x0a\x70\x32\x0a\x28\x6c\x70\x33\x0a\x49\x31\x0a\x61\x46\x32\x2e\x35\x0a\x61\x4e\x61\x49\x30\x31\x0a\x61\x73\x56"
    "\x62"
    "\x69\x67\x0a\x70\x34\x0a\x4c\x31\x31\x38\x30\x35\x39\x31\x36\x32\x30\x37\x31\x37\x34\x31\x31\x33\x30\x33\x34\x32"
    "\x34"
    "\x4c\x0a\x73\x56\x6e\x65\x67\x0a\x70\x35\x0a\x49\x2d\x33\x0a\x73\x2e",
    104);
const std::string kProtocol2(
    "\x80\x02\x7d\x71\x00\x28\x58\x0d\x00\x00\x00\x64\x70\x5f\x77\x6f\x72\x6c\x64\x5f\x73\x69\x7a\x65\x71\x01\x4b\x04"
    "\x58"
    "\x01\x00\x00\x00\x78\x71\x02\x5d\x71\x03\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x4e\x88\x65\x58\x03\x00"
    "\x00"
    "\x00\x62\x69\x67\x71\x04\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x58\x03\x00\x00\x00\x6e\x65\x67\x71\x05\x4a"
    "\x20"
    "\x6c\xfb\xff\x75\x2e",
    92);
const std::string kProtocol4(
    "\x80\x04\x95\x48\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x0d\x64\x70\x5f\x77\x6f\x72\x6c\x64\x5f\x73\x69\x7a"
    "\x65"
    "\x94\x4b\x04\x8c\x01\x78\x94\x5d\x94\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x4e\x88\x65\x8c\x03\x62\x69"
    "\x67"
    "\x94\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x8c\x03\x6e\x65\x67\x94\x4a\x20\x6c\xfb\xff\x75\x2e",
    83);
// {'args': argparse.Namespace(tensor_model_parallel_size=2, pipeline_model_parallel_size=3)}, protocol 2
const std::string kNamespace(
    "\x80\x02\x7d\x71\x00\x58\x04\x00\x00\x00\x61\x72\x67\x73\x71\x01\x63\x61\x72\x67\x70\x61\x72\x73\x65\x0a\x4e\x61"
    "\x6d"
    "\x65\x73\x70\x61\x63\x65\x0a\x71\x02\x29\x81\x71\x03\x7d\x71\x04\x28\x58\x1a\x00\x00\x00\x74\x65\x6e\x73\x6f\x72"
    "\x5f"
    "\x6d\x6f\x64\x65\x6c\x5f\x70\x61\x72\x61\x6c\x6c\x65\x6c\x5f\x73\x69\x7a\x65\x71\x05\x4b\x02\x58\x1c\x00\x00\x00"
    "\x70"
    "\x69\x70\x65\x6c\x69\x6e\x65\x5f\x6d\x6f\x64\x65\x6c\x5f\x70\x61\x72\x61\x6c\x6c\x65\x6c\x5f\x73\x69\x7a\x65\x71"
    "\x06"
    "\x4b\x03\x75\x62\x73\x2e",
    122);
// collections.OrderedDict([('a', 1), ('b', b'xy')]), protocol 2
const std::string kOrderedDict(
    "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x0a\x71"
    "\x00"
    "\x29\x52\x71\x01\x28\x58\x01\x00\x00\x00\x61\x71\x02\x4b\x01\x58\x01\x00\x00\x00\x62\x71\x03\x63\x5f\x63\x6f\x64"
    "\x65"
    "\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x04\x58\x02\x00\x00\x00\x78\x79\x71\x05\x58\x06\x00\x00\x00\x6c\x61"
    "\x74"
    "\x69\x6e\x31\x71\x06\x86\x71\x07\x52\x71\x08\x75\x2e",
    100);
// l = [7, 8]; {'a': l, 'b': l}, protocol 4: the second is a memo reference to the first
const std::string kShared(
    "\x80\x04\x95\x17\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b\x07\x4b\x08\x65\x8c\x01"
    "\x62"
    "\x94\x68\x02\x75\x2e",
    34);

Result<PickleTree> Read(const std::string& bytes, const PickleLimits& limits = {}) {
  MemorySource src({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "state.pkl");
  std::uint64_t end = 0;
  auto tree = ReadPickle(src, 0, src.size(), &end, limits);
  if (tree) {
    EXPECT_EQ(end, bytes.size());
  }
  return tree;
}

std::string Why(const std::string& bytes, const PickleLimits& limits = {}) {
  auto tree = Read(bytes, limits);
  return tree ? "" : tree.error().message;
}

TEST(CheckpointPickle, EveryProtocolGivesTheSameTree) {
  for (const std::string* bytes : {&kProtocol0, &kProtocol2, &kProtocol4}) {
    auto tree = Read(*bytes);
    ASSERT_TRUE(tree) << tree.error().message;
    const auto root = tree->root();
    EXPECT_EQ(tree->at(root).kind, Kind::kDict);
    EXPECT_EQ(tree->Int(*tree->Get(root, "dp_world_size")), 4);
    const auto& list = tree->at(*tree->Get(root, "x"));
    ASSERT_EQ(list.kind, Kind::kList);
    ASSERT_EQ(list.items.size(), 4u);
    EXPECT_EQ(tree->Int(list.items[0]), 1);
    EXPECT_EQ(tree->at(list.items[1]).real, 2.5);
    EXPECT_EQ(tree->at(list.items[2]).kind, Kind::kNone);
    EXPECT_EQ(tree->at(list.items[3]).kind, Kind::kBool);
    EXPECT_EQ(tree->at(list.items[3]).number, 1);
    EXPECT_TRUE(tree->at(*tree->Get(root, "big")).big);
    EXPECT_FALSE(tree->Int(*tree->Get(root, "big")));
    EXPECT_EQ(tree->Int(*tree->Get(root, "neg")), bytes == &kProtocol0 ? -3 : -300000);
    EXPECT_FALSE(tree->Get(root, "missing"));
  }
}

TEST(CheckpointPickle, ObjectsKeepTheirClassAndState) {
  auto tree = Read(kNamespace);
  ASSERT_TRUE(tree) << tree.error().message;
  const auto args = tree->Get(tree->root(), "args");
  ASSERT_TRUE(args);
  EXPECT_EQ(tree->CallName(*args), "argparse.Namespace");
  EXPECT_EQ(tree->Int(*tree->Get(*args, "tensor_model_parallel_size")), 2);
  EXPECT_EQ(tree->Int(*tree->Get(*args, "pipeline_model_parallel_size")), 3);

  auto od = Read(kOrderedDict);
  ASSERT_TRUE(od) << od.error().message;
  EXPECT_EQ(od->CallName(od->root()), "collections.OrderedDict");
  EXPECT_EQ(od->Int(*od->Get(od->root(), "a")), 1);
  EXPECT_EQ(od->CallName(*od->Get(od->root(), "b")), "_codecs.encode");  // how protocol 2 writes bytes
}

TEST(CheckpointPickle, MemoReferencesShareOneValue) {
  auto tree = Read(kShared);
  ASSERT_TRUE(tree) << tree.error().message;
  EXPECT_EQ(*tree->Get(tree->root(), "a"), *tree->Get(tree->root(), "b"));
  EXPECT_EQ(tree->at(*tree->Get(tree->root(), "a")).items.size(), 2u);
}

TEST(CheckpointPickle, BrokenPicklesAreNamedWithTheirOffset) {
  for (std::size_t keep : {std::size_t{1}, std::size_t{20}, kProtocol2.size() - 1}) {
    EXPECT_NE(
        Why(kProtocol2.substr(0, keep))
            .find("state.pkl: pickle ends at offset " + std::to_string(keep) + " before its STOP opcode (truncated)"),
        std::string::npos)
        << keep;
  }
  EXPECT_NE(Why(std::string("\x80\x02\xff.", 4)).find("opcode 0xff is not one this reader knows"), std::string::npos);
  EXPECT_NE(Why(std::string("\x80\x02h\x09.", 5)).find("memo 9 was never stored (offset 2)"), std::string::npos);
  EXPECT_NE(Why(std::string("\x80\x02s.", 4)).find("stack underflow"), std::string::npos);
  EXPECT_NE(Why(std::string("\x80\x02NN.", 5)).find("STOP with 2 values on the stack"), std::string::npos);
  EXPECT_NE(Why(std::string("\x80\x09N.", 4)).find("protocol 9 is newer than 5"), std::string::npos);
  EXPECT_NE(Why(kProtocol4, PickleLimits{5, 1 << 20}).find("more than 5 values"), std::string::npos);
  EXPECT_NE(Why(kProtocol4, PickleLimits{1000, 4}).find("strings larger than 4 bytes"), std::string::npos);
}

TEST(CheckpointPickle, StopsAtItsOwnStopWhenMoreFollows) {
  const std::string two = kProtocol2 + kProtocol4;
  MemorySource src({reinterpret_cast<const std::byte*>(two.data()), two.size()}, "two");
  std::uint64_t end = 0;
  ASSERT_TRUE(ReadPickle(src, 0, src.size(), &end));
  EXPECT_EQ(end, kProtocol2.size());
  auto second = ReadPickle(src, end, src.size(), &end);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(end, two.size());
}

}  // namespace
}  // namespace spotvisor::checkpoint
