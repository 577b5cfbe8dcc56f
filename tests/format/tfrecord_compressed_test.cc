// SPDX-License-Identifier: Apache-2.0
// Compressed TFRecord files (gzip, zlib): detection, checkpoints and random-access inflate, their errors.
#include "tfrecord_fixture.h"

namespace dlfeed {
namespace {

TEST(CompressionTest, DetectByMagicNotName) {
  using tfrecord::Compression;
  std::vector<Extent> ext;
  const auto plain = plain_records(3, ext);
  const auto gz = tfrecord::compress(plain, Compression::kGzip);
  const auto zl = tfrecord::compress(plain, Compression::kZlib);
  EXPECT_EQ(tfrecord::detect_compression(std::span(gz).first(12), gz.size()), Compression::kGzip);
  EXPECT_EQ(tfrecord::detect_compression(std::span(zl).first(12), zl.size()), Compression::kZlib);
  EXPECT_EQ(tfrecord::detect_compression(std::span(plain).first(12), plain.size()), Compression::kNone);
  // Every valid RFC 1950 header (CINFO 0..7, all FLEVELs) is ZLIB; a wrong FCHECK, CM or a
  // preset dictionary is not.
  for (int cinfo = 0; cinfo <= 7; ++cinfo) {
    for (int flevel = 0; flevel < 4; ++flevel) {
      const int cmf = (cinfo << 4) | 8;
      const int flg = (flevel << 6) | (31 - ((cmf << 8) | (flevel << 6)) % 31) % 31;  // FCHECK, no FDICT
      ASSERT_EQ(((cmf << 8) | flg) % 31, 0);
      if (flg & 0x20) continue;
      std::vector<std::byte> h = {std::byte(cmf), std::byte(flg)};
      EXPECT_EQ(tfrecord::detect_compression(h, 100), Compression::kZlib) << cmf << " " << flg;
      h[1] = std::byte(flg ^ 1);
      EXPECT_NE(tfrecord::detect_compression(h, 100), Compression::kZlib);
    }
  }
  EXPECT_EQ(tfrecord::detect_compression(from_hex("8801"), 100), Compression::kNone);    // CINFO 8
  EXPECT_EQ(tfrecord::detect_compression(from_hex("78bb"), 100), Compression::kNone);    // FDICT
  EXPECT_EQ(tfrecord::detect_compression(from_hex("1f8b09"), 100), Compression::kNone);  // not deflate
}

TEST(CompressionTest, CheckpointsAndRandomAccessInflate) {
  using tfrecord::Compression;
  std::vector<Extent> ext;
  const auto plain = plain_records(60, ext);
  const fs::path dir = fs::path(DLFEED_TEST_TMPDIR) / "tfrecord" / "checkpoints";
  fs::create_directories(dir);
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    // Blocks every 3000 input bytes end mid-byte (bits != 0) as often as not.
    for (size_t block_every : {size_t{0}, size_t{3000}}) {
      SCOPED_TRACE(absl::StrCat(tfrecord::compression_name(c), " block_every ", block_every));
      const auto z = tfrecord::compress(plain, c, 6, block_every);
      const std::string p = (dir / "f.z").string();
      { std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(z.data()), z.size()); }
      auto file = detail::File::open(p);
      ASSERT_TRUE(file.ok());
      const uint64_t span = 16384;
      std::vector<uint64_t> visited;
      auto ix = tfrecord::scan_compressed(
          *file, c, true,
          [&](uint64_t k, uint64_t off, std::span<const std::byte> framed) {
            EXPECT_EQ(off, ext[k].offset);
            EXPECT_TRUE(std::equal(framed.begin(), framed.end(), plain.begin() + off));
            visited.push_back(k);
            return absl::OkStatus();
          },
          span);
      ASSERT_TRUE(ix.ok()) << ix.status();
      ASSERT_EQ(ix->num_records(), ext.size());
      ASSERT_EQ(visited.size(), ext.size());
      EXPECT_EQ(ix->inflated_size, plain.size());
      EXPECT_EQ(ix->record_start.back(), plain.size());
      ASSERT_FALSE(ix->points.empty());
      EXPECT_EQ(ix->points[0].out, 0u);
      EXPECT_TRUE(ix->points[0].window.empty());
      size_t with_bits = 0;
      for (size_t i = 0; i < ix->points.size(); ++i) {
        EXPECT_LE(ix->points[i].window.size(), tfrecord::kWindowSize);
        EXPECT_EQ(ix->points[i].window.size(), std::min<uint64_t>(ix->points[i].out, tfrecord::kWindowSize));
        if (i) {
          EXPECT_GT(ix->points[i].out, ix->points[i - 1].out);
        }
        with_bits += ix->points[i].bits != 0;
      }
      if (block_every) {
        // At most one checkpoint per record; each of the 12 records longer than the
        // span is followed by a record that needs a new one.
        EXPECT_GE(ix->points.size(), 12u);
        EXPECT_LE(ix->points.size(), ext.size());
        EXPECT_GT(with_bits, 0u);
      } else {
        EXPECT_GE(ix->points.size(), 1u);
      }
      for (size_t k = 0; k < ext.size(); ++k) {
        EXPECT_EQ(ix->record_start[k], ext[k].offset);
        const auto& pt = ix->points[ix->record_point[k]];
        EXPECT_LE(pt.out, ext[k].offset);
        // A record's checkpoint is a span, plus a block, away at most.
        if (block_every) {
          EXPECT_LT(ext[k].offset - pt.out, span + 2 * block_every);
        }
        const Extent e = ix->extent(k);
        EXPECT_EQ(e.offset, pt.first_byte());
        EXPECT_LE(e.offset + e.length, z.size());
      }
      // Every record, in order (continuing), backwards (restarting), and interleaving two streams.
      auto read = [&](size_t k, uint64_t id) {
        const Extent e = ix->extent(k);
        std::span<const std::byte> raw(z.data() + e.offset, e.length);
        std::vector<std::byte> out(ext[k].length);
        absl::Status st =
            tfrecord::inflate_at(ix->points[ix->record_point[k]], ix->record_point[k], raw, ext[k].offset, out, id, p);
        EXPECT_TRUE(st.ok()) << "record " << k << ": " << st;
        EXPECT_TRUE(std::equal(out.begin(), out.end(), plain.begin() + ext[k].offset)) << "record " << k;
      };
      const uint64_t a = tfrecord::new_stream_id(), b = tfrecord::new_stream_id();
      for (size_t k = 0; k < ext.size(); ++k) read(k, a);
      for (size_t k = ext.size(); k-- > 0;) read(k, a);
      for (size_t k = 0; k < ext.size(); ++k) read(k, k % 3 ? a : b);
    }
  }
}

