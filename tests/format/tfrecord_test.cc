// SPDX-License-Identifier: Apache-2.0
// TFRecord files written and read back (open_tfrecord), and their .idx sidecars.
#include "tfrecord_fixture.h"

namespace dlfeed {
namespace {

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

}  // namespace
}  // namespace dlfeed
