// TFRecord framing, CRC32C, sidecars, open_tfrecord and its errors.
#include "dlfeed/format/tfrecord.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "test_util.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/format.h"
#include "dlfeed/gen/generate.h"

#define EXPECT_CONTAINS(text, part)                                                          \
  EXPECT_NE(std::string(text).find(std::string(part)), std::string::npos)                    \
      << "\"" << (text) << "\" lacks \"" << (part) << "\""

namespace dlfeed {
namespace {
namespace fs = std::filesystem;
using tfrecord::kHeaderSize;

using testing::as_bytes;
using testing::from_hex;

class TfRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(DLFEED_TEST_TMPDIR) / "tfrecord" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void write_bytes(const std::string& p, std::span<const std::byte> bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  static std::vector<std::byte> read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(s.size());
    std::memcpy(out.data(), s.data(), s.size());
    return out;
  }
  static std::string read_text(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // Image of sample k: k+1 bytes... varying sizes, so records differ in length.
  static std::string image_of(size_t k) {
    std::string s(10 + 7 * k, '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(k * 31 + i);
    return s;
  }
  static std::vector<std::byte> example_of(size_t k) {
    const float floats[] = {static_cast<float>(k), 0.5f};
    const int64_t ints[] = {static_cast<int64_t>(k), -static_cast<int64_t>(k), 1 << 20};
    const std::string img = image_of(k);
    return example::ExampleBuilder()
        .add_bytes("image", as_bytes(img))
        .add_floats("floats", floats)
        .add_int64s("ints", ints)
        .serialize();
  }
  // A file of n records; returns the record extents.
  std::vector<Extent> write_file(const std::string& p, size_t n) {
    auto w = tfrecord::RecordWriter::create(p);
    EXPECT_TRUE(w.ok()) << w.status();
    for (size_t k = 0; k < n; ++k) EXPECT_TRUE(w->write(example_of(k)).ok());
    EXPECT_TRUE(w->close().ok());
    return w->records();
  }

  fs::path dir_;
};

// ---- CRC32C ----

TEST(Crc32cTest, KnownVectorsPortableAndHardware) {
  const std::string digits = "123456789";
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  std::vector<uint8_t> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<uint8_t>(i);
  struct Impl {
    const char* name;
    uint32_t (*fn)(uint32_t, const void*, size_t);
  };
  std::vector<Impl> impls = {{"portable", detail::crc32c_extend_portable}, {"dispatch", detail::crc32c_extend}};
  if (detail::crc32c_hardware_available()) {
    impls.push_back({"hardware", detail::crc32c_extend_hardware});
  } else {
    std::printf("note: no SSE4.2 crc32 on this CPU; hardware path not tested\n");
  }
  for (const Impl& impl : impls) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.fn(0, digits.data(), digits.size()), 0xE3069283u);
    EXPECT_EQ(impl.fn(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(impl.fn(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(impl.fn(0, ascending.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(impl.fn(0, nullptr, 0), 0u);
    // Extending in pieces equals one pass.
    EXPECT_EQ(impl.fn(impl.fn(0, digits.data(), 4), digits.data() + 4, 5), 0xE3069283u);
  }
}

TEST(Crc32cTest, HardwareEqualsPortableOnEveryLengthAndAlignment) {
  if (!detail::crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2";
  std::mt19937 rng(1);
  std::vector<uint8_t> buf(1100);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; n + start <= buf.size(); n += (n < 80 ? 1 : 37)) {
      ASSERT_EQ(detail::crc32c_extend_hardware(0x1234, buf.data() + start, n),
                detail::crc32c_extend_portable(0x1234, buf.data() + start, n))
          << "start " << start << " n " << n;
    }
  }
}

// ---- framing ----

TEST(FramingTest, MaskedCrcAndTensorFlowVectors) {
  EXPECT_EQ(tfrecord::mask_crc(0), 0xa282ead8u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(tfrecord::unmask_crc(tfrecord::mask_crc(c)), c);
  // tf.io.TFRecordWriter: write(b"hello"); write(b"").
  const auto tf = from_hex(
      "0500000000000000eab2043e68656c6c6fbb1f1c19"
      "000000000000000029039807d8ea82a2");
  std::vector<std::byte> ours;
  tfrecord::append_record(ours, as_bytes("hello"));
  tfrecord::append_record(ours, {});
  EXPECT_EQ(ours, tf);
  auto p = tfrecord::unframe_record(std::span<const std::byte>(tf).first(21), true, "f", 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p->data()), p->size()), "hello");
  EXPECT_EQ(p->data(), tf.data() + kHeaderSize);  // a view, no copy
  auto e = tfrecord::unframe_record(std::span<const std::byte>(tf).subspan(21), true, "f", 21);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->empty());
}

TEST(FramingTest, UnframeErrors) {
  std::vector<std::byte> rec;
  tfrecord::append_record(rec, as_bytes("payload!"));
  // Too short.
  auto r = tfrecord::unframe_record(std::span<const std::byte>(rec).first(10), true, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "a.tfrecord: at offset 50");
  // Extent longer than the header says.
  std::vector<std::byte> longer = rec;
  longer.push_back(std::byte{0});
  r = tfrecord::unframe_record(longer, false, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "length 8 in the record header");
  // Length CRC.
  std::vector<std::byte> bad = rec;
  bad[9] ^= std::byte{1};
  r = tfrecord::unframe_record(bad, true, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "a.tfrecord: at offset 58: expected length CRC");
  EXPECT_TRUE(tfrecord::unframe_record(bad, false, "a.tfrecord", 50).ok());
  // Payload CRC.
  bad = rec;
  bad[kHeaderSize + 2] ^= std::byte{1};
  r = tfrecord::unframe_record(bad, true, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "a.tfrecord: at offset 70: expected payload CRC 0x");
  EXPECT_CONTAINS(r.status().message(), "record at offset 50");
  EXPECT_TRUE(tfrecord::unframe_record(bad, false, "a.tfrecord", 50).ok());
}

// ---- writer -> reader ----

TEST_F(TfRecordTest, RoundTripByScan) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 20);
  FormatOptions opt;
  auto idx = open_tfrecord(p, opt);
  ASSERT_TRUE(idx.ok()) << idx.status();
  ASSERT_EQ(idx->size(), 20u);
  EXPECT_EQ(idx->files, std::vector<std::string>{p});
  EXPECT_EQ(idx->file_begin, (std::vector<uint64_t>{0, 20}));
  EXPECT_EQ(idx->sources[0]->layout(), "tfrecord");
  EXPECT_CONTAINS(idx->sources[0]->describe(), "feature 'image'");
  EXPECT_CONTAINS(idx->sources[0]->describe(), "20 records");
  EXPECT_CONTAINS(idx->sources[0]->describe(), "scan");
  std::vector<std::byte> raw, scratch;
  for (size_t k = 0; k < 20; ++k) {
    const SampleRef& ref = idx->samples[k];
    EXPECT_EQ(ref.item, k);
    ASSERT_EQ(ref.extents.size(), 1u);
    EXPECT_EQ(ref.extents[0], recs[k]);
    EXPECT_EQ(ref.dtype, DType::u8());
    EXPECT_EQ(ref.shape, Shape{-1});
    auto s = read_sample(*idx, k, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    const std::string img = image_of(k);
    ASSERT_EQ(s->bytes.size(), img.size());
    EXPECT_EQ(std::memcmp(s->bytes.data(), img.data(), img.size()), 0);
    EXPECT_EQ(s->shape, Shape{static_cast<int64_t>(img.size())});
    // Zero copy: the bytes view the raw record.
    EXPECT_GE(s->bytes.data(), raw.data());
    EXPECT_LE(s->bytes.data() + s->bytes.size(), raw.data() + raw.size());
  }
  EXPECT_FALSE(fs::exists(p + ".idx"));  // not asked to write one
}

TEST_F(TfRecordTest, FloatAndInt64Features) {
  const std::string p = path("data.tfrecord");
  write_file(p, 3);
  FormatOptions opt;
  opt.feature = "floats";
  auto idx = open_tfrecord(p, opt);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->samples[2].dtype, DType::f32());
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*idx, 2, raw, scratch);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->bytes.size(), 8u);
  float f[2];
  std::memcpy(f, s->bytes.data(), 8);
  EXPECT_EQ(f[0], 2.f);
  EXPECT_EQ(f[1], 0.5f);
  EXPECT_EQ(s->dtype, DType::f32());

