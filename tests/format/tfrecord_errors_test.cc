// SPDX-License-Identifier: Apache-2.0
// TFRecord bad input: truncated files, bad CRCs, lengths past the end, garbage
// examples, a missing feature; each error names the file and the offset.
#include "tfrecord_fixture.h"

namespace dlfeed {
namespace {

// ---- bad input ----

TEST_F(TfRecordTest, EmptyFileHasNoSamplesShortFileIsAnError) {
  const std::string p = path("empty.tfrecord");
  write_bytes(p, {});
  auto idx = open_tfrecord(p, FormatOptions{});
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->size(), 0u);
  EXPECT_EQ(idx->file_begin, (std::vector<uint64_t>{0, 0}));
  EXPECT_CONTAINS(idx->sources[0]->describe(), "0 records");

  const std::string s = path("short.tfrecord");
  write_bytes(s, from_hex("0500000000"));
  auto r = open_tfrecord(s, FormatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), s + ": at offset 0: expected a 12-byte header for record 0");
  EXPECT_CONTAINS(r.status().message(), "truncated inside the record header");
}

TEST_F(TfRecordTest, TruncatedAtEveryByteOfTheLastRecord) {
  const std::string p = path("full.tfrecord");
  const auto recs = write_file(p, 3);
  const auto bytes = read_bytes(p);
  const Extent last = recs.back();
  const std::string t = path("cut.tfrecord");
  for (uint64_t cut = last.offset + 1; cut < last.offset + last.length; ++cut) {
    write_bytes(t, std::span<const std::byte>(bytes.data(), cut));
    for (bool verify : {true, false}) {
      FormatOptions opt;
      opt.verify_crc = verify;
      auto r = open_tfrecord(t, opt);
      ASSERT_FALSE(r.ok()) << "cut " << cut;
      const std::string msg(r.status().message());
      const uint64_t rel = cut - last.offset;
      if (rel < kHeaderSize) {
        EXPECT_CONTAINS(msg, absl::StrCat(t, ": at offset ", last.offset, ": expected a 12-byte header for record 2"));
        EXPECT_CONTAINS(msg, "truncated inside the record header");
      } else if (rel < last.length - 4) {
        EXPECT_CONTAINS(msg, absl::StrCat(t, ": at offset ", last.offset, ": expected record 2"));
        EXPECT_CONTAINS(msg, "truncated inside its payload");
      } else {
        EXPECT_CONTAINS(msg, absl::StrCat(t, ": at offset ", last.offset + last.length - 4,
                                          ": expected the 4-byte payload CRC of record 2"));
        EXPECT_CONTAINS(msg, "truncated inside the record footer");
      }
    }
  }
}

TEST_F(TfRecordTest, BadLengthCrc) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 3);
  auto bytes = read_bytes(p);
  bytes[recs[1].offset + 9] ^= std::byte{0x40};
  write_bytes(p, bytes);
  auto r = open_tfrecord(p, FormatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(),
                  absl::StrCat(p, ": at offset ", recs[1].offset + 8, ": expected length CRC 0x"));
  EXPECT_CONTAINS(r.status().message(), "header is corrupt");
  FormatOptions off;
  off.verify_crc = false;
  auto ok = open_tfrecord(p, off);
  ASSERT_TRUE(ok.ok()) << ok.status();
  std::vector<std::byte> raw, scratch;
  EXPECT_TRUE(read_sample(*ok, 1, raw, scratch).ok());
  EXPECT_CONTAINS(ok->sources[0]->describe(), "CRC checks off");
}

TEST_F(TfRecordTest, BadPayloadCrc) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 4);
  auto bytes = read_bytes(p);
  // Flip a byte of record 2's image (the image is the last bytes of the first feature).
  const std::string img = image_of(2);
  const auto payload = std::span<const std::byte>(bytes).subspan(recs[2].offset + kHeaderSize, recs[2].length - 16);
  const auto it = std::search(payload.begin(), payload.end(), as_bytes(img).begin(), as_bytes(img).end());
  ASSERT_NE(it, payload.end());
  const size_t at = static_cast<size_t>(it - std::span<const std::byte>(bytes).begin()) + 3;
  bytes[at] ^= std::byte{0xff};
  write_bytes(p, bytes);
  auto idx = open_tfrecord(p, FormatOptions{});  // the scan reads headers only
  ASSERT_TRUE(idx.ok()) << idx.status();
  std::vector<std::byte> raw, scratch;
  EXPECT_TRUE(read_sample(*idx, 1, raw, scratch).ok());
  auto s = read_sample(*idx, 2, raw, scratch);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_CONTAINS(msg,
                  absl::StrCat(p, ": at offset ", recs[2].offset + recs[2].length - 4, ": expected payload CRC 0x"));
  EXPECT_CONTAINS(msg, absl::StrCat("record at offset ", recs[2].offset));
  EXPECT_CONTAINS(msg, ", found 0x");
  FormatOptions off;
  off.verify_crc = false;
  idx = open_tfrecord(p, off);
  ASSERT_TRUE(idx.ok());
  s = read_sample(*idx, 2, raw, scratch);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->bytes.size(), img.size());
  EXPECT_EQ(static_cast<char>(s->bytes[3]), static_cast<char>(img[3] ^ 0xff));  // the corrupt byte, as is
}

