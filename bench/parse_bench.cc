// SPDX-License-Identifier: Apache-2.0
// Parser micro benchmarks: the per-file and per-sample CPU work of the
// formats (and of inflating a deflated HDF5 chunk, against zlib), without I/O (except BM_TfrecordScanFile, which scans
// a cached file through the real scan_records).
//   build/bench/parse_bench                          # every case
//   build/bench/parse_bench --benchmark_filter=Crc   # one family
// items/s are headers, records or Examples per second; bytes/s count the
// bytes the case walks over (payloads for CRC and unframing).
#include <benchmark/benchmark.h>

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/deflate.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/npy.h"
#include "dlfeed/format/tfrecord.h"
#include "format/tfrecord_scan.h"

namespace {

std::vector<std::byte> pattern(size_t n) {
  std::vector<std::byte> v(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  return v;
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A DLIO-style tf.train.Example: `image` (BytesList, `payload` raw bytes) and `size` (Int64List).
std::vector<std::byte> dlio_example(size_t payload) {
  const std::vector<std::byte> image = pattern(payload);
  const int64_t size = static_cast<int64_t>(payload);
  dlfeed::example::ExampleBuilder b;
  b.add_bytes("image", std::span<const std::byte>(image));
  b.add_int64s("size", std::span<const int64_t>(&size, 1));
  return b.serialize();
}

// `records` framed DLIO Examples of `payload` bytes each, back to back.
std::vector<std::byte> framed_records(size_t records, size_t payload) {
  const std::vector<std::byte> ex = dlio_example(payload);
  std::vector<std::byte> out;
  for (size_t i = 0; i < records; ++i) dlfeed::tfrecord::append_record(out, ex);
  return out;
}

// ------------------------------------------------------------------ NPY

// Parsing a whole header as numpy writes it (the dictionary literal).
void BM_NpyHeaderParse(benchmark::State& state) {
  const dlfeed::Shape shape = {state.range(0), 128, 1024};
  const std::string header = dlfeed::make_npy_header(dlfeed::DType::parse("<f4").value(), shape);
  uint64_t sum = 0;
  for (auto _ : state) {
    auto size = dlfeed::npy_header_size(bytes_of(header).first(dlfeed::kNpyPreamble), "bench.npy", 0);
    auto h = dlfeed::parse_npy_header(bytes_of(header).first(*size), "bench.npy", 0);
    if (!h.ok()) {
      state.SkipWithError(std::string(h.status().message()).c_str());
      return;
    }
    sum += h->data_offset + h->shape[0];
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * header.size()));
}
BENCHMARK(BM_NpyHeaderParse)->Arg(512);

// ------------------------------------------------------------------ TFRecord framing

// Walking the framing of an in-memory stream: each 12-byte header gives the
// next record's offset (what indexing without a sidecar does per record).
// range(1): 1 = check the header's CRC32C.
void BM_TfrecordFraming(benchmark::State& state) {
  const size_t payload = static_cast<size_t>(state.range(0));
  const bool verify = state.range(1) != 0;
  const std::vector<std::byte> stream = framed_records(256, payload);
  const std::span<const std::byte> s(stream);
  uint64_t records = 0;
  for (auto _ : state) {
    uint64_t off = 0;
    while (off < s.size()) {
      auto len = dlfeed::tfrecord::parse_header(s.subspan(off, dlfeed::tfrecord::kHeaderSize), verify, "bench", off);
      if (!len.ok()) {
        state.SkipWithError(std::string(len.status().message()).c_str());
        return;
      }
      off += *len + dlfeed::tfrecord::kOverhead;
      ++records;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(records));
  state.SetLabel(verify ? "header CRC checked" : "no CRC");
}
BENCHMARK(BM_TfrecordFraming)->ArgsProduct({{32 << 10}, {0, 1}});

// The real scan_records over a cached file (12-byte preads, one per record).
void BM_TfrecordScanFile(benchmark::State& state) {
  const size_t payload = static_cast<size_t>(state.range(0));
  const char* env = std::getenv("DLFEED_BENCH_DIR");
  const std::string path =
      std::string(env ? env : "/tmp") + "/dlfeed_parse_bench_" + std::to_string(payload) + ".tfrecord";
  {
    const std::vector<std::byte> stream = framed_records(1024, payload);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(stream.data(), 1, stream.size(), f) != stream.size()) {
      state.SkipWithError("cannot write the bench file");
      if (f) std::fclose(f);
      return;
    }
    std::fclose(f);
  }
  auto file = dlfeed::detail::File::open(path);
  if (!file.ok()) {
    state.SkipWithError(std::string(file.status().message()).c_str());
    return;
  }
  uint64_t records = 0;
  for (auto _ : state) {
    auto ext = dlfeed::tfrecord::scan_records(*file, /*verify_crc=*/true);
    if (!ext.ok()) {
      state.SkipWithError(std::string(ext.status().message()).c_str());
      return;
    }
    records += ext->size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(records));
  std::filesystem::remove(path);
}
BENCHMARK(BM_TfrecordScanFile)->Arg(32 << 10);

// Unframing one record with both CRCs checked (what decode does per sample):
// dominated by the payload's CRC32C.
void BM_TfrecordUnframe(benchmark::State& state) {
  const size_t payload = static_cast<size_t>(state.range(0));
  const std::vector<std::byte> rec = framed_records(1, payload);
  uint64_t sum = 0;
  for (auto _ : state) {
    auto p = dlfeed::tfrecord::unframe_record(rec, /*verify=*/true, "bench", 0);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      return;
    }
    sum += p->size();
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * rec.size()));
}
BENCHMARK(BM_TfrecordUnframe)->Arg(4 << 10)->Arg(32 << 10)->Arg(128 << 10);

