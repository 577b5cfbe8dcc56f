// SPDX-License-Identifier: Apache-2.0
// tf.train.Example wire parsing and serializing.
#include "dlfeed/format/example.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "test_util.h"

namespace dlfeed::example {
namespace {

// EXPECT_CONTAINS(text, part) without gmock.
#define EXPECT_CONTAINS(text, part)                                       \
  EXPECT_NE(std::string(text).find(std::string(part)), std::string::npos) \
      << "\"" << (text) << "\" lacks \"" << (part) << "\""
namespace w = wire;

using testing::as_bytes;
using testing::from_hex;
std::string str(std::span<const std::byte> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// Wraps Feature bodies into Example { Features { entry{key, Feature} } }.
std::vector<std::byte> example_of(const std::vector<std::pair<std::string, std::vector<std::byte>>>& features,
                                  bool with_unknown = false) {
  std::vector<std::byte> fs;
  for (const auto& [name, feature] : features) {
    std::vector<std::byte> entry;
    if (with_unknown) {
      w::append_tag(entry, 7, w::kFixed32);
      w::append_fixed32(entry, 0xdeadbeef);
    }
    w::append_length_delimited(entry, 1, as_bytes(name));
    w::append_length_delimited(entry, 2, feature);
    w::append_length_delimited(fs, 1, entry);
    if (with_unknown) {
      w::append_tag(fs, 9, w::kVarint);
      w::append_varint(fs, 1234567);
    }
  }
  std::vector<std::byte> ex;
  if (with_unknown) {  // unknown fields of every wire type before the features
    w::append_tag(ex, 2, w::kVarint);
    w::append_varint(ex, ~0ull);
    w::append_tag(ex, 3, w::kFixed64);
    w::append_fixed64(ex, 42);
    w::append_length_delimited(ex, 4, as_bytes("junk"));
    w::append_tag(ex, 5, w::kStartGroup);  // a group holding a nested group
    w::append_tag(ex, 1, w::kVarint);
    w::append_varint(ex, 7);
    w::append_tag(ex, 6, w::kStartGroup);
    w::append_tag(ex, 6, w::kEndGroup);
    w::append_tag(ex, 5, w::kEndGroup);
    w::append_tag(ex, 8, w::kFixed32);
    w::append_fixed32(ex, 1);
  }
  w::append_length_delimited(ex, 1, fs);
  return ex;
}

TEST(ExampleTest, SerializerMatchesTensorFlowBytes) {
  // tf.train.Example(features={'a': Int64List([1, -1, 300]), 'f': FloatList([1.5])}).SerializeToString()
  const auto tf = from_hex("0a270a160a016112111a0f0a0d01ffffffffffffffffff01ac020a0d0a0166120812060a040000c03f");
  const int64_t ints[] = {1, -1, 300};
  const float floats[] = {1.5f};
  EXPECT_EQ(ExampleBuilder().add_int64s("a", ints).add_floats("f", floats).serialize(), tf);

  auto parsed = parse_example(tf);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].first, "a");
  EXPECT_EQ((*parsed)[0].second.kind, FeatureKind::kInt64);
  EXPECT_EQ((*parsed)[0].second.int64s, (std::vector<int64_t>{1, -1, 300}));
  EXPECT_EQ((*parsed)[1].first, "f");
  EXPECT_EQ((*parsed)[1].second.floats, (std::vector<float>{1.5f}));
}

TEST(ExampleTest, RoundTripEveryKindZeroCopyBytes) {
  const std::string img(1000, 'x');
  const std::span<const std::byte> two[] = {as_bytes("first"), as_bytes("")};
  const float floats[] = {0.f, -2.5f, 1e30f};
  const int64_t ints[] = {0, INT64_MIN, INT64_MAX, -1};
  auto ex = ExampleBuilder()
                .add_bytes("image", as_bytes(img))
                .add_bytes("two", two)
                .add_floats("floats", floats)
                .add_int64s("ints", ints)
                .add_floats("empty", {})
                .serialize();
  auto parsed = parse_example(ex);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 5u);
  const Feature& image = (*parsed)[0].second;
  ASSERT_EQ(image.bytes.size(), 1u);
  EXPECT_EQ(str(image.bytes[0]), img);
  // Zero copy: the value views the serialized buffer.
  EXPECT_GE(image.bytes[0].data(), ex.data());
  EXPECT_LE(image.bytes[0].data() + image.bytes[0].size(), ex.data() + ex.size());
  ASSERT_EQ((*parsed)[1].second.bytes.size(), 2u);
  EXPECT_EQ(str((*parsed)[1].second.bytes[0]), "first");
  EXPECT_EQ(str((*parsed)[1].second.bytes[1]), "");
  EXPECT_EQ((*parsed)[2].second.floats, (std::vector<float>{0.f, -2.5f, 1e30f}));
  EXPECT_EQ((*parsed)[3].second.int64s, (std::vector<int64_t>{0, INT64_MIN, INT64_MAX, -1}));
  EXPECT_EQ((*parsed)[4].second.kind, FeatureKind::kFloat);
  EXPECT_TRUE((*parsed)[4].second.floats.empty());