  opt.feature = "ints";
  opt.feature_shape = Shape{3, 1};
  idx = open_tfrecord(p, opt);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->samples[0].dtype, DType::i64());
  EXPECT_EQ(idx->samples[0].shape, (Shape{3, 1}));
  s = read_sample(*idx, 2, raw, scratch);
  ASSERT_TRUE(s.ok()) << s.status();
  int64_t v[3];
  ASSERT_EQ(s->bytes.size(), sizeof(v));
  std::memcpy(v, s->bytes.data(), sizeof(v));
  EXPECT_EQ(v[0], 2);
  EXPECT_EQ(v[1], -2);
  EXPECT_EQ(v[2], 1 << 20);
  EXPECT_EQ(s->shape, (Shape{3, 1}));

  opt.feature_shape = Shape{4};  // 3 values
  auto bad = open_tfrecord(p, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), p);
  EXPECT_CONTAINS(bad.status().message(), "(4,) = 4 elements");
  EXPECT_CONTAINS(bad.status().message(), "found 3 elements");
}

TEST_F(TfRecordTest, BytesFeatureWithDtypeAndShape) {
  const std::string p = path("g.tfrecord");
  gen::FileSpec spec;
  spec.path = p;
  spec.sample_shape = {4, 5};
  spec.dtype = DType::f32();
  spec.num_samples = 6;
  spec.first_global_id = 10;
  spec.seed = 3;
  ASSERT_TRUE(gen::write_tfrecord_file(spec).ok());
  FormatOptions opt;
  opt.feature_dtype = DType::f32();
  opt.feature_shape = Shape{4, 5};
  auto idx = open_tfrecord(p, opt);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->samples[0].shape, (Shape{4, 5}));
  EXPECT_EQ(idx->samples[0].dtype, DType::f32());
  EXPECT_EQ(idx->samples[0].nbytes(), 80u);
  std::vector<std::byte> raw, scratch, want(80);
  for (uint64_t k = 0; k < 6; ++k) {
    auto s = read_sample(*idx, k, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    gen::fill_sample(3, 10 + k, DType::f32(), want);
    ASSERT_EQ(s->bytes.size(), 80u);
    EXPECT_EQ(std::memcmp(s->bytes.data(), want.data(), 80), 0);
  }
  // size and label features as the generator writes them.
  opt = FormatOptions{};
  opt.feature = "label";
  idx = open_tfrecord(p, opt);
  ASSERT_TRUE(idx.ok()) << idx.status();
  auto s = read_sample(*idx, 5, raw, scratch);
  ASSERT_TRUE(s.ok());
  int64_t label;
  std::memcpy(&label, s->bytes.data(), 8);
  EXPECT_EQ(label, gen::sample_label(15));
  opt.feature = "size";
  idx = open_tfrecord(p, opt);
  s = read_sample(*idx, 0, raw, scratch);
  ASSERT_TRUE(s.ok());
  int64_t size;
  std::memcpy(&size, s->bytes.data(), 8);
  EXPECT_EQ(size, 80);
  // The generator wrote the sidecar? Only when asked.
  EXPECT_FALSE(fs::exists(p + ".idx"));

  // A 3-byte uint8 image is not a whole number of float32.
  opt = FormatOptions{};
  opt.feature_dtype = DType::f32();
  opt.feature_shape = Shape{3, 5};
  auto bad = open_tfrecord(p, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "found 20 elements");
}

