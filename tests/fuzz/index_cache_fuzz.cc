// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the persistent dataset index (src/index/index_cache.cc).
// The input is a cache file's body; the target puts the magic, version and
// a matching CRC-32C in front, so the fuzzer reaches past the checksum into
// the header, the entries and every source's state. The entries name six
// data files the target writes once (NPY, NPZ stored and deflated, HDF5
// contiguous and chunked with deflate, TFRecord), and the file identity
// check is off: whatever an entry claims about a file,
// each sample it gives must lie inside that file and read back as its
// shape and dtype say (fuzz_util's check_index), or the entry is refused.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "fuzz_util.h"
#include "index/index_cache.h"

namespace {

using namespace dlfeed;

// The data files, in a folder of fixed name ($TMPDIR or /tmp, then
// dlfeed-fuzz-index-cache/), written again by each process: cache inputs
// name them by path, so a saved input finds them in the next run too.
const std::vector<std::string>& data_files() {
  static const std::vector<std::string> files = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string root = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlfeed-fuzz-index-cache";
    struct Spec {
      const char* dir;
      FileFormat format;
      gen::Compression compression;
      uint64_t chunk_samples;
    };
    const Spec specs[] = {
        {"npy", FileFormat::kNpy, gen::Compression::kNone, 0},
        {"npz", FileFormat::kNpz, gen::Compression::kNone, 0},
        {"npzd", FileFormat::kNpz, gen::Compression::kDeflate, 0},
        {"h5", FileFormat::kHdf5, gen::Compression::kNone, 0},
        {"h5c", FileFormat::kHdf5, gen::Compression::kDeflate, 2},
        {"tfr", FileFormat::kTfRecord, gen::Compression::kNone, 0},
    };
    std::vector<std::string> out;
    for (const Spec& s : specs) {
      gen::DatasetSpec d;
      d.dir = root + "/" + s.dir;
      d.format = s.format;
      d.files = 1;
      d.samples_per_file = 5;
      d.sample_shape = {2, 3};
      d.dtype = DType::u8();
      d.seed = 7;
      d.compression = s.compression;
      d.chunk_samples = s.chunk_samples;
      auto written = gen::write_dataset(d);
      if (!written.ok()) fuzz::fail("cannot write the data files: " + written.status().ToString());
      out.insert(out.end(), written->begin(), written->end());
    }
    return out;
  }();
  return files;
}

}  // namespace

// With DLFEED_FUZZ_WRITE_SEED=PATH, the first call writes the body of a
// valid cache of the six files there (the seed scripts/fuzz.sh starts from).
void write_seed_once(const std::vector<std::string>& files) {
  static bool done = false;
  const char* out = std::getenv("DLFEED_FUZZ_WRITE_SEED");
  if (done || out == nullptr) return;
  done = true;
  SampleIndex all;
  for (const std::string& f : files) {
    auto one = open_file(f, FormatOptions{});
    if (!one.ok()) fuzz::fail("seed: " + one.status().ToString());
    all.append(std::move(*one));
  }
  const std::string bytes = detail::encode_index_cache(all, FormatOptions{});
  std::FILE* fp = std::fopen(out, "wb");
  if (fp == nullptr) fuzz::fail(std::string("seed: cannot write ") + out);
  std::fwrite(bytes.data() + 16, 1, bytes.size() - 16, fp);  // the body, after magic, version and CRC
  std::fclose(fp);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string>& files = data_files();
  write_seed_once(files);
  const std::string body(reinterpret_cast<const char*>(data), size);
  const std::string bytes = detail::index_cache_header(body) + body;
  FormatOptions o;
  detail::CacheHits hits = detail::decode_index_cache(bytes, "cache", files, o, /*match_identity=*/false);
  if (hits.files.size() != files.size()) fuzz::fail("decode_index_cache: one result per listed file expected");
  for (size_t f = 0; f < files.size(); ++f) {
    if (!hits.files[f]) continue;
    const std::string& path = files[f];
    fuzz::check_index(*hits.files[f], path, std::filesystem::file_size(path));
  }
  return 0;
}
