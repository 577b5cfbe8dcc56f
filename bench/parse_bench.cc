// SPDX-License-Identifier: Apache-2.0
// Parser micro benchmarks: the per-file and per-sample CPU work of the
// formats, without I/O (except BM_TfrecordScanFile, which scans a cached file
// through the real scan_records).
//   build/bench/parse_bench                          # every case
//   build/bench/parse_bench --benchmark_filter=Crc   # one family
// items/s are headers, records or Examples per second; bytes/s count the
// bytes the case walks over (payloads for CRC and unframing).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/dtype.h"
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

// range(0): bytes; range(1): 0 = portable (slicing-by-8), 1 = hardware (SSE4.2
// crc32 in three interleaved chains, combined by PCLMUL). Target: >= 15 GB/s
// on one core for 147 KiB (a 3x224x224 uint8 record).
void BM_Crc32c(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const int impl = static_cast<int>(state.range(1));  // 0 portable, 1 hardware (dispatched), 2 crc32 chains only
  if (impl != 0 && !dlfeed::detail::crc32c_hardware_available()) {
    state.SkipWithError("no crc32 instruction on this CPU");
    return;
  }
  const std::vector<std::byte> data = pattern(n);
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = impl == 1   ? dlfeed::detail::crc32c_extend_hardware(crc, data.data(), n)
          : impl == 2 ? dlfeed::detail::crc32c_extend_chains(crc, data.data(), n)
                      : dlfeed::detail::crc32c_extend_portable(crc, data.data(), n);
  }
  benchmark::DoNotOptimize(crc);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
  const bool wide = impl == 1 && n >= 1024 && dlfeed::detail::crc32c_wide_available();
  state.SetLabel(impl == 0 ? "portable" : impl == 2 ? "crc32 chains" : wide ? "hardware: AVX-512 fold" : "hardware");
}
BENCHMARK(BM_Crc32c)->ArgsProduct({{64, 4 << 10, 128 << 10, 150528, 1 << 20}, {0, 1, 2}});

// The same, out of the caches: each iteration takes the next 147 KiB of a
// 256 MiB buffer, as the decoder checks records a batch's reads left in memory.
void BM_Crc32cFromMemory(benchmark::State& state) {
  const int impl = static_cast<int>(state.range(0));
  if (!dlfeed::detail::crc32c_hardware_available()) {
    state.SkipWithError("no crc32 instruction on this CPU");
    return;
  }
  constexpr size_t kSample = 150528;
  const std::vector<std::byte> data = pattern(size_t{256} << 20);
  size_t at = 0;
  uint32_t crc = 0;
  for (auto _ : state) {
    const std::byte* p = data.data() + at;
    crc = impl == 1 ? dlfeed::detail::crc32c_extend_hardware(crc, p, kSample)
                    : dlfeed::detail::crc32c_extend_chains(crc, p, kSample);
    at = at + 2 * kSample <= data.size() ? at + kSample : 0;
  }
  benchmark::DoNotOptimize(crc);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSample));
  state.SetLabel(impl == 2 ? "crc32 chains" : dlfeed::detail::crc32c_wide_available() ? "AVX-512 fold" : "hardware");
}
BENCHMARK(BM_Crc32cFromMemory)->Arg(1)->Arg(2);

}  // namespace