  auto names = feature_names(ex);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"image", "two", "floats", "ints", "empty"}));
  auto missing = find_feature(ex, "nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->kind, FeatureKind::kNone);
  auto c = count_values(*find_feature(ex, "ints"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, 4u);
}

TEST(ExampleTest, UnpackedAndSplitPackedEncodingsWithUnknownFields) {
  // FloatList: unpacked, then a packed chunk, then unpacked; unknown fields between.
  std::vector<std::byte> fl;
  w::append_tag(fl, 1, w::kFixed32);
  float a = 1.25f, b = 2.5f, c = -3.f, d = 4.f;
  uint32_t bits;
  std::memcpy(&bits, &a, 4);
  w::append_fixed32(fl, bits);
  w::append_tag(fl, 2, w::kVarint);  // unknown
  w::append_varint(fl, 5);
  const float packed[] = {b, c};
  w::append_length_delimited(fl, 1, std::as_bytes(std::span<const float>(packed)));
  w::append_tag(fl, 1, w::kFixed32);
  std::memcpy(&bits, &d, 4);
  w::append_fixed32(fl, bits);
  std::vector<std::byte> float_feature;
  w::append_length_delimited(float_feature, 2, fl);
  w::append_tag(float_feature, 4, w::kFixed64);  // unknown inside Feature
  w::append_fixed64(float_feature, 9);

  // Int64List: unpacked varints and two packed chunks.
  std::vector<std::byte> il;
  w::append_tag(il, 1, w::kVarint);
  w::append_varint(il, static_cast<uint64_t>(int64_t{-7}));
  std::vector<std::byte> chunk;
  w::append_varint(chunk, 1);
  w::append_varint(chunk, 1ull << 40);
  w::append_length_delimited(il, 1, chunk);
  w::append_length_delimited(il, 3, as_bytes("unknown"));
  w::append_length_delimited(il, 1, chunk);
  std::vector<std::byte> int_feature;
  w::append_length_delimited(int_feature, 3, il);

  // BytesList with an unknown field.
  std::vector<std::byte> bl;
  w::append_tag(bl, 2, w::kFixed32);
  w::append_fixed32(bl, 0);
  w::append_length_delimited(bl, 1, as_bytes("payload"));
  std::vector<std::byte> bytes_feature;
  w::append_length_delimited(bytes_feature, 1, bl);

  auto ex = example_of({{"f", float_feature}, {"i", int_feature}, {"b", bytes_feature}}, /*with_unknown=*/true);
  auto parsed = parse_example(ex);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].second.floats, (std::vector<float>{a, b, c, d}));
  EXPECT_EQ((*parsed)[1].second.int64s, (std::vector<int64_t>{-7, 1, int64_t{1} << 40, 1, int64_t{1} << 40}));
  ASSERT_EQ((*parsed)[2].second.bytes.size(), 1u);
  EXPECT_EQ(str((*parsed)[2].second.bytes[0]), "payload");
}