TEST_F(TfRecordTest, LengthPastEof) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 2);
  auto bytes = read_bytes(p);
  // A huge length with a correct header CRC.
  std::vector<std::byte> hdr;
  tfrecord::append_record(hdr, {});
  const uint64_t huge = 1ull << 40;
  for (int i = 0; i < 8; ++i) hdr[i] = static_cast<std::byte>(huge >> (8 * i));
  const uint32_t crc = tfrecord::masked_crc32c(std::span<const std::byte>(hdr).first(8));
  for (int i = 0; i < 4; ++i) hdr[8 + i] = static_cast<std::byte>(crc >> (8 * i));
  std::memcpy(bytes.data() + recs[1].offset, hdr.data(), kHeaderSize);
  write_bytes(p, bytes);
  auto r = open_tfrecord(p, FormatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(),
                  absl::StrCat(p, ": at offset ", recs[1].offset, ": expected record 1 with a ", huge));
  EXPECT_CONTAINS(r.status().message(), "points past the end of the file");
}

TEST_F(TfRecordTest, GarbageExampleBytes) {
  const std::string p = path("garbage.tfrecord");
  std::vector<std::byte> file;
  tfrecord::append_record(file, example_of(0));
  const auto garbage = from_hex("0a7f0102");  // features field claims 127 bytes
  tfrecord::append_record(file, garbage);
  write_bytes(p, file);
  auto idx = open_tfrecord(p, FormatOptions{});
  ASSERT_TRUE(idx.ok()) << idx.status();
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*idx, 1, raw, scratch);
  ASSERT_FALSE(s.ok());
  const uint64_t payload_at = idx->ref(1).extents[0].offset + kHeaderSize;
  EXPECT_CONTAINS(s.status().message(),
                  absl::StrCat(p, ": at offset ", payload_at + 1, ": expected field 1 of 127 bytes"));
  EXPECT_CONTAINS(s.status().message(), "byte 1 of the tf.train.Example");

  // Garbage in the first record fails at open.
  file.clear();
  tfrecord::append_record(file, garbage);
  write_bytes(p, file);
  EXPECT_FALSE(open_tfrecord(p, FormatOptions{}).ok());
}

TEST_F(TfRecordTest, MissingFeatureNamesWhatIsThere) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 2);
  FormatOptions opt;
  opt.feature = "pixels";
  auto r = open_tfrecord(p, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  const std::string msg(r.status().message());
  EXPECT_CONTAINS(msg, p + ": at offset 0: expected feature 'pixels'");
  EXPECT_CONTAINS(msg, "only features 'image', 'floats', 'ints'");

  // Present in record 0, missing from record 1: the error comes at read time.
  std::vector<std::byte> file;
  tfrecord::append_record(file, example_of(0));
  const int64_t one[] = {1};
  tfrecord::append_record(file, example::ExampleBuilder().add_int64s("other", one).serialize());
  tfrecord::append_record(file, example::ExampleBuilder().add_int64s("image", one).serialize());
  write_bytes(p, file);
  auto idx = open_tfrecord(p, FormatOptions{});
  ASSERT_TRUE(idx.ok()) << idx.status();
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*idx, 1, raw, scratch);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), absl::StrCat(p, ": at offset ", idx->ref(1).extents[0].offset,
                                                     ": expected feature 'image' in the tf.train.Example of record 1"));
  EXPECT_CONTAINS(s.status().message(), "only features 'other'");
  // A different kind than the first record's.
  s = read_sample(*idx, 2, raw, scratch);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), "as a bytes_list (as in the first record), found int64_list");
}

}  // namespace
}  // namespace dlfeed