// ---- sidecars ----

TEST_F(TfRecordTest, IdxFormatReadWrite) {
  const std::vector<Extent> recs = {{0, 30}, {30, 16}, {46, 1000}};
  EXPECT_EQ(tfrecord::format_idx(recs), "0 30\n30 16\n46 1000\n");
  const std::string p = path("x.idx");
  ASSERT_TRUE(tfrecord::write_idx(p, recs).ok());
  EXPECT_EQ(read_text(p), "0 30\n30 16\n46 1000\n");
  auto back = tfrecord::read_idx(p);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, recs);
  // Tabs, CRLF and a trailing blank line are fine.
  std::ofstream(p, std::ios::trunc) << "0\t30\r\n30 16\n\n";
  back = tfrecord::read_idx(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), 2u);
  // Bad lines name the file and line.
  for (const char* text : {"0 30\nabc 16\n", "0 30\n30\n", "0 30\n30 16 7\n", "0 30\n-30 16\n"}) {
    std::ofstream(p, std::ios::trunc) << text;
    back = tfrecord::read_idx(p);
    ASSERT_FALSE(back.ok()) << text;
    EXPECT_CONTAINS(back.status().message(), p + ":2: expected \"offset length\"");
  }
}

TEST_F(TfRecordTest, IdxNextToFileMatchesScan) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 12);
  FormatOptions opt;
  opt.write_index_files = true;
  auto scanned = open_tfrecord(p, opt);
  ASSERT_TRUE(scanned.ok()) << scanned.status();
  ASSERT_TRUE(fs::exists(p + ".idx"));
  EXPECT_EQ(read_text(p + ".idx"), tfrecord::format_idx(recs));
  auto from_idx = open_tfrecord(p, FormatOptions{});
  ASSERT_TRUE(from_idx.ok()) << from_idx.status();
  EXPECT_CONTAINS(from_idx->sources[0]->describe(), "idx sidecar " + p + ".idx");
  ASSERT_EQ(from_idx->size(), scanned->size());
  for (size_t k = 0; k < recs.size(); ++k) {
    EXPECT_EQ(from_idx->samples[k].extents, scanned->samples[k].extents);
    EXPECT_EQ(from_idx->samples[k].shape, scanned->samples[k].shape);
    EXPECT_EQ(from_idx->samples[k].dtype, scanned->samples[k].dtype);
  }
  FormatOptions no_idx;
  no_idx.use_index_files = false;
  auto rescanned = open_tfrecord(p, no_idx);
  ASSERT_TRUE(rescanned.ok());
  EXPECT_CONTAINS(rescanned->sources[0]->describe(), "scan");
}