TEST_F(TfRecordTest, GzipAndZlibFilesReadLikePlainOnes) {
  using tfrecord::Compression;
  const std::string plain_path = path("plain.tfrecord");
  const auto ext = write_file(plain_path, 40);
  const auto plain = read_bytes(plain_path);
  auto want = open_tfrecord(plain_path, FormatOptions{});
  ASSERT_TRUE(want.ok());
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    // Any name: the magic decides.
    const std::string p = path(absl::StrCat("data_", tfrecord::compression_name(c), ".bin"));
    write_bytes(p, tfrecord::compress(plain, c));
    for (const char* feature : {"image", "floats", "ints"}) {
      FormatOptions o;
      o.feature = feature;
      auto got = open_tfrecord(p, o);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), ext.size());
      EXPECT_EQ(got->sources[0]->layout(), c == Compression::kGzip ? "tfrecord:gzip" : "tfrecord:zlib");
      EXPECT_CONTAINS(got->sources[0]->describe(), "inflate checkpoints");
      o.feature = feature;
      auto plain_idx = open_tfrecord(plain_path, o);
      ASSERT_TRUE(plain_idx.ok());
      std::vector<std::byte> raw, scratch, raw2, scratch2;
      for (size_t k = 0; k < ext.size(); ++k) {
        // Shapes are exact at open (every record was parsed).
        EXPECT_GE(got->ref(k).shape[0], 0);
        auto s = read_sample(*got, k, raw, scratch);
        ASSERT_TRUE(s.ok()) << s.status();
        auto t = read_sample(*plain_idx, k, raw2, scratch2);
        ASSERT_TRUE(t.ok());
        EXPECT_EQ(s->shape, t->shape);
        EXPECT_EQ(got->ref(k).shape, t->shape);
        EXPECT_EQ(s->dtype, t->dtype);
        EXPECT_TRUE(std::equal(s->bytes.begin(), s->bytes.end(), t->bytes.begin(), t->bytes.end())) << k;
      }
    }
  }
}

TEST_F(TfRecordTest, CompressedEmptyAndOneRecord) {
  using tfrecord::Compression;
  const std::string e = path("empty.gz");
  write_bytes(e, tfrecord::compress({}, Compression::kGzip));
  auto r = open_tfrecord(e, FormatOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 0u);
  const std::string one_plain = path("one.tfrecord");
  write_file(one_plain, 1);
  const std::string one = path("one.z");
  write_bytes(one, tfrecord::compress(read_bytes(one_plain), Compression::kZlib));
  r = open_tfrecord(one, FormatOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*r, 0, raw, scratch);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s->bytes.data()), s->bytes.size()), image_of(0));
}

