// SPDX-License-Identifier: Apache-2.0
// The persistent dataset index (FormatOptions::index_cache): a reopen from
// the cache gives the same index as indexing the files, only changed files
// are indexed again, and a damaged, stale or lying cache falls back to the
// files with a note, never to a wrong extent.
#include "index/index_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/format/format.h"
#include "dlfeed/loader.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace dlfeed {
namespace {

using testing::expected_sample;
using testing::read_all;
using testing::scratch_dir;
using testing::write_all;

struct Case {
  const char* name;
  FileFormat format;
  gen::Compression compression;
  uint64_t chunk_samples;
  bool dlio;
};

const Case kCases[] = {
    {"npy", FileFormat::kNpy, gen::Compression::kNone, 0, false},
    {"npz", FileFormat::kNpz, gen::Compression::kNone, 0, false},
    {"npz_deflated", FileFormat::kNpz, gen::Compression::kDeflate, 0, false},
    {"npz_dlio", FileFormat::kNpz, gen::Compression::kNone, 0, true},
    {"hdf5", FileFormat::kHdf5, gen::Compression::kNone, 0, false},
    {"hdf5_chunked_deflate", FileFormat::kHdf5, gen::Compression::kDeflate, 3, false},
    {"tfrecord", FileFormat::kTfRecord, gen::Compression::kNone, 0, false},
};

testing::GeneratedDataset generate(const std::string& dir, const Case& c, uint64_t per_file = 7) {
  gen::DatasetSpec spec = testing::dataset_spec(dir, c.format, 5, per_file, Shape{3, 4}, DType::u8(), 11);
  spec.compression = c.compression;
  spec.chunk_samples = c.chunk_samples;
  spec.dlio_layout = c.dlio;
  auto ds = testing::write_generated(spec);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return *ds;
}

// Every sample of `got` as `want` has it, and its bytes as generated.
void expect_same(const SampleIndex& want, const SampleIndex& got, const testing::GeneratedDataset& ds) {
  ASSERT_TRUE(got.check().ok()) << got.check();
  ASSERT_EQ(got.files, want.files);
  ASSERT_EQ(got.file_begin, want.file_begin);
  std::vector<std::byte> raw, scratch;
  for (uint64_t id = 0; id < want.size(); ++id) {
    const SampleRef a = want.ref(id), b = got.ref(id);
    EXPECT_EQ(a.extents.size(), b.extents.size()) << id;
    for (size_t e = 0; e < a.extents.size() && e < b.extents.size(); ++e) EXPECT_EQ(a.extents[e], b.extents[e]);
    EXPECT_EQ(a.shape, b.shape) << id;
    EXPECT_EQ(a.dtype, b.dtype) << id;
    auto s = read_sample(got, id, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(s->bytes.data()), s->bytes.size()),
              expected_sample(ds.spec.seed, id, ds.spec.dtype, ds.spec.sample_shape))
        << id;
  }
  for (size_t f = 0; f < want.num_files(); ++f) {
    EXPECT_EQ(got.sources[f]->layout(), want.sources[f]->layout());
    EXPECT_EQ(got.sources[f]->describe(), want.sources[f]->describe());
  }
}

class IndexCache : public ::testing::TestWithParam<Case> {};

TEST_P(IndexCache, ReopenGivesTheSameIndexFromTheCacheAlone) {
  const std::string dir = scratch_dir();
  const auto ds = generate(dir + "/data", GetParam());
  FormatOptions plain;
  auto want = open_dataset({ds.path}, plain);
  ASSERT_TRUE(want.ok()) << want.status();

  FormatOptions cached = plain;
  cached.index_cache = dir + "/cache.idx";
  auto first = open_dataset({ds.path}, cached);  // indexes the files, writes the cache
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(std::filesystem::exists(cached.index_cache));
  expect_same(*want, *first, ds);

  // Every file is served by the cache...
  auto hits = detail::read_index_cache(cached.index_cache, want->files, cached);
  EXPECT_EQ(hits.hits, want->num_files()) << hits.note;
  EXPECT_EQ(hits.note, "");
  // ... and the reopened index is the files' own.
  auto again = open_dataset({ds.path}, cached);
  ASSERT_TRUE(again.ok()) << again.status();
  expect_same(*want, *again, ds);

  // Other options (another member, another feature): another fingerprint,
  // so none of it is used.
  FormatOptions other = cached;
  other.verify_crc = false;
  EXPECT_EQ(detail::read_index_cache(cached.index_cache, want->files, other).hits, 0u);
}