TEST_F(TfRecordTest, IdxInIndexDirAndDlioPlace) {
  // DLIO: {data}/train/NAME and {data}/index/train/NAME.idx, as write_dataset lays them out.
  gen::DatasetSpec ds;
  ds.dir = path("dlio");
  ds.format = FileFormat::kTfRecord;
  ds.files = 2;
  ds.samples_per_file = 5;
  ds.sample_shape = {3, 3};
  ds.dlio_layout = true;
  auto files = gen::write_dataset(ds);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  const std::string f0 = (*files)[0];
  const std::string dlio_idx = (fs::path(ds.dir) / "index" / "train" / (fs::path(f0).filename().string() + ".idx")).string();
  ASSERT_TRUE(fs::exists(dlio_idx));
  EXPECT_EQ(tfrecord::find_idx(f0, FormatOptions{}), dlio_idx);
  auto idx = open_tfrecord(f0, FormatOptions{});
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->size(), 5u);
  EXPECT_CONTAINS(idx->sources[0]->describe(), dlio_idx);
  auto scanned = tfrecord::scan_records(*detail::File::open(f0), true);
  ASSERT_TRUE(scanned.ok());
  EXPECT_EQ(*tfrecord::read_idx(dlio_idx), *scanned);
  // DLIO files carry image and size only (labels are zeros there).
  FormatOptions lab;
  lab.feature = "label";
  auto no_label = open_tfrecord(f0, lab);
  ASSERT_FALSE(no_label.ok());
  EXPECT_CONTAINS(no_label.status().message(), "only features 'image', 'size'");

  // index_dir: written there after a scan, read from there after.
  const std::string p = path("plain.tfrecord");
  write_file(p, 4);
  FormatOptions opt;
  opt.index_dir = path("sidecars");
  opt.write_index_files = true;
  ASSERT_TRUE(open_tfrecord(p, opt).ok());
  const std::string in_dir = (fs::path(opt.index_dir) / "plain.tfrecord.idx").string();
  ASSERT_TRUE(fs::exists(in_dir));
  EXPECT_FALSE(fs::exists(p + ".idx"));
  opt.write_index_files = false;
  auto again = open_tfrecord(p, opt);
  ASSERT_TRUE(again.ok());
  EXPECT_CONTAINS(again->sources[0]->describe(), in_dir);
}