TEST_F(TfRecordTest, CompressedErrorsNameFileAndOffset) {
  using tfrecord::Compression;
  const std::string plain_path = path("plain.tfrecord");
  write_file(plain_path, 30);
  const auto plain = read_bytes(plain_path);
  const auto gz = tfrecord::compress(plain, Compression::kGzip);
  const std::string p = path("bad.tfrecord.gz");
  auto error_of = [&](const std::vector<std::byte>& bytes) {
    write_bytes(p, bytes);
    auto r = open_tfrecord(p, FormatOptions{});
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  // Truncated anywhere: inside the deflate data, inside the trailer.
  for (size_t cut : {gz.size() / 3, gz.size() / 2, gz.size() - 9, gz.size() - 4, gz.size() - 1}) {
    SCOPED_TRACE(cut);
    const std::string msg = error_of(std::vector<std::byte>(gz.begin(), gz.begin() + cut));
    EXPECT_CONTAINS(msg, p + ": at offset " + std::to_string(cut));
    EXPECT_CONTAINS(msg, "truncated");
  }
  // A wrong CRC-32 in the trailer, and a wrong ISIZE.
  auto bad = gz;
  bad[gz.size() - 8] ^= std::byte{1};
  std::string msg = error_of(bad);
  EXPECT_CONTAINS(msg, p + ": at offset ");
  EXPECT_CONTAINS(msg, "CRC-32");
  bad = gz;
  bad[gz.size() - 2] ^= std::byte{1};
  EXPECT_CONTAINS(error_of(bad), "length");
  // A ZLIB stream's Adler-32.
  auto zl = tfrecord::compress(plain, Compression::kZlib);
  zl.back() ^= std::byte{1};
  EXPECT_CONTAINS(error_of(zl), "Adler-32");
  // Corrupt deflate data: whatever zlib or the record checks say, it names the file.
  for (size_t at : {size_t{12}, gz.size() / 2}) {
    bad = gz;
    for (size_t i = 0; i < 8; ++i) bad[at + i] ^= std::byte{0x5a};
    msg = error_of(bad);
    EXPECT_CONTAINS(msg, p);
    EXPECT_CONTAINS(msg, "at offset");
  }
  // Trailing bytes after the stream.
  bad = gz;
  bad.push_back(std::byte{0});
  msg = error_of(bad);
  EXPECT_CONTAINS(msg, p + ": at offset " + std::to_string(gz.size()));
  EXPECT_CONTAINS(msg, "1 more bytes");
  // A bad payload CRC inside the stream: the inflated offset, named as such.
  auto framed = plain;
  framed[read_bytes(plain_path).size() - 1] ^= std::byte{1};  // the last record's payload CRC
  msg = error_of(tfrecord::compress(framed, Compression::kGzip));
  EXPECT_CONTAINS(msg, p + " (inflated GZIP stream): at offset " + std::to_string(plain.size() - 4));
  EXPECT_CONTAINS(msg, "payload CRC");
  // The inflated stream ends inside a record.
  msg = error_of(tfrecord::compress(std::span(plain).first(plain.size() - 5), Compression::kGzip));
  EXPECT_CONTAINS(msg, "(inflated GZIP stream)");
  EXPECT_CONTAINS(msg, "cut short");
}

TEST_F(TfRecordTest, CompressedFileChangedAfterOpenFailsAtRead) {
  const std::string plain_path = path("plain.tfrecord");
  write_file(plain_path, 20);
  const auto gz = tfrecord::compress(read_bytes(plain_path), tfrecord::Compression::kGzip);
  const std::string p = path("c.gz");
  write_bytes(p, gz);
  auto r = open_tfrecord(p, FormatOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  auto bad = gz;
  for (size_t i = 20; i < gz.size() - 8; ++i) bad[i] ^= std::byte{0x33};
  write_bytes(p, bad);
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*r, 19, raw, scratch);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), p);
}

TEST_F(TfRecordTest, SidecarIgnoredForCompressedFiles) {
  const std::string plain_path = path("plain.tfrecord");
  write_file(plain_path, 5);
  const std::string p = path("c.tfrecord.gz");
  write_bytes(p, tfrecord::compress(read_bytes(plain_path), tfrecord::Compression::kGzip));
  { std::ofstream(p + ".idx") << "0 99999\n"; }  // offsets of no stream at all
  FormatOptions o;
  o.write_index_files = true;
  auto r = open_tfrecord(p, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 5u);
  EXPECT_EQ(read_text(p + ".idx"), "0 99999\n");  // not rewritten
  // The plain-file functions refuse a compressed file rather than misread it.
  auto f = detail::File::open(p);
  EXPECT_CONTAINS(tfrecord::scan_records(*f, true).status().message(), "GZIP-compressed");
}

