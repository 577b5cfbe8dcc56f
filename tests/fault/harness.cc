// SPDX-License-Identifier: Apache-2.0
#include "harness.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/order/order.h"
#include "support/dataset.h"

namespace dlfeed::fault {

std::vector<DatasetCase> standard_cases() {
  return {
      {"npz", FileFormat::kNpz, false, {"x", "y"}},
      {"npz_deflate", FileFormat::kNpz, false, {"x", "y"}, gen::Compression::kDeflate},
      {"npy_dlio", FileFormat::kNpy, true, {}},
      {"hdf5", FileFormat::kHdf5, false, {"records", "labels"}},
      {"hdf5_chunked_deflate", FileFormat::kHdf5, false, {"records", "labels"}, gen::Compression::kDeflate, 3},
      {"tfrecord", FileFormat::kTfRecord, false, {"image", "label"}},
  };
}

Dataset make_dataset(const DatasetCase& c, const std::string& root, uint64_t files, uint64_t per_file,
                     const Shape& shape, uint64_t seed) {
  gen::DatasetSpec spec =
      testing::dataset_spec(root + "/" + c.name, c.format, files, per_file, shape, DType::f32(), seed);
  spec.dlio_layout = c.dlio;
  spec.compression = c.compression;
  spec.chunk_samples = c.chunk_samples;
  auto written = testing::write_generated(spec);
  if (!written.ok()) {
    std::fprintf(stderr, "make_dataset %s: %s\n", c.name.c_str(), std::string(written.status().message()).c_str());
    std::abort();
  }
  Dataset d;
  d.c = c;
  d.path = written->path;
  d.files = written->files;
  d.files_n = files;
  d.per_file = per_file;
  d.seed = seed;
  d.shape = shape;
  d.dtype = spec.dtype;
  return d;
}

LoaderOptions options_for(const Dataset& d) {
  LoaderOptions o;
  o.paths = {d.path};
  o.fields = d.c.fields;
  if (d.c.format == FileFormat::kTfRecord) o.format.feature_dtype = d.dtype;
  o.batch_size = 4;
  o.threads = 2;
  o.resident = Mode::kOff;  // the faults are in the reads: read the files every epoch
  o.unpack = Mode::kOff;    // and per sample (an unpacked DLIO array is read once, outside the engines)
  return o;
}

EpochResult run_epoch(Loader& loader, const Dataset& d, uint64_t epoch, const std::function<void(uint64_t)>& on_batch) {
  EpochResult r;
  absl::Status st = loader.start_epoch(epoch);
  if (!st.ok()) {
    r.error = st;
    r.ended_after_error = true;  // refused at its start: no epoch runs
    return r;
  }
  std::string want(static_cast<size_t>(num_elements(d.shape)) * d.dtype.size, '\0');
  for (uint64_t k = 0;; ++k) {
    auto b = loader.next();
    if (!b.ok()) {
      r.error = b.status();
      auto after = loader.next();
      r.ended_after_error = after.ok() && *after == nullptr;
      return r;
    }
    if (*b == nullptr) return r;
    const Batch& batch = **b;
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint64_t id = batch.sample_ids[i];
      r.ids.push_back(id);
      gen::fill_sample(d.seed, id, d.dtype, {reinterpret_cast<std::byte*>(want.data()), want.size()});
      const auto got = batch.fields[0].sample(i);
      if (got.size() != want.size() || std::memcmp(got.data(), want.data(), want.size()) != 0) {
        r.wrong.push_back(absl::StrCat("epoch ", epoch, " sample ", id, ": bytes differ from the generator's"));
      }
      if (batch.fields.size() > 1) {
        const auto lab = batch.fields[1].sample(i);
        int64_t label = -1;
        if (lab.size() == 8) std::memcpy(&label, lab.data(), 8);
        const int64_t want_label = d.c.dlio ? 0 : gen::sample_label(id);
        if (label != want_label) {
          r.wrong.push_back(
              absl::StrCat("epoch ", epoch, " sample ", id, ": label ", label, ", expected ", want_label));
        }
      }
    }
    if (on_batch) on_batch(k);
  }
}

