// SPDX-License-Identifier: Apache-2.0
// `dlfeed dlio`'s order and dataset: DLIO's shuffles as a dlfeed strategy,
// the dataset written in DLIO's layout, the files read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dev/generate.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "dlio_internal.h"

namespace dlfeed::cli::dlio {

namespace fs = std::filesystem;

OrderMapping map_order(const DlioConfig& c) {
  OrderMapping m;
  const bool files = c.file_shuffle != "off", samples = c.sample_shuffle != "off";
  const bool random = (files && c.file_shuffle == "random") || (samples && c.sample_shuffle == "random");
  m.seed = static_cast<uint64_t>(c.seed);
  if (random) m.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (c.sampler() == "iterative") {
    if (samples) {
      m.strategy = "buffered_shuffle";
      m.buffer_size = static_cast<uint64_t>(c.shuffle_size);
      m.why = absl::StrCat("iterative sampler, sample_shuffle ", c.sample_shuffle, ": a shuffle buffer of ",
                           c.shuffle_size, " samples over ",
                           files ? "the shuffled file list"
                                 : "the file list (dlfeed's buffer reads a shuffled file list; DLIO's does not)");
    } else if (files) {
      m.strategy = "file_shuffle";
      m.why = "iterative sampler, file_shuffle only: the file list shuffled, samples in file order";
    } else {
      m.why = "iterative sampler, no shuffle: file order";
    }
    m.same_every_epoch = !c.seed_change_epoch;
  } else {
    if (samples) {
      m.strategy = "global_shuffle";
      m.why = absl::StrCat("index sampler, sample_shuffle ", c.sample_shuffle,
                           ": a permutation of all samples (DLIO permutes each rank's contiguous range)");
      // DLIO's index sampler seeds numpy with train.seed at every epoch.
      m.same_every_epoch = c.sample_shuffle == "seed" || !c.seed_change_epoch;
      if (m.same_every_epoch) absl::StrAppend(&m.why, "; the same order every epoch, as DLIO's");
    } else {
      m.why = "index sampler, no sample_shuffle: sample order";
    }
    if (files) absl::StrAppend(&m.why, "; file_shuffle has no effect with the index sampler (none in DLIO either)");
  }
  if (random) absl::StrAppend(&m.why, absl::StrFormat("; 'random': seed %llu drawn now", m.seed));
  return m;
}

// --- the dataset ------------------------------------------------------------

namespace {

size_t digits(uint64_t n) { return absl::StrCat(n).size(); }

/// The path DLIO's generator gives file i of `count` in `split`.
std::string dlio_path(const DlioConfig& c, const std::string& split, uint64_t i, uint64_t count, uint64_t subfolders) {
  fs::path p = fs::path(c.data_dir()) / split;
  if (subfolders > 1) p /= absl::StrFormat("%0*d", static_cast<int>(digits(subfolders)), i % subfolders);
  return (p / gen::dlio_file_name(c.file_prefix, i, count, c.extension())).string();
}

}  // namespace

void generate(const DlioConfig& c, bool quiet) {
  const auto t0 = Clock::now();
  const uint64_t train = static_cast<uint64_t>(c.num_files_train), valid = static_cast<uint64_t>(c.num_files_eval);
  const uint64_t spf = static_cast<uint64_t>(c.num_samples_per_file);
  const int64_t side = std::max<int64_t>(1, c.dimension());
  const double side_stdev = c.record_length_stdev / 2.0 / std::sqrt(c.record_length);
  ComputeModel draw(static_cast<double>(side), side_stdev, 10);  // DLIO seeds its generator with 10
  gen::Compression compression = gen::Compression::kNone;
  if (c.compression != "none") {
    const bool ok = (c.format == "hdf5" && c.compression == "gzip") || (c.format == "npz" && c.compression == "zip");
    if (!ok) {
      throw Error(absl::UnimplementedError(absl::StrCat("workload.dataset.compression: dlfeed generates ", c.format,
                                                        " with compression ", c.format == "hdf5" ? "gzip" : "zip",
                                                        " or none, not ", c.compression)));
    }
    compression = gen::Compression::kDeflate;
  }
  uint64_t bytes = 0;
  for (const bool is_train : {true, false}) {
    const uint64_t count = is_train ? train : valid;
    const std::string split = is_train ? "train" : "valid";
    const uint64_t sub = static_cast<uint64_t>(is_train ? c.num_subfolders_train : c.num_subfolders_eval);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t file_no = is_train ? i : train + i;
      gen::FileSpec f;
      f.path = dlio_path(c, split, i, count, sub);
      std::error_code ec;
      fs::create_directories(fs::path(f.path).parent_path(), ec);
      if (ec) throw_if_error(absl::InternalError(absl::StrCat(f.path, ": mkdir: ", ec.message())));
      const int64_t d1 = std::max<int64_t>(1, static_cast<int64_t>(draw.next()));
      const int64_t d2 = std::max<int64_t>(1, static_cast<int64_t>(draw.next()));
      f.sample_shape = {d1, d2};
      // A stdev far above the record length (e.g. record_length overridden, its stdev not) draws sides
      // no memory holds; say which keys, rather than fail to allocate.
      if (static_cast<double>(d1) * static_cast<double>(d2) * static_cast<double>(spf) > 16.0 * (1ull << 30)) {
        throw Error(absl::InvalidArgumentError(
            absl::StrCat(f.path, ": drew a ", d1, " x ", d2, " sample (", spf, " per file): over 16 GiB per file; ",
                         "workload.dataset.record_length_stdev (", c.record_length_stdev,
                         ") is too large for record_length (", c.record_length, ")")));
      }
      f.num_samples = spf;
      f.first_global_id = file_no * spf;
      f.seed = 10;
      f.zero_labels = true;
      f.compression = compression;
      f.level = static_cast<int>(c.compression_level);
      absl::Status st;
      if (c.format == "npz") {
        f.axis = SampleAxis::kLast;
        st = gen::write_npz_file(f);
      } else if (c.format == "npy") {
        f.axis = SampleAxis::kLast;
        st = gen::write_npy_file(f);
      } else if (c.format == "hdf5") {
        f.axis = SampleAxis::kFirst;
        f.data_names = {"records"};  // DLIO 2.0.0's dataset names
        f.label_name = "labels";
        f.chunk_samples = c.enable_chunking ? 1 : 0;
        // DLIO's (1, c, c), c = ceil(sqrt(chunk_size)), at most the sample's side.
        if (c.enable_chunking && c.chunk_size > 0) {
          f.chunk_inner = static_cast<uint64_t>(std::ceil(std::sqrt(static_cast<double>(c.chunk_size))));
        }
        st = gen::write_hdf5_file(f);
      } else if (c.format == "indexed_binary" || c.format == "mmap_indexed_binary") {
        st = gen::write_indexed_binary_file(f);  // NAME.EXT + .off.idx + .sz.idx, as DLIO's generator
      } else {
        const fs::path idx = fs::path(c.data_dir()) / "index" / split;
        fs::create_directories(idx, ec);
        if (ec) throw_if_error(absl::InternalError(absl::StrCat(idx.string(), ": mkdir: ", ec.message())));
        f.index_path = (idx / (fs::path(f.path).filename().string() + ".idx")).string();
        f.size_feature = side;  // DLIO's `size`: the nominal side, whatever sides it drew
        st = gen::write_tfrecord_file(f);
      }
      throw_if_error(st);
      bytes += fs::file_size(f.path, ec);
    }
  }
  if (!quiet) {
    std::printf("generate_data: %llu train + %llu valid files (%.1f MB) in %s in %.3f s\n",
                static_cast<unsigned long long>(train), static_cast<unsigned long long>(valid), bytes / 1e6,
                c.data_dir().c_str(), since(t0));
  }
}