INSTANTIATE_TEST_SUITE_P(Formats, IndexCache, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(IndexCacheFiles, OnlyAChangedFileIsIndexedAgain) {
  const std::string dir = scratch_dir();
  const Case c = kCases[6];  // tfrecord
  auto ds = generate(dir + "/data", c);
  FormatOptions o;
  o.index_cache = dir + "/cache.idx";
  ASSERT_TRUE(open_dataset({ds.path}, o).ok());
  // File 2 rewritten with more records (new size and mtime), file 4 removed.
  gen::DatasetSpec bigger = ds.spec;
  bigger.dir = dir + "/other";
  bigger.samples_per_file = 9;
  auto other = testing::write_generated(bigger);
  ASSERT_TRUE(other.ok());
  for (const char* ext : {"", ".idx"}) {
    if (!std::filesystem::exists(other->files[2] + ext)) continue;
    std::filesystem::copy_file(other->files[2] + ext, ds.files[2] + ext,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::filesystem::remove(ds.files[4]);
  std::vector<std::string> now(ds.files.begin(), ds.files.begin() + 4);
  auto hits = detail::read_index_cache(o.index_cache, now, o);
  EXPECT_EQ(hits.hits, 3u);
  EXPECT_FALSE(hits.files[2].has_value());

  auto index = open_dataset({ds.path}, o);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_files(), 4u);
  EXPECT_EQ(index->file_begin, (std::vector<uint64_t>{0, 7, 14, 23, 30}));
  // The cache now knows the new file too.
  EXPECT_EQ(detail::read_index_cache(o.index_cache, index->files, o).hits, 4u);
}

// The identities an index carries (SampleIndex::identities) are what the
// loader's file table checks first opens against, instead of a stat per
// file: a reopen from the cache carries the stats its check made, an
// encoded index (MPI share_index) the sender's, without its device number.
TEST(IndexCacheFiles, ReopenAndDecodedIndexCarryEachFilesIdentity) {
  const std::string dir = scratch_dir();
  const auto ds = generate(dir + "/data", kCases[6]);  // tfrecord
  FormatOptions o;
  auto expect_stat_identities = [](const SampleIndex& index) {
    ASSERT_TRUE(index.has_identities());
    for (size_t f = 0; f < index.num_files(); ++f) {
      struct stat st {};
      ASSERT_EQ(::stat(index.files[f].c_str(), &st), 0);
      const FileIdentity& id = index.identities[f];
      EXPECT_EQ(id.size, static_cast<uint64_t>(st.st_size));
      EXPECT_EQ(id.mtime_ns, static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + st.st_mtim.tv_nsec);
      EXPECT_EQ(id.inode, static_cast<uint64_t>(st.st_ino));
      EXPECT_EQ(id.device, static_cast<uint64_t>(st.st_dev));
    }
  };
  // Indexed from the files: each identity is the fstat of the file's open
  // for indexing, so the file table stats none of them again.
  auto plain = open_dataset({ds.path}, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  expect_stat_identities(*plain);
  o.index_cache = dir + "/cache.idx";
  ASSERT_TRUE(open_dataset({ds.path}, o).ok());
  auto again = open_dataset({ds.path}, o);
  ASSERT_TRUE(again.ok()) << again.status();
  expect_stat_identities(*again);
  auto decoded = decode_index(encode_index(*again, o), o);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->has_identities());
  for (size_t f = 0; f < decoded->num_files(); ++f) {
    FileIdentity want = again->identities[f];
    want.device = 0;  // another host's device numbers may differ: not sent on
    EXPECT_EQ(decoded->identities[f], want) << f;
  }
  // An index appended from parts with and without identities has none.
  SampleIndex mixed = std::move(*decoded);
  plain->identities.clear();  // a part that does not know them
  mixed.append(std::move(*plain));
  EXPECT_FALSE(mixed.has_identities());
}

TEST(IndexCacheFiles, ADamagedCacheIsNotUsedAndSaysWhy) {
  const std::string dir = scratch_dir();
  const auto ds = generate(dir + "/data", kCases[4]);  // hdf5
  FormatOptions o;
  o.index_cache = dir + "/cache.idx";
  auto want = open_dataset({ds.path}, o);
  ASSERT_TRUE(want.ok());
  const std::string good = read_all(o.index_cache);

  struct Damage {
    std::string bytes;
    const char* why;
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  std::string version = good;
  version[8] = 99;  // a version no release wrote
  const Damage damages[] = {
      {good.substr(0, good.size() / 2), "checksum"},
      {flipped, "checksum"},
      {"not a cache at all", "bad magic"},
      {"", "bad magic"},
      {version, "version 99"},
  };
  for (const Damage& d : damages) {
    write_all(o.index_cache, d.bytes);
    auto hits = detail::read_index_cache(o.index_cache, want->files, o);
    EXPECT_EQ(hits.hits, 0u) << d.why;
    EXPECT_NE(hits.note.find(o.index_cache), std::string::npos) << hits.note;
    EXPECT_NE(hits.note.find(d.why), std::string::npos) << hits.note;
    // The open falls back to the files and repairs the cache.
    auto index = open_dataset({ds.path}, o);
    ASSERT_TRUE(index.ok()) << index.status();
    expect_same(*want, *index, ds);
    EXPECT_EQ(detail::read_index_cache(o.index_cache, want->files, o).hits, want->num_files()) << d.why;
  }
}

TEST(IndexCacheFiles, AnEntryThatLiesAboutItsFileIsRefused) {
  // A cache written for the files, then the files cut inside their first
  // sample while the identity check is off (as if size, mtime and inode had
  // been kept): every entry's extents would pass the end of its file, and
  // each is refused by its own checks, naming the file.
  for (const Case& c : kCases) {
    const std::string dir = scratch_dir() + "/" + c.name;
    const auto ds = generate(dir + "/data", c);
    FormatOptions o;
    auto index = open_dataset({ds.path}, o);
    ASSERT_TRUE(index.ok()) << index.status();
    const std::string bytes = detail::encode_index_cache(*index, o);
    for (uint32_t f = 0; f < index->num_files(); ++f) {
      // Cut inside the file's first sample.
      const SampleRef first = index->ref(index->file_begin[f]);
      ASSERT_FALSE(first.extents.empty()) << c.name;
      std::filesystem::resize_file(ds.files[f], first.extents[0].offset + 1);
    }
    auto hits = detail::decode_index_cache(bytes, "cache.idx", ds.files, o, /*match_identity=*/false);
    EXPECT_EQ(hits.hits, 0u) << c.name;
    EXPECT_NE(hits.note.find("fail their checks"), std::string::npos) << c.name << ": " << hits.note;
    EXPECT_NE(hits.note.find(ds.files[0]), std::string::npos) << c.name << ": " << hits.note;
  }
}

// index_cache_check=folders: a reopen takes the cache's file list when the
// folders' mtimes are as the listing found them (one stat per folder, no
// listing, no stat or open per file); a file added shows in the folder's
// mtime and is listed; a file rewritten in place is not seen at open but
// refused at its first read by the loader (the identity the cache recorded),
// never read with the old extents.
TEST(IndexCacheFolders, ReopenTakesTheListingAndAFileChangedInPlaceIsRefusedAtItsRead) {
  namespace fs = std::filesystem;
  const std::string dir = scratch_dir();
  auto ds = generate(dir + "/data", kCases[0]);  // npy, 5 files
  // Settled: changed long enough ago that a later change shows in its mtime.
  auto settle = [&] { fs::last_write_time(ds.path, fs::file_time_type::clock::now() - std::chrono::hours(1)); };
  settle();
  FormatOptions plain;
  auto want = open_dataset({ds.path}, plain);
  ASSERT_TRUE(want.ok()) << want.status();
  FormatOptions o;
  o.index_cache = "auto";
  o.index_cache_check = "folders";
  ASSERT_TRUE(open_dataset({ds.path}, o).ok());  // indexes, writes the cache with the listing
  const uint64_t stats0 = detail::file_stats(), opens0 = detail::file_opens();
  auto again = open_dataset({ds.path}, o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(detail::file_opens() - opens0, 0u) << "a file was opened";
  EXPECT_LE(detail::file_stats() - stats0, 2u) << "more than the folder was stat'ed";
  expect_same(*want, *again, ds);
  ASSERT_TRUE(again->has_identities());
  EXPECT_EQ(again->identities[0].device, 0u);  // the cache may be another host's: not compared

  // A file added: the folder's mtime moved, so the files are listed (and checked).
  const std::string extra = ds.path + "/img_zz.npy";
  fs::copy_file(ds.files[4], extra);
  auto more = open_dataset({ds.path}, o);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->num_files(), 6u);
  fs::remove(extra);
  settle();
  ASSERT_TRUE(open_dataset({ds.path}, o).ok());  // the settled listing is written again
  const uint64_t opens1 = detail::file_opens();
  ASSERT_EQ(open_dataset({ds.path}, o)->num_files(), 5u);
  EXPECT_EQ(detail::file_opens() - opens1, 0u);

  // File 1 rewritten in place with other contents (same name; the folder's
  // mtime does not change): the reopen takes the cached index, the loader
  // refuses the file at its first read.
  gen::DatasetSpec other = ds.spec;
  other.dir = dir + "/other";
  other.samples_per_file = 9;
  auto bigger = testing::write_generated(other);
  ASSERT_TRUE(bigger.ok());
  write_all(ds.files[1], read_all(bigger->files[1]));  // O_TRUNC: same inode, the folder's mtime as it was
  LoaderOptions lo;
  lo.paths = {ds.path};
  lo.format = o;
  lo.batch_size = 64;
  lo.resident = Mode::kOff;
  auto loader = Loader::create(lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->num_samples(), want->size()) << "the cached index, not the file's new one";
  ASSERT_TRUE((*loader)->start_epoch(0).ok());
  auto batch = (*loader)->next();
  ASSERT_FALSE(batch.ok()) << "read a file rewritten since the cache";
  EXPECT_NE(std::string(batch.status().message()).find(ds.files[1]), std::string::npos) << batch.status();
  EXPECT_NE(std::string(batch.status().message()).find("replaced or modified"), std::string::npos) << batch.status();
  // With the default check (a stat per file) the same cache sees the change.
  FormatOptions files = o;
  files.index_cache_check = "files";
  auto fresh = open_dataset({ds.path}, files);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->size(), want->size() + 9 - 7);
  files.index_cache_check = "sometimes";
  EXPECT_EQ(open_dataset({ds.path}, files).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexCacheFiles, AutoPutsTheCacheInTheFolderOrTheUserCache) {
  const std::string dir = scratch_dir();
  const auto ds = generate(dir + "/data", kCases[0]);
  FormatOptions o;
  o.index_cache = "auto";
  const std::string beside = detail::index_cache_path({ds.path}, o);
  EXPECT_EQ(std::filesystem::path(beside).parent_path(), std::filesystem::path(ds.path) / ".dlfeed");
  EXPECT_EQ(std::filesystem::path(beside).filename().string().rfind("index-", 0), 0u) << beside;
  ASSERT_TRUE(open_dataset({ds.path}, o).ok());
  EXPECT_TRUE(std::filesystem::exists(beside));
  // The cache's folder is not data: the next listing skips it (even where a
  // file without an extension would be taken, with an explicit format).
  auto again = open_dataset({ds.path}, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->num_files(), 5u);
  FormatOptions explicit_format = o;
  explicit_format.format = kCases[0].format;
  auto named = open_dataset({ds.path}, explicit_format);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->num_files(), 5u);
  // Another field, another cache; several paths go to the user's cache folder.
  FormatOptions y = o;
  y.name = "y";
  EXPECT_NE(detail::index_cache_path({ds.path}, y), beside);
  setenv("XDG_CACHE_HOME", (dir + "/xdg").c_str(), 1);
  const std::string two = detail::index_cache_path({ds.files[0], ds.files[1]}, o);
  EXPECT_EQ(two.rfind(dir + "/xdg/dlfeed/dlfeed-index-", 0), 0u) << two;
  unsetenv("XDG_CACHE_HOME");
  o.index_cache = "off";
  EXPECT_EQ(detail::index_cache_path({ds.path}, o), "");
}

}  // namespace
}  // namespace dlfeed
