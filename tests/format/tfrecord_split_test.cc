// SPDX-License-Identifier: Apache-2.0
// A TFRecord record's CRCs checked from pieces (the split route,
// src/format/split_record.h): a framed record written by dlfeed's writer
// checked with its value elsewhere, whole and with a byte flipped in each
// piece.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "dlfeed/detail/crc32c.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/tfrecord.h"
#include "format/tfrecord_scan.h"

namespace dlfeed {
namespace {

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(g());
  return out;
}

// A record framed by dlfeed's writer: an Example of a 100,000-byte image and
// a label; `value_at` is where the image's bytes start in it.
struct Framed {
  std::vector<std::byte> bytes;
  size_t value_at = 0, value_len = 0;
};

Framed framed_record() {
  const auto image = random_bytes(100000, 7);
  const int64_t label = 42;
  std::vector<std::byte> payload;
  example::ExampleBuilder().add_bytes("image", image).add_int64s("label", {&label, 1}).serialize_to(payload);
  Framed f;
  tfrecord::append_record(f.bytes, payload);
  const auto at = std::search(f.bytes.begin(), f.bytes.end(), image.begin(), image.end());
  f.value_at = static_cast<size_t>(at - f.bytes.begin());
  f.value_len = image.size();
  return f;
}

TEST(TfRecordSplit, CrcsHoldFromPiecesAndAFlipInAnyPieceFailsThem) {
  const Framed f = framed_record();
  ASSERT_GT(f.value_at, tfrecord::kHeaderSize);
  // The value elsewhere (as in a batch slot); the skeleton's middle scrambled.
  std::vector<std::byte> value(f.bytes.begin() + f.value_at, f.bytes.begin() + f.value_at + f.value_len);
  std::vector<std::byte> skeleton = f.bytes;
  std::memset(skeleton.data() + f.value_at, 0xA5, f.value_len);
  EXPECT_TRUE(tfrecord::split_crcs_hold(skeleton, f.value_at, value));
  // The whole record, as it is on disk, passes the whole-record check too.
  EXPECT_TRUE(tfrecord::unframe_record(f.bytes, true, "x", 0).ok());
  // A flipped byte before the value, after it, in the length or its CRC, in
  // the footer: each fails.
  for (size_t at : {size_t{2}, size_t{9}, f.value_at - 1, f.value_at + f.value_len + 1, f.bytes.size() - 2}) {
    std::vector<std::byte> bad = skeleton;
    bad[at] ^= std::byte{0x10};
    EXPECT_FALSE(tfrecord::split_crcs_hold(bad, f.value_at, value)) << at;
  }
  std::vector<std::byte> bad_value = value;
  bad_value[5000] ^= std::byte{0x01};
  EXPECT_FALSE(tfrecord::split_crcs_hold(skeleton, f.value_at, bad_value));
  // A value said to lie where the framing is, or running into the footer.
  EXPECT_FALSE(tfrecord::split_crcs_hold(skeleton, 4, std::span<const std::byte>(value).first(10)));
  EXPECT_FALSE(tfrecord::split_crcs_hold(skeleton, f.value_at + 8, value));
}

// The value's CRC taken as it was read (ReadRequest::checksum) stands for its
// bytes: the right one passes without the bytes being read again, and one of
// other bytes fails the record, as a flipped value byte does.
TEST(TfRecordSplit, CrcsHoldWithTheValuesCrcTakenAsItWasRead) {
  const Framed f = framed_record();
  const std::vector<std::byte> value(f.bytes.begin() + f.value_at, f.bytes.begin() + f.value_at + f.value_len);
  std::vector<std::byte> skeleton = f.bytes;
  std::memset(skeleton.data() + f.value_at, 0xA5, f.value_len);
  const uint32_t right = detail::crc32c(value.data(), value.size());
  EXPECT_TRUE(tfrecord::split_crcs_hold(skeleton, f.value_at, value, &right));
  std::vector<std::byte> other = value;
  other[77] ^= std::byte{0x04};
  const uint32_t wrong = detail::crc32c(other.data(), other.size());
  EXPECT_FALSE(tfrecord::split_crcs_hold(skeleton, f.value_at, value, &wrong));
  // The given CRC is what counts: the bytes themselves are not read.
  EXPECT_TRUE(tfrecord::split_crcs_hold(skeleton, f.value_at, other, &right));
  std::vector<std::byte> bad = skeleton;
  bad[f.value_at - 1] ^= std::byte{0x10};
  EXPECT_FALSE(tfrecord::split_crcs_hold(bad, f.value_at, value, &right)) << "a flip around the value still fails";
}

}  // namespace
}  // namespace dlfeed