// ------------------------------------------------------------------ tf.train.Example

// Finding the two features of a DLIO Example and decoding them (the loader's
// per-sample work after unframing): `image` as a view, `size` as an int64.
void BM_ExampleFeatures(benchmark::State& state) {
  const std::vector<std::byte> ex = dlio_example(static_cast<size_t>(state.range(0)));
  std::vector<std::span<const std::byte>> image;
  std::vector<int64_t> size;
  uint64_t sum = 0;
  for (auto _ : state) {
    image.clear();
    size.clear();
    auto fi = dlfeed::example::find_feature(ex, "image");
    auto fs = dlfeed::example::find_feature(ex, "size");
    if (!fi.ok() || !fs.ok() || !dlfeed::example::decode_bytes_list(*fi, image).ok() ||
        !dlfeed::example::decode_int64_list(*fs, size).ok()) {
      state.SkipWithError("parse failed");
      return;
    }
    sum += image[0].size() + static_cast<uint64_t>(size[0]);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExampleFeatures)->Arg(32 << 10);

// Parsing every feature of the same Example into owned lists.
void BM_ExampleParseAll(benchmark::State& state) {
  const std::vector<std::byte> ex = dlio_example(static_cast<size_t>(state.range(0)));
  uint64_t sum = 0;
  for (auto _ : state) {
    auto all = dlfeed::example::parse_example(ex);
    if (!all.ok()) {
      state.SkipWithError(std::string(all.status().message()).c_str());
      return;
    }
    sum += all->size();
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExampleParseAll)->Arg(32 << 10);

// ------------------------------------------------------------------ CRC32C

// A decode-bound HDF5 chunk: 64x64x4 float32 normals rounded to 2 decimals,
// byte planes apart (the shuffle filter), zlib level range(0), as h5py's
// compression="gzip", shuffle=True writes the chunks of bench/node_scaling.py.
std::vector<std::byte> shuffled_floats_zlib(int level, std::vector<std::byte>* plain) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  constexpr size_t kN = 64 * 64 * 4;
  plain->assign(kN * 4, std::byte{0});
  for (size_t i = 0; i < kN; ++i) {
    const float v = std::round(normal(rng) * 100) / 100;
    unsigned char b[4];
    std::memcpy(b, &v, 4);
    for (int k = 0; k < 4; ++k) (*plain)[k * kN + i] = std::byte(b[k]);
  }
  uLongf len = compressBound(plain->size());
  std::vector<std::byte> z(len);
  compress2(reinterpret_cast<Bytef*>(z.data()), &len, reinterpret_cast<const Bytef*>(plain->data()), plain->size(),
            level);
  z.resize(len);
  return z;
}

// Inflating one such chunk (64 KiB out): range(1) 0 = dlfeed's decoder
// (dlfeed/format/deflate.h, what HDF5 chunks and NPZ members use), 1 = zlib's
// uncompress (what libhdf5 and h5py use). bytes/s count the output.
void BM_InflateChunk(benchmark::State& state) {
  std::vector<std::byte> plain;
  const std::vector<std::byte> z = shuffled_floats_zlib(static_cast<int>(state.range(0)), &plain);
  std::vector<std::byte> out(plain.size());
  const bool zlib = state.range(1) == 1;
  for (auto _ : state) {
    if (zlib) {
      uLongf len = out.size();
      if (uncompress(reinterpret_cast<Bytef*>(out.data()), &len, reinterpret_cast<const Bytef*>(z.data()), z.size()) !=
          Z_OK) {
        state.SkipWithError("zlib refused the stream");
        return;
      }
    } else if (!dlfeed::inflate_zlib(z, out).ok()) {
      state.SkipWithError("dlfeed refused the stream");
      return;
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (std::memcmp(out.data(), plain.data(), plain.size()) != 0) state.SkipWithError("wrong output");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * plain.size()));
  state.SetLabel(zlib ? "zlib uncompress" : "dlfeed inflate_zlib");
}
BENCHMARK(BM_InflateChunk)->ArgsProduct({{1, 6}, {0, 1}});

// Adler-32 of 64 KiB: range(0) 0 = dlfeed's (AVX2 where the CPU has it), 1 = zlib's.
void BM_Adler32(benchmark::State& state) {
  const std::vector<std::byte> data = pattern(64 << 10);
  uint32_t a = 1;
  for (auto _ : state) {
    a = state.range(0) == 0 ? dlfeed::adler32(data, a)
                            : uint32_t(::adler32(a, reinterpret_cast<const Bytef*>(data.data()), data.size()));
  }
  benchmark::DoNotOptimize(a);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
  state.SetLabel(state.range(0) == 0 ? "dlfeed" : "zlib");
}
BENCHMARK(BM_Adler32)->Arg(0)->Arg(1);

// The CRC32C implementations by number: 0 portable (slicing-by-8), 1 hardware
// as dispatched (this CPU's best path), 2 crc32 chains only (SSE4.2 crc32 in
// three interleaved chains, combined by PCLMUL), 3 AVX-512 folds alone, 4
// folds with crc32 chains beside them (3 and 4 skip without AVX-512 and
// VPCLMULQDQ). Empty when the implementation can run here, else why not.
std::string crc_unavailable(int impl) {
  if (impl != 0 && !dlfeed::detail::crc32c_hardware_available()) return "no crc32 instruction on this CPU";
  if (impl >= 3 && !dlfeed::detail::crc32c_wide_available()) return "no AVX-512 VPCLMULQDQ on this CPU";
  return "";
}

uint32_t crc_by(int impl, uint32_t crc, const void* p, size_t n) {
  switch (impl) {
    case 0: return dlfeed::detail::crc32c_extend_portable(crc, p, n);
    case 1: return dlfeed::detail::crc32c_extend_hardware(crc, p, n);
    case 2: return dlfeed::detail::crc32c_extend_chains(crc, p, n);
    case 3: return dlfeed::detail::crc32c_extend_by(dlfeed::detail::crc32c_impl::Path::kFolds, crc, p, n);
    case 4: return dlfeed::detail::crc32c_extend_by(dlfeed::detail::crc32c_impl::Path::kFused, crc, p, n);
    default: return dlfeed::detail::crc32c_extend_portable(crc, p, n);
  }
}

const char* crc_label(int impl) {
  static constexpr const char* kNames[] = {"portable", "hardware (dispatched)", "crc32 chains", "AVX-512 folds",
                                           "AVX-512 folds + crc32 chains"};
  return kNames[impl];
}

// range(0): bytes; range(1): the implementation (crc_by). Target: >= 15 GB/s
// on one core for 147 KiB (a 3x224x224 uint8 record).
void BM_Crc32c(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const int impl = static_cast<int>(state.range(1));
  if (const std::string why = crc_unavailable(impl); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const std::vector<std::byte> data = pattern(n);
  uint32_t crc = 0;
  for (auto _ : state) crc = crc_by(impl, crc, data.data(), n);
  benchmark::DoNotOptimize(crc);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetLabel(crc_label(impl));
}
BENCHMARK(BM_Crc32c)->ArgsProduct({{64, 4 << 10, 128 << 10, 150528, 1 << 20}, {0, 1, 2, 3, 4}});

// The same, out of the caches: each iteration takes the next 147 KiB of a
// 256 MiB buffer, as the decoder checks records a batch's reads left in memory.
void BM_Crc32cFromMemory(benchmark::State& state) {
  const int impl = static_cast<int>(state.range(0));
  if (const std::string why = crc_unavailable(impl); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  constexpr size_t kSample = 150528;
  const std::vector<std::byte> data = pattern(size_t{256} << 20);
  size_t at = 0;
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = crc_by(impl, crc, data.data() + at, kSample);
    at = at + 2 * kSample <= data.size() ? at + kSample : 0;
  }
  benchmark::DoNotOptimize(crc);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSample));
  state.SetLabel(crc_label(impl));
}
BENCHMARK(BM_Crc32cFromMemory)->DenseRange(1, 4);

}  // namespace