std::string verdict(const EpochResult& r, const Loader& loader, const Dataset& d, uint64_t epoch) {
  if (!r.wrong.empty()) {
    return absl::StrCat(r.wrong.size(), " wrong samples delivered, first: ", r.wrong.front());
  }
  if (!r.error.ok()) {
    const std::string msg(r.error.message());
    bool names_file = false;
    for (const std::string& f : d.files) names_file = names_file || msg.find(f) != std::string::npos;
    if (!names_file) return absl::StrCat("the error names none of the dataset's files: ", msg);
    // A file whose identity changed (checked at an epoch's start) has no one
    // offset to name; every other error names one.
    if (msg.find("at offset ") == std::string::npos && msg.find("changed in place") == std::string::npos) {
      return absl::StrCat("the error names no offset: ", msg);
    }
    if (!r.ended_after_error) return absl::StrCat("next() after the error did not end the epoch: ", msg);
    // What was delivered before the error is a prefix of the epoch's order.
    OrderSpec spec = loader.options().order;
    spec.epoch = epoch;
    auto order = rank_order(FileLayout::uniform(d.files_n, d.per_file), spec);
    if (!order.ok()) return std::string(order.status().message());
    if (r.ids.size() > order->size() || !std::equal(r.ids.begin(), r.ids.end(), order->begin())) {
      return absl::StrCat("the batches before the error are not a prefix of the epoch's order: ", msg);
    }
    return "";
  }
  OrderSpec spec = loader.options().order;
  spec.epoch = epoch;
  auto order = rank_order(FileLayout::uniform(d.files_n, d.per_file), spec);
  if (!order.ok()) return std::string(order.status().message());
  if (loader.options().drop_last_batch) {
    order->resize(order->size() / loader.options().batch_size * loader.options().batch_size);
  }
  if (r.ids != *order) {
    return absl::StrCat("epoch ", epoch, ": delivered ", r.ids.size(), " samples, expected ", order->size(),
                        " in the order stage's order (exactly once each)");
  }
  return "";
}

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// /proc/self/task/TID for each of this process's threads.
std::vector<std::string> thread_dirs() {
  std::vector<std::string> out;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* e = readdir(dir)) {
      if (e->d_name[0] != '.') out.push_back(std::string("/proc/self/task/") + e->d_name);
    }
    closedir(dir);
  }
  return out;
}

// What a hang looks like from inside: every thread's name, scheduler state
// and kernel wait channel, then (where gdb is installed) every thread's stack.
void describe_threads() {
  std::fprintf(stderr, "WATCHDOG: threads (name, state, kernel wait channel):\n");
  for (const std::string& task : thread_dirs()) {
    const std::string stat = read_first_line(task + "/stat");  // "TID (comm) STATE ..."
    const size_t paren = stat.rfind(')');
    const char state = paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
    std::fprintf(stderr, "  %s %-16s %c %s\n", task.substr(task.rfind('/') + 1).c_str(),
                 read_first_line(task + "/comm").c_str(), state, read_first_line(task + "/wchan").c_str());
  }
  if (std::system("command -v gdb >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "WATCHDOG: no gdb on PATH, so no stacks\n");
    return;
  }
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // let gdb, our child, attach to us
  const std::string cmd =
      absl::StrCat("gdb -p ", ::getpid(), " -batch -nx -q -ex 'thread apply all bt 30' 2>&1 | grep -v '^\\[' >&2");
  std::fflush(stderr);
  (void)std::system(cmd.c_str());
}

}  // namespace

Watchdog::Watchdog(std::chrono::seconds limit, std::string what) : what_(std::move(what)) {
  thread_ = std::thread([this, limit] {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
      std::fprintf(stderr, "WATCHDOG: %s%s%s did not finish within %lld s: the loader hung\n", what_.c_str(),
                   phase_.empty() ? "" : ", ", phase_.c_str(), static_cast<long long>(limit.count()));
      describe_threads();
      std::fflush(stderr);
      std::abort();
    }
  });
}

void Watchdog::set_phase(std::string phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = std::move(phase);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int count_dlfeed_threads() {
  int n = 0;
  for (const std::string& task : thread_dirs()) {
    n += read_first_line(task + "/comm").rfind("dlfeed-", 0) == 0;  // dlfeed-io, dlfeed-pipeline, dlfeed-pread
  }
  return n;
}

int settled_dlfeed_threads() {
  int left = count_dlfeed_threads();
  for (int i = 0; i < 100 && left > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    left = count_dlfeed_threads();
  }
  return left;
}

int count_fds() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
    closedir(dir);
  }
  return n - 1;  // the directory stream's own descriptor
}

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::vector<IoKind> backends() {
  std::vector<IoKind> k{IoKind::kSync, IoKind::kThreadPool};
  if (io_uring_available().ok()) k.push_back(IoKind::kIoUring);
  return k;
}

}  // namespace dlfeed::fault
