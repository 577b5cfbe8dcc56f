// SPDX-License-Identifier: Apache-2.0
// A program built against dlfeed::headers alone, with no libdlfeed on its
// link line (tests/python/packaging/test_headers_consumer.py checks the link and
// compares every answer with numpy, TensorFlow and `dlfeed order`):
//   headers_consumer order FILES PER STRATEGY SEED EPOCH RANK WORLD DROP_LAST BUFFER BLOCK WINDOW
//       one id per line; checks the resume state halfway round-trips first
//   headers_consumer explicit RANK WORLD NUM_SAMPLES ID...   the explicit order of the ids
//   headers_consumer npy FILE        "<descr> <shape> <fortran 0/1> <data offset>"
//   headers_consumer npz FILE        per member: "<name> <method> <data offset> <descr> <shape>"
//                                    (deflated members inflated, then " adler32=<the array data's>")
//   headers_consumer tfrecord FILE   per record: "record <k> <offset>", then per feature
//                                    "<name> <kind> <values...>" (bytes as hex)
//   headers_consumer counters WALL_S AU VALUES WALL_S AU VALUES
//       two ranks' counters snapshots (VALUES: comma-separated io_latency_ns
//       events, also their bytes read), each through its binary form, merged:
//       "<name> <figures...>" lines of the job's snapshot, then the merges refused
// Errors print dlfeed's message and exit 1.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "dlfeed/counters/snapshot.h"
#include "dlfeed/dtype.h"
#include "dlfeed/error.h"
#include "dlfeed/format/deflate.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/npy.h"
#include "dlfeed/format/tfrecord_framing.h"
#include "dlfeed/format/zip.h"
#include "dlfeed/order/order.h"

#ifdef DLFEED_COMPILED_LIB
#error "headers_consumer must build in header-only mode (dlfeed::headers without dlfeed::dlfeed)"
#endif