TEST_F(TfRecordTest, IdxValidationNamesIdxFileAndLine) {
  const std::string p = path("data.tfrecord");
  const auto recs = write_file(p, 5);
  const uint64_t size = fs::file_size(p);
  const std::string idx = p + ".idx";
  auto expect_bad = [&](std::vector<Extent> entries, const std::string& where, const std::string& what) {
    ASSERT_TRUE(tfrecord::write_idx(idx, entries).ok());
    auto r = open_tfrecord(p, FormatOptions{});
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_CONTAINS(r.status().message(), idx + ":" + where + ": expected");
    EXPECT_CONTAINS(r.status().message(), what);
  };
  auto e = recs;
  e[2].length = 10;
  expect_bad(e, "3", "at least 16 bytes");
  e = recs;
  std::swap(e[1], e[2]);  // not increasing
  expect_bad(e, "2", "where the previous record ends");
  e = recs;
  e.back().length += 100;  // past EOF
  expect_bad(e, "5", "ends past the end of the file");
  e = recs;
  e.pop_back();  // stale: misses the last record
  expect_bad(e, "4", "stale sidecar");
  expect_bad({}, "1", "empty sidecar");
  // Contiguous and within the file, but the header disagrees.
  e = {{0, recs[0].length + recs[1].length}};
  for (size_t i = 2; i < recs.size(); ++i) e.push_back(recs[i]);
  expect_bad(e, "1", "announcing a");
  ASSERT_EQ(e.back().offset + e.back().length, size);
  // A good sidecar is accepted again.
  ASSERT_TRUE(tfrecord::write_idx(idx, recs).ok());
  EXPECT_TRUE(open_tfrecord(p, FormatOptions{}).ok());
}

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
  EXPECT_CONTAINS(r.status().message(), absl::StrCat(p, ": at offset ", recs[1].offset + 8, ": expected length CRC 0x"));
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
  EXPECT_CONTAINS(msg, absl::StrCat(p, ": at offset ", recs[2].offset + recs[2].length - 4, ": expected payload CRC 0x"));
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
  EXPECT_CONTAINS(r.status().message(), absl::StrCat(p, ": at offset ", recs[1].offset, ": expected record 1 with a ", huge));
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
  const uint64_t payload_at = idx->samples[1].extents[0].offset + kHeaderSize;
  EXPECT_CONTAINS(s.status().message(), absl::StrCat(p, ": at offset ", payload_at + 1, ": expected field 1 of 127 bytes"));
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
  EXPECT_CONTAINS(s.status().message(), absl::StrCat(p, ": at offset ", idx->samples[1].extents[0].offset,
                                                     ": expected feature 'image' in the tf.train.Example of record 1"));
  EXPECT_CONTAINS(s.status().message(), "only features 'other'");
  // A different kind than the first record's.
  s = read_sample(*idx, 2, raw, scratch);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), "as a bytes_list (as in the first record), found int64_list");
}

TEST_F(TfRecordTest, CompressedFilesAreRefused) {
  const std::string g = path("gz.tfrecord");
  write_bytes(g, from_hex("1f8b08000000000000ff0a492d2e010000ffff0300"));
  auto r = open_tfrecord(g, FormatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_CONTAINS(r.status().message(), g + ": at offset 0");
  EXPECT_CONTAINS(r.status().message(), "GZIP");
  EXPECT_CONTAINS(r.status().message(), "compressed TFRecord");
  EXPECT_CONTAINS(r.status().message(), "not support");
  FormatOptions off;
  off.verify_crc = false;
  EXPECT_EQ(open_tfrecord(g, off).status().code(), absl::StatusCode::kUnimplemented);

  const std::string z = path("z.tfrecord");
  write_bytes(z, from_hex("789c0b492d2e0100041f01a5000000000000000000"));
  r = open_tfrecord(z, FormatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "ZLIB");

  // A real record whose length bytes happen to look like ZLIB magic is read.
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
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace dlfeed
