// SPDX-License-Identifier: Apache-2.0
// TFRecord framing, CRC32C, sidecars, open_tfrecord and its errors.
#include "dlfeed/format/tfrecord.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/format.h"
#include "format/tfrecord_scan.h"
#include "test_util.h"

#define EXPECT_CONTAINS(text, part)                                       \
  EXPECT_NE(std::string(text).find(std::string(part)), std::string::npos) \
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
    dir_ = fs::path(DLFEED_TEST_TMPDIR) / "tfrecord" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
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

// The hardware path runs three chains over 24 KiB and 768-byte blocks and
// combines them: lengths on and around each block boundary, at every
// alignment, equal the one-chain table loop.
TEST(Crc32cTest, HardwareEqualsPortableAcrossThreeWayBlocks) {
  if (!detail::crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2 and PCLMUL";
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(200000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const size_t big = 3 * 8192, small = 3 * 256;
  for (size_t start = 0; start < 9; ++start) {
    for (size_t base : {small, 2 * small, big, big + small, 2 * big, 6 * big + 5 * small, size_t{150528}}) {
      for (size_t n : {base - 9, base - 1, base, base + 1, base + 8, base + 63}) {
        ASSERT_EQ(detail::crc32c_extend_hardware(0xdeadbeef, buf.data() + start, n),
                  detail::crc32c_extend_portable(0xdeadbeef, buf.data() + start, n))
            << "start " << start << " n " << n;
      }
    }
  }
  // Extending in uneven pieces equals one pass.
  const uint32_t whole = detail::crc32c(buf.data(), buf.size());
  uint32_t pieces = 0;
  for (size_t at = 0, step = 1; at < buf.size(); at += step, step = step * 3 + 1) {
    pieces = detail::crc32c_extend(pieces, buf.data() + at, std::min(step, buf.size() - at));
  }
  EXPECT_EQ(pieces, whole);
  EXPECT_EQ(whole, detail::crc32c_extend_portable(0, buf.data(), buf.size()));
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
    const SampleRef ref = idx->ref(k);
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
  EXPECT_EQ(idx->ref(2).dtype, DType::f32());
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
  EXPECT_EQ(idx->ref(0).dtype, DType::i64());
  EXPECT_EQ(idx->ref(0).shape, (Shape{3, 1}));
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
  EXPECT_EQ(idx->ref(0).shape, (Shape{4, 5}));
  EXPECT_EQ(idx->ref(0).dtype, DType::f32());
  EXPECT_EQ(idx->ref(0).nbytes(), 80u);
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
  EXPECT_EQ(size, 20) << "the element count of a sample that is not a square: 4 x 5 float32";
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
  // Sidecars are read in 64 KiB pieces: lines that straddle a piece's end,
  // a last line without a newline, and a bad line far in are read as such.
  std::vector<Extent> many;
  std::string text;
  for (uint64_t k = 0; k < 12000; ++k) {
    many.push_back({k * 40, 40});
    absl::StrAppend(&text, k * 40, std::string(k % 7 + 1, ' '), 40, k % 3 ? "\n" : "\r\n");
  }
  ASSERT_GT(text.size(), size_t{2} << 16);
  text.pop_back();  // no newline after the last line
  std::ofstream(p, std::ios::trunc | std::ios::binary) << text;
  back = tfrecord::read_idx(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, many);
  std::ofstream(p, std::ios::trunc | std::ios::binary) << text << "\n1 x\n";
  back = tfrecord::read_idx(p);
  ASSERT_FALSE(back.ok());
  EXPECT_CONTAINS(back.status().message(), p + ":12001: expected");
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
    EXPECT_EQ(from_idx->ref(k).extents, scanned->ref(k).extents);
    EXPECT_EQ(from_idx->ref(k).shape, scanned->ref(k).shape);
    EXPECT_EQ(from_idx->ref(k).dtype, scanned->ref(k).dtype);
  }
  FormatOptions no_idx;
  no_idx.use_index_files = false;
  auto rescanned = open_tfrecord(p, no_idx);
  ASSERT_TRUE(rescanned.ok());
  EXPECT_CONTAINS(rescanned->sources[0]->describe(), "scan");
}

// open_tfrecord reads a file's first 64 KiB at once and takes the record
// headers, the sidecar's checks and record 0 from there when they lie in it.
// Files past that read, and a record 0 larger than it, index and decode as
// the writer laid them out, by scan and by sidecar; a folder in a sidecar's
// place is passed over for the next place.
TEST_F(TfRecordTest, FilesPastTheFirstReadIndexBySidecarAndScan) {
  const std::string many = path("many.tfrecord");
  const auto recs = write_file(many, 200);  // ~150 KB: records cross 64 KiB
  ASSERT_GT(recs.back().offset, uint64_t{1} << 17);
  const std::string big = path("big.tfrecord");
  std::string huge(100000, '\0');
  for (size_t i = 0; i < huge.size(); ++i) huge[i] = static_cast<char>(i * 7);
  std::vector<Extent> big_recs;
  {
    auto w = tfrecord::RecordWriter::create(big);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write(example::ExampleBuilder().add_bytes("image", as_bytes(huge)).serialize()).ok());
    ASSERT_TRUE(w->write(example_of(3)).ok());
    ASSERT_TRUE(w->close().ok());
    big_recs = w->records();
  }
  auto check = [&](const SampleIndex& index, const std::vector<Extent>& want, const std::string& first) {
    ASSERT_EQ(index.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(index.ref(k).extents[0], want[k]) << k;
    std::vector<std::byte> raw, scratch;
    auto s = read_sample(index, 0, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->bytes.size(), first.size());
    EXPECT_EQ(std::memcmp(s->bytes.data(), first.data(), first.size()), 0);
  };
  for (const auto& [p, want, first] : {std::tuple{many, recs, image_of(0)}, std::tuple{big, big_recs, huge}}) {
    SCOPED_TRACE(p);
    auto scanned = open_tfrecord(p, FormatOptions{});
    ASSERT_TRUE(scanned.ok()) << scanned.status();
    EXPECT_CONTAINS(scanned->sources[0]->describe(), "scan");
    check(*scanned, want, first);
    // A folder where the sidecar would be first is not one: the next place is tried.
    ASSERT_TRUE(fs::create_directories(p + ".idx"));
    std::ofstream(p + ".idx.txt") << tfrecord::format_idx(want);
    EXPECT_EQ(tfrecord::find_idx(p, FormatOptions{}), "");
    auto no_sidecar = open_tfrecord(p, FormatOptions{});
    ASSERT_TRUE(no_sidecar.ok()) << no_sidecar.status();
    EXPECT_CONTAINS(no_sidecar->sources[0]->describe(), "scan");
    fs::remove(p + ".idx");
    fs::rename(p + ".idx.txt", p + ".idx");
    auto by_idx = open_tfrecord(p, FormatOptions{});
    ASSERT_TRUE(by_idx.ok()) << by_idx.status();
    EXPECT_CONTAINS(by_idx->sources[0]->describe(), "idx sidecar " + p + ".idx");
    check(*by_idx, want, first);
    // A sidecar whose last record (past the first read) starts a byte early
    // is caught by the header read there.
    std::vector<Extent> lying = want;
    lying[lying.size() - 2].length -= 1;
    lying.back().offset -= 1;
    lying.back().length += 1;
    std::ofstream(p + ".idx", std::ios::trunc) << tfrecord::format_idx(lying);
    auto bad = open_tfrecord(p, FormatOptions{});
    ASSERT_FALSE(bad.ok());
    EXPECT_CONTAINS(bad.status().message(), p);
    EXPECT_CONTAINS(bad.status().message(), absl::StrCat(lying.back().offset));
  }
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
  const std::string dlio_idx =
      (fs::path(ds.dir) / "index" / "train" / (fs::path(f0).filename().string() + ".idx")).string();
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

// open_dataset tells each file's open what the folder listing saw: a folder
// with no *.idx file has no sidecar beside its files to try. Sidecars beside
// files of a folder that has them, and in DLIO's place, are still found.
TEST_F(TfRecordTest, FolderListingFindsSidecarsBesideAndInDlioPlace) {
  const std::string beside = path("beside");
  fs::create_directories(beside);
  const auto recs_a = write_file(beside + "/a.tfrecord", 3);
  write_file(beside + "/b.tfrecord", 2);
  std::ofstream(beside + "/a.tfrecord.idx") << tfrecord::format_idx(recs_a);
  auto both = open_dataset({beside}, FormatOptions{});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->num_files(), 2u);
  EXPECT_CONTAINS(both->sources[0]->describe(), "idx sidecar " + beside + "/a.tfrecord.idx");
  EXPECT_CONTAINS(both->sources[1]->describe(), "scan");
  // The same folder given with a trailing slash.
  auto slash = open_dataset({beside + "/"}, FormatOptions{});
  ASSERT_TRUE(slash.ok()) << slash.status();
  EXPECT_CONTAINS(slash->sources[0]->describe(), "a.tfrecord.idx");

  gen::DatasetSpec ds;
  ds.dir = path("dlio");
  ds.format = FileFormat::kTfRecord;
  ds.files = 3;
  ds.samples_per_file = 2;
  ds.sample_shape = {4};
  ds.dlio_layout = true;
  ASSERT_TRUE(gen::write_dataset(ds).ok());
  auto dlio = open_dataset({ds.dir}, FormatOptions{});
  ASSERT_TRUE(dlio.ok()) << dlio.status();
  ASSERT_EQ(dlio->num_files(), 3u);
  for (size_t f = 0; f < 3; ++f) {
    EXPECT_CONTAINS(dlio->sources[f]->describe(), (fs::path(ds.dir) / "index" / "train").string());
  }
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

// ---- compressed files ----

// Records of pseudo-random lengths (1 B .. ~40 KiB payloads, some larger than
// the test's checkpoint span) as plain framed bytes, plus each record's extent.
static std::vector<std::byte> plain_records(size_t n, std::vector<Extent>& extents, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out;
  for (size_t k = 0; k < n; ++k) {
    const size_t len = (k % 5 == 4) ? 40000 + rng() % 1000 : 1 + rng() % 3000;
    std::string img(len, '\0');
    // Half compressible text, half noise: deflate makes both fixed/dynamic and stored blocks.
    for (size_t i = 0; i < len; ++i) img[i] = (k % 2) ? static_cast<char>(rng()) : static_cast<char>('a' + (i * k) % 7);
    const int64_t ints[] = {static_cast<int64_t>(k)};
    auto ex = example::ExampleBuilder().add_bytes("image", as_bytes(img)).add_int64s("ints", ints).serialize();
    const size_t at = out.size();
    tfrecord::append_record(out, ex);
    extents.push_back({at, out.size() - at});
  }
  return out;
}

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
        if (i) EXPECT_GT(ix->points[i].out, ix->points[i - 1].out);
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
        if (block_every) EXPECT_LT(ext[k].offset - pt.out, span + 2 * block_every);
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
        if (!s.ok()) EXPECT_CONTAINS(s.status().message(), p);
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