TEST(ExampleTest, EmptyPackedChunksDecodeToNothing) {
  // Found by fuzz_example under UBSan: an empty packed float chunk into an
  // empty list memcpy'd from/to null pointers. TensorFlow never writes one,
  // the wire format allows it.
  std::vector<std::byte> fl;
  w::append_length_delimited(fl, 1, {});
  const float one = 1.f;
  w::append_length_delimited(fl, 1, std::as_bytes(std::span<const float>(&one, 1)));
  w::append_length_delimited(fl, 1, {});
  std::vector<std::byte> float_feature;
  w::append_length_delimited(float_feature, 2, fl);
  std::vector<std::byte> il;
  w::append_length_delimited(il, 1, {});
  std::vector<std::byte> int_feature;
  w::append_length_delimited(int_feature, 3, il);
  auto parsed = parse_example(example_of({{"f", float_feature}, {"i", int_feature}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[0].second.floats, (std::vector<float>{1.f}));
  EXPECT_TRUE((*parsed)[1].second.int64s.empty());
  const std::vector<std::byte> only_f = example_of({{"f", float_feature}});
  auto f = find_feature(only_f, "f");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(count_values(*f).value(), 1u);
}

TEST(ExampleTest, RepeatedKeyLastWins) {
  const int64_t one[] = {1}, two[] = {2};
  auto ex = ExampleBuilder().add_int64s("k", one).add_int64s("k", two).serialize();
  auto parsed = parse_example(ex);
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].second.int64s, (std::vector<int64_t>{2}));
  std::vector<int64_t> v;
  ASSERT_TRUE(decode_int64_list(*find_feature(ex, "k"), v).ok());
  EXPECT_EQ(v, (std::vector<int64_t>{2}));
}

TEST(ExampleTest, FindFeaturesFindsEachInOneWalkAsFindFeatureDoes) {
  const int64_t one[] = {1}, two[] = {2}, dims[] = {4, 8};
  const std::byte raw[] = {std::byte{7}, std::byte{9}};
  auto ex = ExampleBuilder()
                .add_int64s("k", one)
                .add_bytes("image", std::span<const std::byte>(raw))
                .add_int64s("dims", dims)
                .add_int64s("k", two)
                .serialize();
  const absl::string_view names[] = {"image", "k", "absent", "dims"};
  FeatureSlice out[4];
  out[2].kind = FeatureKind::kFloat;  // overwritten: every slot is set
  ASSERT_TRUE(find_features(ex, names, out).ok());
  for (size_t i = 0; i < 4; ++i) {
    const FeatureSlice one_walk = *find_feature(ex, names[i]);
    EXPECT_EQ(out[i].kind, one_walk.kind) << names[i];
    EXPECT_EQ(out[i].offset, one_walk.offset) << names[i];
    EXPECT_EQ(out[i].list.data(), one_walk.list.data()) << names[i];
  }
  EXPECT_EQ(out[2].kind, FeatureKind::kNone);
  std::vector<int64_t> v;
  ASSERT_TRUE(decode_int64_list(out[1], v).ok());
  EXPECT_EQ(v, (std::vector<int64_t>{2}));  // the last entry of a repeated key
  const std::byte cut[] = {std::byte{0x0a}, std::byte{0x05}};
  EXPECT_FALSE(find_features(cut, names, out).ok());
}

TEST(ExampleTest, EmptyBufferIsAnEmptyExample) {
  auto parsed = parse_example({});
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->empty());
}

TEST(ExampleTest, TruncatedAnywhereIsAnErrorWithOffset) {
  const float floats[] = {1.f, 2.f};
  const int64_t ints[] = {300, -1};
  auto ex = ExampleBuilder()
                .add_bytes("image", as_bytes("abcdefgh"))
                .add_floats("f", floats)
                .add_int64s("i", ints)
                .serialize();
  const Context ctx{"rec.tfrecord", 100};
  for (size_t cut = 1; cut < ex.size(); ++cut) {
    auto r = parse_example(std::span<const std::byte>(ex.data(), cut), ctx);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_CONTAINS(std::string(r.status().message()), "rec.tfrecord: at offset 1") << r.status();
    EXPECT_CONTAINS(std::string(r.status().message()), "of the tf.train.Example") << r.status();
  }
}

