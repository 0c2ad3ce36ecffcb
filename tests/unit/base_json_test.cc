// JsonWriter (base/json.h): the one writer behind every JSON document Tern
// emits. What it must never do is produce text a parser rejects: a missing
// or doubled comma, a name without a colon, an unescaped string.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/json.h"

namespace tern {
namespace {

TEST(JsonWriter, CommasAndColonsAtEveryLevel) {
  std::string out;
  JsonWriter w(out);
  w.begin_object().u64("a", 1).key("b").begin_array().u64(1).i64(-2).begin_object().end_object().end_array();
  w.key("c").begin_object().str("d", "x").boolean("e", true).key("f").null().end_object();
  w.key("g").begin_array().end_array().end_object();
  EXPECT_EQ(out, R"({"a":1,"b":[1,-2,{}],"c":{"d":"x","e":true,"f":null},"g":[]})");
  EXPECT_TRUE(w.complete());
}

TEST(JsonWriter, SpacedStyleIsTelemetrys) {
  std::string out;
  JsonWriter w(out, JsonWriter::Style::kSpaced);
  w.begin_object().u64("a", 1).key("b").begin_array().u64(1).u64(2).end_array().end_object();
  EXPECT_EQ(out, R"({"a": 1, "b": [1, 2]})");
}

TEST(JsonWriter, NamesAndStringsAreEscaped) {
  std::string out;
  JsonWriter w(out);
  w.begin_object().str("q\"k", "a\\b\n\x01").end_object();
  EXPECT_EQ(out, R"({"q\"k":"a\\b\n\u0001"})");
}

TEST(JsonWriter, DoublesHaveNoSpellingForNanOrInfinity) {
  std::string out;
  JsonWriter w(out);
  w.begin_array().f64(1.5, 2).f64(std::nan("")).f64(std::numeric_limits<double>::infinity()).f64(1e300, 1);
  w.end_array();
  // 1e300 in exponent form, not 300 digits cut to the buffer.
  EXPECT_EQ(out, "[1.50,null,null,1e+300]");
}

TEST(JsonWriter, IncompleteUntilEveryBeginHasItsEnd) {
  std::string out;
  JsonWriter w(out);
  EXPECT_FALSE(w.complete());
  w.begin_object().key("a").begin_array();
  EXPECT_FALSE(w.complete());
  w.end_array();
  EXPECT_FALSE(w.complete());
  w.end_object();
  EXPECT_TRUE(w.complete());
}

TEST(JsonWriterDeathTest, AValueWhereANameIsDueIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        std::string out;
        JsonWriter w(out);
        w.begin_object().u64(1);
      },
      "REQUIRE failed.*a value where a name is due");
}

}  // namespace
}  // namespace tern