TEST_F(TfRecordTest, SequenceExampleIsRefused) {
  // tf.train.SequenceExample(context={'a': int64 [1]}, feature_lists={'s': [int64 [1], int64 [2]]}).
  std::vector<std::byte> feature_lists;
  size_t ctx_size = 0;  // field 2's tag follows the context
  {
    const int64_t one[] = {1};
    auto ctx = example::ExampleBuilder().add_int64s("a", one).serialize();  // Example{features=1} == context
    ctx_size = ctx.size();
    std::vector<std::byte> fl;  // FeatureList { repeated Feature feature = 1; }
    std::vector<std::byte> list, feature;
    example::wire::append_length_delimited(list, 1, from_hex("01"));  // packed int64 [1]
    example::wire::append_length_delimited(feature, 3, list);
    example::wire::append_length_delimited(fl, 1, feature);
    std::vector<std::byte> entry;
    example::wire::append_length_delimited(entry, 1, as_bytes(std::string("s")));
    example::wire::append_length_delimited(entry, 2, fl);
    std::vector<std::byte> lists;
    example::wire::append_length_delimited(lists, 1, entry);
    feature_lists = ctx;
    example::wire::append_length_delimited(feature_lists, 2, lists);
  }
  std::vector<std::byte> file;
  tfrecord::append_record(file, example_of(0));
  tfrecord::append_record(file, feature_lists);
  const std::string p = path("seq.tfrecord");
  write_bytes(p, file);
  FormatOptions o;
  o.feature = "a";
  // The first record is an Example without 'a': not this test. Make the SequenceExample first.
  std::vector<std::byte> first;
  tfrecord::append_record(first, feature_lists);
  write_bytes(p, first);
  auto r = open_tfrecord(p, o);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), p + ": at offset ");
  EXPECT_CONTAINS(r.status().message(), "SequenceExample");
  // Later in a file: at read, with the record's offset.
  o.feature = "image";
  write_bytes(p, file);
  r = open_tfrecord(p, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*r, 1, raw, scratch);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), "SequenceExample");
  const uint64_t tag_at = r->ref(1).extents[0].offset + kHeaderSize + ctx_size;
  EXPECT_CONTAINS(s.status().message(), p + ": at offset " + std::to_string(tag_at));
}

TEST_F(TfRecordTest, CompressedMutationsAreErrorsOrReadsNeverCrashes) {
  // Random byte flips and cuts of a GZIP/ZLIB file: open and every read either
  // succeed or fail with an error naming the file (ASan builds check the rest).
  const std::string plain_path = path("plain.tfrecord");
  write_file(plain_path, 12);
  const auto plain = read_bytes(plain_path);
  std::mt19937 rng(5);
  const std::string p = path("m.gz");
  for (auto c : {tfrecord::Compression::kGzip, tfrecord::Compression::kZlib}) {
    const auto z = tfrecord::compress(plain, c, 6, 500);
    for (int round = 0; round < 150; ++round) {
      auto m = z;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) m[rng() % m.size()] ^= std::byte(1 + rng() % 255);
      if (round % 5 == 0) m.resize(rng() % m.size());
      write_bytes(p, m);
      FormatOptions o;
      o.verify_crc = round % 2 == 0;
      auto r = open_tfrecord(p, o);
      if (!r.ok()) {
        EXPECT_CONTAINS(r.status().message(), p);
        continue;
      }
      std::vector<std::byte> raw, scratch;
      for (size_t k = 0; k < r->size(); ++k) {
        auto s = read_sample(*r, k, raw, scratch);
        if (!s.ok()) {
          EXPECT_CONTAINS(s.status().message(), p);
        }
      }
    }
  }
}

TEST_F(TfRecordTest, PlainRecordWithMagicLookingLengthIsRead) {
  // A real record whose length bytes happen to look like ZLIB magic is read as plain.
  const std::string real = path("real.tfrecord");
  std::vector<std::byte> file;
  std::string image(0x9c78, 'a');  // shrink until the Example is 0x9c78 = 40056 bytes: length bytes 78 9c
  std::vector<std::byte> ex;
  for (int i = 0; i < 4; ++i) {
    ex = example::ExampleBuilder().add_bytes("image", as_bytes(image)).serialize();
    image.resize(image.size() - (ex.size() - 0x9c78));
  }
  ASSERT_EQ(ex.size() & 0xffff, 0x9c78u) << ex.size();
  tfrecord::append_record(file, ex);
  write_bytes(real, file);
  auto ok = open_tfrecord(real, FormatOptions{});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->sources[0]->layout(), "tfrecord");
}

}  // namespace
}  // namespace dlfeed
