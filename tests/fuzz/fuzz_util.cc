// SPDX-License-Identifier: Apache-2.0
#include "fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dlfeed::fuzz {

namespace {
struct Scratch {
  std::string dir;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    dir = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/dlfeed-fuzz-", ::getpid());
    std::filesystem::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
}  // namespace

const std::string& scratch() {
  static Scratch s;
  return s.dir;
}

std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) fail(absl::StrCat("cannot write the fuzz input to ", path));
  return path;
}

void fail(const std::string& message) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

void check_error_names(const absl::Status& st, const std::string& path, const char* what) {
  if (st.ok()) return;
  if (std::string(st.message()).find(path) == std::string::npos) {
    fail(absl::StrCat(what, ": the error does not name the file ", path, ": ", st.ToString()));
  }
}

void check_index(const SampleIndex& index, const std::string& path, uint64_t size, size_t max_samples) {
  if (index.files.size() != 1 || index.files[0] != path) fail(absl::StrCat("index of ", path, ": wrong file list"));
  if (auto st = index.check(); !st.ok()) fail(absl::StrCat("index of ", path, ": ", st.ToString()));
  // A header may claim any number of samples the file bounds (or none, for
  // HDF5 data never written): the index holds no memory per sample, so
  // check a bounded spread of them.
  const uint64_t n = index.size();
  const uint64_t step = n <= 4 * max_samples ? 1 : n / (4 * max_samples);
  for (uint64_t i = 0; i < n; i += step) {
    const SampleRef ref = index.ref(i);
    if (ref.file != 0 || ref.source >= index.sources.size()) fail(absl::StrCat("sample ", i, ": bad file/source"));
    for (const Extent& e : ref.extents) {
      if (e.offset > size || e.length > size - e.offset) {
        fail(absl::StrCat(path, ": sample ", i, " has the extent [", e.offset, ", +", e.length,
                          ") outside the file of ", size, " bytes"));
      }
    }
  }
  if (index.empty()) return;
  std::vector<std::byte> raw, scratch_buf;
  const uint64_t read_step = n <= max_samples ? 1 : n / max_samples;
  for (uint64_t id = 0; id < n; id += read_step) {
    auto s = read_sample(index, id, raw, scratch_buf);
    if (!s.ok()) {
      check_error_names(s.status(), path, "read_sample");
      continue;
    }
    const SampleRef ref = index.ref(id);
    const uint64_t want = ref.nbytes();
    if (want != 0 && s->bytes.size() != want) {
      fail(absl::StrCat(path, ": sample ", id, " decoded to ", s->bytes.size(), " bytes, its index entry says ", want));
    }
    const int64_t elems = num_elements(s->shape);
    if (elems >= 0 && static_cast<uint64_t>(elems) * s->dtype.size != s->bytes.size()) {
      fail(absl::StrCat(path, ": sample ", id, " decoded to ", s->bytes.size(), " bytes for shape ",
                        shape_str(s->shape), " of ", static_cast<int>(s->dtype.size), "-byte elements"));
    }
  }
}

}  // namespace dlfeed::fuzz
