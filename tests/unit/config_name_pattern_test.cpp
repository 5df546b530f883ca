// NamePattern and IsTempName: whole-name matches, {step} with leading zeros, overflow, and
// every temp-name form writers use while a checkpoint is incomplete.
#include <gtest/gtest.h>

#include "spotvisor/config/name_pattern.hpp"

namespace spotvisor::config {
namespace {

TEST(NamePattern, MatchesTheWholeNameWithLeadingZeros) {
  auto p = NamePattern::Parse("ckpt_step{step}");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->Match("ckpt_step120"), 120u);
  EXPECT_EQ(p->Match("ckpt_step000120"), 120u);
  EXPECT_EQ(p->Match("ckpt_step0"), 0u);
  EXPECT_EQ(p->Match("ckpt_step"), std::nullopt);     // {step} is one or more digits
  EXPECT_EQ(p->Match("ckpt_step12a"), std::nullopt);  // the whole name must match
  EXPECT_EQ(p->Match("xckpt_step12"), std::nullopt);
  EXPECT_EQ(p->Match("ckpt_step99999999999999999999999"), std::nullopt);  // no order for it

  auto file = NamePattern::Parse("step_{step}.pt");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->Match("step_0042.pt"), 42u);
  EXPECT_EQ(file->Match("step_42.pt.tmp"), std::nullopt);
}

TEST(NamePattern, NeedsStepAtMostOnce) {
  auto twice = NamePattern::Parse("{step}_{step}");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("more than once"), std::string::npos) << twice.error().message;
}

// A name without {step} is the one file or directory a trainer saves over in place.
TEST(NamePattern, AFixedNameMatchesItselfOnly) {
  auto p = NamePattern::Parse("ckpt.pt");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->fixed());
  EXPECT_EQ(p->text(), "ckpt.pt");
  EXPECT_EQ(p->Match("ckpt.pt"), 0u);
  EXPECT_EQ(p->Match("ckpt.pt.tmp"), std::nullopt);
  EXPECT_EQ(p->Match("xckpt.pt"), std::nullopt);
  EXPECT_EQ(p->Match("ckpt"), std::nullopt);
  EXPECT_FALSE(NamePattern::Parse("ckpt_step{step}")->fixed());

  auto dir = NamePattern::Parse("out");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->Match("out"), 0u);
}

TEST(NamePattern, AFixedNameIsOneNameNotAGlobOrATempName) {
  for (const char* bad : {"ckpt-*.pt", "", ".", "..", "ckpt.pt.tmp", ".spotvisor-versions", "out/ckpt.pt"}) {
    auto p = NamePattern::Parse(bad);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok() && *bad != '\0') {
      EXPECT_NE(p.error().message.find(bad), std::string::npos) << p.error().message;
    }
  }
}

TEST(NamePattern, TempNamesNeverCount) {
  for (const char* name : {"ckpt_step5.tmp", ".tmp-ckpt_step5", "tmp-ckpt_step5", "tmp.ckpt_step5",
                           "ckpt_step5.orbax-checkpoint-tmp-1699999999", "ckpt_step5.partial", "ckpt_step5.incomplete",
                           ".spotvisor-quarantine"}) {
    EXPECT_TRUE(IsTempName(name)) << name;
  }
  EXPECT_FALSE(IsTempName("ckpt_step5"));
  EXPECT_FALSE(IsTempName("step_5.pt"));

  // A pattern that would match a temp name still does not count it.
  auto p = NamePattern::Parse("{step}.orbax-checkpoint-tmp");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Match("5.orbax-checkpoint-tmp"), std::nullopt);
}

// `*` for what a framework writes around the step: Lightning's default file names, a
// suffix with a date, names that hold digits elsewhere.
TEST(NamePattern, AStarIsAnyRunOfCharacters) {
  auto lightning = NamePattern::Parse("epoch=*-step={step}.ckpt");
  ASSERT_TRUE(lightning.ok());
  EXPECT_EQ(lightning->Match("epoch=3-step=1200.ckpt"), 1200u);
  EXPECT_EQ(lightning->Match("epoch=12-step=7.ckpt"), 7u);
  EXPECT_EQ(lightning->Match("epoch=-step=7.ckpt"), 7u);  // `*` may be empty
  EXPECT_EQ(lightning->Match("epoch=3-step=1200.ckpt.tmp"), std::nullopt);
  EXPECT_EQ(lightning->Match("epoch=3-step=.ckpt"), std::nullopt);
  EXPECT_EQ(lightning->Match("epoch=3-step=12x.ckpt"), std::nullopt);
  EXPECT_EQ(lightning->Match("last.ckpt"), std::nullopt);

  auto dated = NamePattern::Parse("run-{step}-*");
  ASSERT_TRUE(dated.ok());
  EXPECT_EQ(dated->Match("run-40-2026-12-03"), 40u);
  EXPECT_EQ(dated->Match("run-40"), std::nullopt);  // the '-' after {step} is text

  // The leftmost run of digits that fits, taken whole.
  auto loose = NamePattern::Parse("*{step}");
  ASSERT_TRUE(loose.ok());
  EXPECT_EQ(loose->Match("a12"), 12u);
  auto dashed = NamePattern::Parse("*-{step}");
  ASSERT_TRUE(dashed.ok());
  EXPECT_EQ(dashed->Match("x-1-2"), 2u);
  EXPECT_EQ(dashed->Match("x-1-b"), std::nullopt);
  auto both = NamePattern::Parse("*_{step}_*");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->Match("gpt_300_final"), 300u);
}

}  // namespace
}  // namespace spotvisor::config