namespace {
// The objects under DIR/ (a URL) ending in `ext`: those right under it, and
// those one folder down (DLIO's sub-folders), as the folder walk finds files.
void list_objects(const std::string& dir, const std::string& ext, std::vector<std::string>& direct,
                  std::vector<std::string>& nested) {
  absl::StatusOr<std::shared_ptr<ObjectStore>> store = object_store_for(dir);
  if (!store.ok()) throw Error(store.status());
  absl::StatusOr<std::vector<ObjectInfo>> objects = (*store)->list(dir + "/");
  if (!objects.ok()) throw Error(objects.status());
  for (const ObjectInfo& o : *objects) {
    const absl::string_view rest = absl::string_view(o.url).substr(dir.size() + 1);
    if (!absl::EndsWith(rest, ext)) continue;
    const size_t slashes = static_cast<size_t>(std::count(rest.begin(), rest.end(), '/'));
    if (slashes == 0) direct.push_back(o.url);
    if (slashes == 1) nested.push_back(o.url);
  }
}
}  // namespace

std::vector<std::string> dataset_files(const DlioConfig& c, const std::string& split, uint64_t want) {
  const bool objects = is_object_url(c.data_dir());
  const fs::path dir = objects ? fs::path() : fs::path(c.data_dir()) / split;
  const std::string shown = objects ? absl::StrCat(c.data_dir(), "/", split) : dir.string();
  std::vector<std::string> direct, nested;
  std::error_code ec;
  const std::string ext = absl::StrCat(".", c.extension());
  if (objects) {
    list_objects(shown, ext, direct, nested);
  } else if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file(ec) && absl::EndsWith(e.path().filename().string(), ext)) {
        direct.push_back(e.path().string());
      } else if (e.is_directory(ec)) {
        for (const auto& f : fs::directory_iterator(e.path(), ec)) {
          if (f.is_regular_file(ec) && absl::EndsWith(f.path().filename().string(), ext))
            nested.push_back(f.path().string());
        }
      }
    }
  }
  std::vector<std::string> files = direct.empty() ? nested : direct;
  if (direct.empty()) {
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      return fs::path(a).filename() < fs::path(b).filename();
    });
  } else {
    std::sort(files.begin(), files.end());
  }
  if (files.size() < want) {
    throw Error(absl::NotFoundError(
        absl::StrCat(shown, ": ", files.size(), " ", ext, " files where workload.dataset.num_files_",
                     split == "train" ? "train" : "eval", " asks for ", want,
                     "; generate them with ++workload.workflow.generate_data=True (as DLIO says)")));
  }
  files.resize(want);
  return files;
}

}  // namespace dlfeed::cli::dlio
