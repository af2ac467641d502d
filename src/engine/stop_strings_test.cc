#include "engine/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsv41 {
namespace {

TEST(StopStringMatcherTest, NoStopEmitsEverything) {
  StopStringMatcher none({});
  EXPECT_EQ(none.Push("hello ").emit, "hello ");
  EXPECT_EQ(none.Push("world").emit, "world");
  EXPECT_EQ(none.Flush(), "");
  StopStringMatcher unmatched({"xyz"});
  EXPECT_EQ(unmatched.Push("abc").emit, "abc");
  EXPECT_FALSE(unmatched.Push("def").stopped);
  EXPECT_EQ(unmatched.Flush(), "");
}

TEST(StopStringMatcherTest, StopSplitAcrossDeltas) {
  StopStringMatcher m({"</end>"});
  StopStringMatcher::Result r = m.Push("answer</");
  EXPECT_EQ(r.emit, "answer");  // "</" could start the stop string
  EXPECT_FALSE(r.stopped);
  r = m.Push("en");
  EXPECT_EQ(r.emit, "");
  EXPECT_FALSE(r.stopped);
  r = m.Push("d>tail");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  r = m.Push("more");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, HeldTextIsReleasedWhenItStopsMatching) {
  StopStringMatcher m({"</end>"});
  EXPECT_EQ(m.Push("a</e").emit, "a");
  EXPECT_EQ(m.Push("x").emit, "</ex");
  EXPECT_EQ(m.Push("<").emit, "");
  EXPECT_EQ(m.Flush(), "<");
}

TEST(StopStringMatcherTest, StopInsideOneDeltaCutsBeforeIt) {
  StopStringMatcher m({"STOP"});
  const StopStringMatcher::Result r = m.Push("abcSTOPdef");
  EXPECT_EQ(r.emit, "abc");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStringMatcherTest, ShorterStopCompletesFirst) {
  // "ab" completes as soon as "b" arrives, although "abc" might have followed.
  StopStringMatcher m({"abc", "ab"});
  EXPECT_EQ(m.Push("xa").emit, "x");
  const StopStringMatcher::Result r = m.Push("b");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStringMatcherTest, LongerPrefixHeldWhileShorterStopCannotMatch) {
  // "abd" ends neither stop; "ab" is held for "abc" until "x" resolves it.
  StopStringMatcher m({"abc", "bd"});
  EXPECT_EQ(m.Push("zab").emit, "z");
  EXPECT_EQ(m.Push("x").emit, "abx");
  StopStringMatcher::Result r = m.Push("ab");
  EXPECT_EQ(r.emit, "");
  r = m.Push("d");
  EXPECT_EQ(r.emit, "a");  // "bd" at offset 1 of the held "abd"
  EXPECT_TRUE(r.stopped);
}

TEST(StopStringMatcherTest, EarliestOccurrenceWinsInOneDelta) {
  StopStringMatcher m({"cd", "bcde"});
  const StopStringMatcher::Result r = m.Push("abcdef");
  EXPECT_EQ(r.emit, "a");  // "bcde" starts at 1, before "cd" at 2
  EXPECT_TRUE(r.stopped);
}

TEST(StopStringMatcherTest, MatchedNamesTheStopThatEndedTheText) {
  StopStringMatcher m({"zz", "END", "ab"});
  EXPECT_EQ(m.matched(), "");
  EXPECT_EQ(m.Push("xxEN").emit, "xx");
  EXPECT_EQ(m.matched(), "");
  const StopStringMatcher::Result r = m.Push("D ab");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(m.matched(), "END");  // earlier than "ab" in the text
}

TEST(StopStringMatcherTest, MultibyteUtf8) {
  StopStringMatcher m({"世界"});
  EXPECT_EQ(m.Push("你好世").emit, "你好");
  EXPECT_EQ(m.Push("人").emit, "世人");
  EXPECT_EQ(m.Push("世").emit, "");
  const StopStringMatcher::Result r = m.Push("界!");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStringMatcherTest, MultibyteStopsCutAndHoldWholeCharacters) {
  // "é" (C3 A9) and "ã" (C3 A3) share a lead byte; whole characters never match each other.
  StopStringMatcher m({"é"});
  EXPECT_EQ(m.Push("ãé").emit, "ã");
  StopStringMatcher n({"éa"});
  EXPECT_EQ(n.Push("ãé").emit, "ã");
  EXPECT_EQ(n.Flush(), "é");
}

TEST(StopStringMatcherTest, FlushReturnsHeldTextOnce) {
  StopStringMatcher m({"###"});
  EXPECT_EQ(m.Push("end##").emit, "end");
  EXPECT_EQ(m.Flush(), "##");
  EXPECT_EQ(m.Flush(), "");
}

}  // namespace
}  // namespace dsv41
