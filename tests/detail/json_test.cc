// SPDX-License-Identifier: Apache-2.0
// The one JSON writer (dlfeed/detail/json.h): numbers read back as the same
// double and are valid JSON; strings escape what JSON requires and nothing else.
#include "dlfeed/detail/json.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace dlfeed::detail {
namespace {

// RFC 8259's number grammar.
const std::regex& json_number_grammar() {
  static const std::regex re(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  return re;
}

void expect_round_trip(double v) {
  const std::string s = json_number(v);
  EXPECT_TRUE(std::regex_match(s, json_number_grammar())) << s;
  const double back = std::strtod(s.c_str(), nullptr);
  EXPECT_EQ(std::bit_cast<uint64_t>(back), std::bit_cast<uint64_t>(v)) << s;
}

TEST(JsonNumber, ReadsBackAsTheSameDouble) {
  for (double v :
       {0.0, -0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, 2.0 / 3.0, 12.5, 99.99999999999, 123456789012345.0, 9007199254740993.0,
        1e21, 1e-7, 6.02214076e23, 1.5e300, std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
        std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::epsilon()}) {
    expect_round_trip(v);
  }
  std::mt19937_64 rng(15);
  for (int i = 0; i < 20000; ++i) {
    const double v = std::bit_cast<double>(rng());
    if (std::isfinite(v)) expect_round_trip(v);
  }
  for (int i = 0; i < 2000; ++i) expect_round_trip(std::ldexp(static_cast<double>(rng() >> 11), -20));
}

TEST(JsonNumber, ShortestDigitsPlainBetween1eMinus4And1e17) {
  EXPECT_EQ(json_number(0), "0");
  EXPECT_EQ(json_number(-0.0), "-0");
  EXPECT_EQ(json_number(100), "100");
  EXPECT_EQ(json_number(100000), "100000");
  EXPECT_EQ(json_number(253333.33333333334), "253333.33333333334");
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(-2.5), "-2.5");
  EXPECT_EQ(json_number(0.0001), "0.0001");
  EXPECT_EQ(json_number(0.00077), "0.00077");
  EXPECT_EQ(json_number(1e16), "10000000000000000");
  EXPECT_EQ(json_number(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(json_number(1e-5), "1e-05");
  EXPECT_EQ(json_number(-1.25e-7), "-1.25e-07");
  EXPECT_EQ(json_number(1e21), "1e+21");
  std::string s = "[";
  json_append_number(s, 0.25);
  EXPECT_EQ(s, "[0.25");
}

TEST(JsonNumber, NonFiniteIsZero) {
  EXPECT_EQ(json_number(std::numeric_limits<double>::quiet_NaN()), "0");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "0");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "0");
}

TEST(JsonQuote, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_quote(""), "\"\"");
  EXPECT_EQ(json_quote("plain/path.h5"), "\"plain/path.h5\"");
  EXPECT_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_quote("l1\nl2\r\tx"), "\"l1\\nl2\\r\\tx\"");
  EXPECT_EQ(json_quote(std::string("\x01\x1f\0z", 4)), "\"\\u0001\\u001f\\u0000z\"");
  EXPECT_EQ(json_quote("\x7f"), "\"\x7f\"");                              // DEL needs no escape
  EXPECT_EQ(json_quote("d\xc3\xa9j\xc3\xa0"), "\"d\xc3\xa9j\xc3\xa0\"");  // UTF-8 as it is
  std::string s = "{\"k\":";
  json_append_quoted(s, "v\n");
  EXPECT_EQ(s, "{\"k\":\"v\\n\"");
}

}  // namespace
}  // namespace dlfeed::detail