TEST(ExampleTest, BadWireInputIsRefused) {
  auto expect_error = [](std::vector<std::byte> ex, absl::string_view what) {
    auto r = parse_example(ex, {"x.tfrecord", 0});
    ASSERT_FALSE(r.ok()) << "accepted: " << what;
    EXPECT_CONTAINS(std::string(r.status().message()), what);
  };
  // An 11-byte varint.
  std::vector<std::byte> v;
  w::append_tag(v, 2, w::kVarint);
  for (int i = 0; i < 10; ++i) v.push_back(std::byte{0x80});
  v.push_back(std::byte{0x01});
  expect_error(v, "at most 10 bytes");
  // Wire types 6 and 7.
  expect_error({std::byte{0x0e}}, "wire type 6");
  expect_error({std::byte{0x0f}}, "wire type 7");
  // Field number 0.
  expect_error({std::byte{0x02}, std::byte{0x00}}, "field number");
  // An end-group with no group.
  std::vector<std::byte> eg;
  w::append_tag(eg, 3, w::kEndGroup);
  expect_error(eg, "outside any group");
  // A group never closed, and one closed by the wrong field.
  std::vector<std::byte> g;
  w::append_tag(g, 3, w::kStartGroup);
  expect_error(g, "end-group tag of field 3");
  w::append_tag(g, 4, w::kEndGroup);
  expect_error(g, "found end-group tag of field 4");
  // Groups nested too deep.
  std::vector<std::byte> deep;
  for (int i = 0; i < 100; ++i) w::append_tag(deep, 3, w::kStartGroup);
  expect_error(deep, "nested at most");
  // A length past the end of the buffer.
  expect_error({std::byte{0x0a}, std::byte{0x7f}, std::byte{0x00}}, "field 1 of 127 bytes");
  // A packed float list whose length is not a multiple of 4.
  std::vector<std::byte> fl;
  w::append_length_delimited(fl, 1, as_bytes("abcde"));
  std::vector<std::byte> feature;
  w::append_length_delimited(feature, 2, fl);
  expect_error(example_of({{"f", feature}}), "multiple of 4");
  // A packed int64 list whose last varint is cut by the chunk end.
  std::vector<std::byte> il;
  w::append_length_delimited(il, 1, std::vector<std::byte>{std::byte{0x81}});
  std::vector<std::byte> ifeature;
  w::append_length_delimited(ifeature, 3, il);
  expect_error(example_of({{"i", ifeature}}), "packed int64 value");
}

TEST(ExampleTest, ErrorNamesTheExactByte) {
  // Example { features(len 3) { entry(len 5 > 1 left) } }: the entry length is at byte 3.
  std::vector<std::byte> ex = {std::byte{0x0a}, std::byte{0x03}, std::byte{0x0a}, std::byte{0x05}, std::byte{0x00}};
  auto r = parse_example(ex, {"f.tfrecord", 1000});
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(std::string(r.status().message()), "f.tfrecord: at offset 1003");
  EXPECT_CONTAINS(std::string(r.status().message()), "byte 3 of the tf.train.Example");
}

TEST(ExampleTest, WrongKindIsAnError) {
  const float floats[] = {1.f};
  auto ex = ExampleBuilder().add_floats("f", floats).serialize();
  std::vector<int64_t> ints;
  auto st = decode_int64_list(*find_feature(ex, "f"), ints, {"p", 0});
  ASSERT_FALSE(st.ok());
  EXPECT_CONTAINS(std::string(st.message()), "expected int64_list, found float_list");
}

TEST(ExampleTest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(7);
  const float floats[] = {1.f, 2.f};
  const int64_t ints[] = {1, 2, 3};
  const auto valid = ExampleBuilder()
                         .add_bytes("image", as_bytes("0123456789"))
                         .add_floats("f", floats)
                         .add_int64s("i", ints)
                         .serialize();
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::byte> buf;
    if (iter % 2 == 0) {
      buf.resize(rng() % 64);
      for (auto& b : buf) b = static_cast<std::byte>(rng());
    } else {  // a valid Example with a few bytes flipped
      buf = valid;
      for (int k = 0; k < 3; ++k) buf[rng() % buf.size()] = static_cast<std::byte>(rng());
    }
    auto r = parse_example(buf);
    if (r.ok()) {
      for (const auto& [name, f] : *r) {
        for (const auto& b : f.bytes) {
          ASSERT_GE(b.data(), buf.data());
          ASSERT_LE(b.data() + b.size(), buf.data() + buf.size());
        }
      }
    }
  }
}

}  // namespace
}  // namespace dlfeed::example
