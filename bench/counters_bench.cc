// SPDX-License-Identifier: Apache-2.0
// Overhead of the built-in counters and traces (docs/performance.md, "Counter
// and trace overhead"): whole epochs of a warm-cache, small-sample dataset
// (the hardest case: the most events per byte), reported as samples/s.
// Build twice, -DDLFEED_COUNTERS=ON (default) and OFF, and run them in turn:
//   build-cnt/bench/counters_bench --benchmark_filter=Epoch
//   build-cnt-off/bench/counters_bench --benchmark_filter=Epoch
// BM_Epoch/trace:1 records trace events too (ON builds only).
// BM_Record* is the cost of one recording call.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "dev/generate.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/loader.h"

namespace {

// 4 HDF5 files x 50,000 samples of 16 float32 (64 bytes), contiguous.
const std::string& dataset() {
  static const std::string dir = [] {
    const char* env = std::getenv("DLFEED_BENCH_DIR");
    std::string d = std::string(env ? env : "/tmp") + "/dlfeed_counters_bench";
    if (!std::filesystem::exists(d + "/img_3.hdf5")) {
      dlfeed::gen::DatasetSpec spec;
      spec.dir = d;
      spec.format = dlfeed::FileFormat::kHdf5;
      spec.files = 4;
      spec.samples_per_file = 50000;
      spec.sample_shape = {16};
      spec.dtype = dlfeed::DType::parse("<f4").value();
      if (!dlfeed::gen::write_dataset(spec).ok()) std::abort();
    }
    return d;
  }();
  return dir;
}

void BM_Epoch(benchmark::State& state) {
  dlfeed::LoaderOptions o;
  o.paths = {dataset()};
  o.fields = {"records"};
  o.batch_size = 128;
  o.threads = 2;
  o.order.strategy = "sequential";
  o.trace.enabled = state.range(0) != 0;
  o.trace.max_events = 1'000'000;
  auto loader = dlfeed::Loader::create(o).value();
  uint64_t samples = 0, epoch = 0;
  for (auto _ : state) {
    for (const auto& b : loader->epoch(epoch++)) samples += b->size();
    if (o.trace.enabled) {
      // Keep the trace buffer from filling up between epochs: a fresh loader.
      state.PauseTiming();
      loader.reset();
      loader = dlfeed::Loader::create(o).value();
      state.ResumeTiming();
    }
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.counters["counters"] = dlfeed::counters::kEnabled ? 1 : 0;
}
BENCHMARK(BM_Epoch)->ArgName("trace")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_RecordSample(benchmark::State& state) {
  dlfeed::counters::Counters c;
  uint64_t v = 1;
  for (auto _ : state) c.sample(dlfeed::counters::Id::kDecode, v++);
}
BENCHMARK(BM_RecordSample);

void BM_RecordInterval(benchmark::State& state) {
  dlfeed::counters::Counters c;
  for (auto _ : state) {
    const uint64_t t = c.now();
    c.interval_begin(dlfeed::counters::Component::kDecode, t);
    c.interval_end(dlfeed::counters::Component::kDecode, t + 10);
  }
}
BENCHMARK(BM_RecordInterval);

void BM_Trace(benchmark::State& state) {
  dlfeed::counters::TraceOptions to;
  to.enabled = true;
  to.max_events = 1 << 20;
  dlfeed::counters::Counters c(to);
  uint64_t i = 0;
  for (auto _ : state) c.trace("decode", "decode", i++, 5);
}
BENCHMARK(BM_Trace);

}  // namespace