namespace {

std::vector<std::byte> read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw dlfeed::Error(absl::NotFoundError(std::string(path) + ": cannot open"));
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

uint64_t num(const char* s) { return std::strtoull(s, nullptr, 10); }

void print_ids(const std::vector<uint64_t>& ids) {
  std::string out;
  for (uint64_t id : ids) out += std::to_string(id) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int run_order(char** a) {
  const auto layout = dlfeed::FileLayout::uniform(num(a[0]), num(a[1]));
  dlfeed::OrderSpec spec;
  spec.strategy = a[2];
  spec.seed = num(a[3]);
  spec.epoch = num(a[4]);
  spec.rank = static_cast<uint32_t>(num(a[5]));
  spec.world_size = static_cast<uint32_t>(num(a[6]));
  spec.drop_last = num(a[7]) != 0;
  spec.params.buffer_size = num(a[8]);
  spec.params.block_size = num(a[9]);
  spec.params.window = num(a[10]);
  auto cursor =
      dlfeed::value_or_throw(dlfeed::OrderCursor::create(layout, spec, dlfeed::builtin_strategy(spec.strategy)));
  const std::vector<uint64_t> ids = cursor.peek(cursor.size());
  // The resume state codec: halfway, encode, decode, and the rest must match.
  dlfeed::throw_if_error(cursor.seek(cursor.size() / 2));
  const std::string state = cursor.state();
  const auto decoded = dlfeed::value_or_throw(dlfeed::decode_state(state));
  if (decoded.position != cursor.size() / 2 || decoded.spec.strategy != spec.strategy) {
    std::fprintf(stderr, "decode_state: position %llu, strategy %s\n",
                 static_cast<unsigned long long>(decoded.position), decoded.spec.strategy.c_str());
    return 1;
  }
  auto resumed =
      dlfeed::value_or_throw(dlfeed::OrderCursor::from_state(layout, state, nullptr, dlfeed::builtin_strategy));
  const std::vector<uint64_t> rest = resumed.peek(resumed.remaining());
  if (!std::equal(rest.begin(), rest.end(), ids.begin() + static_cast<ptrdiff_t>(cursor.size() / 2), ids.end())) {
    std::fprintf(stderr, "the resumed cursor differs from the original's tail\n");
    return 1;
  }
  print_ids(ids);
  return 0;
}

int run_explicit(int argc, char** a) {
  auto indices = std::make_shared<std::vector<uint64_t>>();
  for (int i = 3; i < argc; ++i) indices->push_back(num(a[i]));
  dlfeed::OrderSpec spec;
  spec.strategy = "explicit";
  spec.rank = static_cast<uint32_t>(num(a[0]));
  spec.world_size = static_cast<uint32_t>(num(a[1]));
  spec.params.indices = indices;
  const auto layout = dlfeed::FileLayout::uniform(1, num(a[2]));
  print_ids(dlfeed::value_or_throw(dlfeed::rank_order(layout, spec, dlfeed::builtin_strategy("explicit"))));
  return 0;
}

std::string header_line(const dlfeed::NpyHeader& h) {
  return h.dtype.str() + " " + dlfeed::shape_str(h.shape) + " " + (h.fortran_order ? "1" : "0") + " " +
         std::to_string(h.data_offset);
}

int run_npy(const char* path) {
  const auto bytes = read_file(path);
  const auto h = dlfeed::value_or_throw(dlfeed::parse_npy_header(bytes, path, 0));
  std::printf("%s\n", header_line(h).c_str());
  return 0;
}

int run_npz(const char* path) {
  const auto bytes = read_file(path);
  const std::span<const std::byte> all(bytes);
  const size_t tail = std::min<size_t>(bytes.size(), 65535 + 22);
  auto dir = dlfeed::value_or_throw(dlfeed::parse_zip_end(all.last(tail), bytes.size(), path));
  if (dir.entries == UINT64_MAX)
    dir = dlfeed::value_or_throw(dlfeed::parse_zip64_end(all.subspan(dir.offset), dir.offset, path));
  const auto members = dlfeed::value_or_throw(
      dlfeed::parse_zip_directory(all.subspan(dir.offset, dir.size), dir.offset, dir.entries, bytes.size(), path));
  for (const auto& m : members) {
    const uint64_t data =
        dlfeed::value_or_throw(dlfeed::zip_data_offset(all.subspan(m.local_header_offset), m, bytes.size(), path));
    std::string line = m.name + " " + std::to_string(m.method) + " " + std::to_string(data);
    if (m.method == 0) {  // stored: the member is an NPY file in place
      const auto h = dlfeed::value_or_throw(dlfeed::parse_npy_header(all.subspan(data, m.compressed_size), path, data));
      line += " " + header_line(h);
    } else if (m.method == 8) {  // deflated: inflated here, then the array's Adler-32
      std::vector<std::byte> npy(m.uncompressed_size);
      dlfeed::throw_if_error(dlfeed::inflate_raw(all.subspan(data, m.compressed_size), npy, path, data, m.name));
      const auto h = dlfeed::value_or_throw(dlfeed::parse_npy_header(npy, path, 0));
      line += " " + header_line(h) + " adler32=" +
              std::to_string(dlfeed::adler32(std::span<const std::byte>(npy).subspan(h.data_offset, h.data_bytes())));
    }
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

std::string hex(std::span<const std::byte> b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s += kDigits[static_cast<uint8_t>(x) >> 4];
    s += kDigits[static_cast<uint8_t>(x) & 0xf];
  }
  return s.empty() ? "-" : s;
}

int run_tfrecord(const char* path) {
  namespace tfr = dlfeed::tfrecord;
  const auto bytes = read_file(path);
  const std::span<const std::byte> all(bytes);
  uint64_t off = 0;
  for (uint64_t k = 0; off < bytes.size(); ++k) {
    const uint64_t length = dlfeed::value_or_throw(tfr::parse_header(all.subspan(off), true, path, off));
    if (length > bytes.size() - off - std::min<uint64_t>(bytes.size() - off, tfr::kOverhead)) {
      throw dlfeed::Error(absl::DataLossError(std::string(path) + ": record at offset " + std::to_string(off) +
                                              " runs past the end of the file"));
    }
    const auto payload =
        dlfeed::value_or_throw(tfr::unframe_record(all.subspan(off, length + tfr::kOverhead), true, path, off));
    std::printf("record %llu %llu\n", static_cast<unsigned long long>(k), static_cast<unsigned long long>(off));
    const dlfeed::example::Context ctx{path, off + tfr::kHeaderSize};
    auto features = dlfeed::value_or_throw(dlfeed::example::parse_example(payload, ctx));
    std::sort(features.begin(), features.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [name, f] : features) {
      std::string line = name + " " + dlfeed::example::kind_name(f.kind);
      for (const auto& b : f.bytes) line += " " + hex(b);
      for (float v : f.floats) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.9g", static_cast<double>(v));
        line += buf;
      }
      for (int64_t v : f.int64s) line += " " + std::to_string(v);
      std::printf("%s\n", line.c_str());
    }
    off += length + tfr::kOverhead;
  }
  return 0;
}

namespace cnt = dlfeed::counters;

std::vector<uint64_t> csv(const char* s) {
  std::vector<uint64_t> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    out.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

// One process's snapshot: `values` as io_latency events (ns) and as bytes
// read, in one epoch (0) of `wall_s` seconds at `au` percent AU.
cnt::Snapshot rank_snapshot(double wall_s, double au, const std::vector<uint64_t>& values) {
  cnt::Snapshot s;
  s.counters.resize(cnt::kNumIds);
  for (size_t i = 0; i < cnt::kNumIds; ++i) {
    cnt::CounterValue& v = s.counters[i];
    v.id = static_cast<cnt::Id>(i);
    v.name = cnt::info(v.id).name;
    v.unit = cnt::info(v.id).unit;
    v.kind = cnt::info(v.id).kind;
  }
  std::vector<uint64_t> dense(cnt::kHistBuckets, 0);
  uint64_t sum = 0, mx = 0;
  for (uint64_t v : values) {
    ++dense[cnt::bucket_of(v)];
    sum += v;
    mx = std::max(mx, v);
  }
  cnt::CounterValue& io = s.counters[static_cast<size_t>(cnt::Id::kIoLatency)];
  io.value = sum;
  io.count = values.size();
  io.dist = cnt::summarize_dense(dense.data(), values.size(), sum, mx);
  cnt::CounterValue& bytes = s.counters[static_cast<size_t>(cnt::Id::kBytesRead)];
  bytes.value = sum;
  bytes.count = values.size();
  cnt::EpochReport e;
  e.epoch = 0;
  e.complete = true;
  e.wall_s = e.wall_min_s = wall_s;
  e.au_percent = au;
  e.bytes_read = sum;
  e.dist[static_cast<size_t>(cnt::Id::kIoLatency)] = io.dist;
  s.epochs.push_back(e);
  s.total = e;
  s.total.epoch = -1;
  return s;
}

// The snapshot as another process would receive it: its exact binary form, read back.
cnt::Snapshot sent(const cnt::Snapshot& s) {
  const std::string bytes = s.serialize();
  cnt::Snapshot back = dlfeed::value_or_throw(cnt::Snapshot::deserialize(bytes));
  if (back.serialize() != bytes) throw dlfeed::Error(absl::InternalError("snapshot changed through its binary form"));
  return back;
}

int run_counters(char** a) {
  const cnt::Snapshot r0 = sent(rank_snapshot(std::strtod(a[0], nullptr), std::strtod(a[1], nullptr), csv(a[2])));
  const cnt::Snapshot r1 = sent(rank_snapshot(std::strtod(a[3], nullptr), std::strtod(a[4], nullptr), csv(a[5])));
  const cnt::Snapshot job = sent(dlfeed::value_or_throw(cnt::merge_ranks({r0, r1})));
  const cnt::Distribution& d = job[cnt::Id::kIoLatency].dist;
  const cnt::EpochReport& e = job.epochs.at(0);
  std::printf("ranks %u %zu\n", job.ranks, job.rank_totals.size());
  std::printf("io_latency_ns %llu %llu %llu %.17g %.17g %.17g %.17g\n", static_cast<unsigned long long>(d.count),
              static_cast<unsigned long long>(d.sum), static_cast<unsigned long long>(d.max), d.mean, d.p50, d.p95,
              d.p99);
  std::printf("bytes_read %llu\n", static_cast<unsigned long long>(job[cnt::Id::kBytesRead].value));
  std::printf("epoch %lld %.17g %.17g %.17g %.17g %.17g %llu %u\n", static_cast<long long>(e.epoch), e.wall_s,
              e.wall_min_s, e.au_percent, e.au_min_percent, e.au_max_percent,
              static_cast<unsigned long long>(e.bytes_read), e.ranks);
  // What merge_ranks refuses: a snapshot already merged, epochs that differ.
  cnt::Snapshot later = r1;
  later.epochs[0].epoch = 1;
  for (const auto& bad : {std::vector<cnt::Snapshot>{r0, job}, std::vector<cnt::Snapshot>{r0, later}}) {
    const auto m = cnt::merge_ranks(bad);
    std::printf("refused %s\n", m.ok() ? "(merged)" : std::string(m.status().message()).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "order" && argc == 13) return run_order(argv + 2);
    if (cmd == "explicit" && argc >= 5) return run_explicit(argc - 2, argv + 2);
    if (cmd == "npy" && argc == 3) return run_npy(argv[2]);
    if (cmd == "npz" && argc == 3) return run_npz(argv[2]);
    if (cmd == "tfrecord" && argc == 3) return run_tfrecord(argv[2]);
    if (cmd == "counters" && argc == 8) return run_counters(argv + 2);
    std::fprintf(stderr, "usage: see tests/headers_consumer/main.cc\n");
    return 2;
  } catch (const dlfeed::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
