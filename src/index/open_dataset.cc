// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/format/format.h"

#include <glob.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/indexed_binary.h"
#include "dlfeed/format/tfrecord.h"
#include "dlfeed/io/object_store.h"
#include "format/array_source.h"
#include "format/open_listed.h"
#include "format/whole_source.h"
#include "index/folder_walk.h"
#include "index_cache.h"

namespace dlfeed::inline DLFEED_ABI {
namespace fs = std::filesystem;
using detail::Gathered;
using detail::read_each_file_once;
using detail::walk_folder;

absl::StatusOr<FileFormat> detect_format(const std::string& path) {
  const fs::path p(path);
  std::string ext = absl::AsciiStrToLower(p.extension().string());
  // TFRecord files may be compressed under any name; "x.tfrecord.gz" is one
  // by name too (open_tfrecord tells GZIP/ZLIB by the magic bytes).
  const bool gz = ext == ".gz";
  if (gz) ext = absl::AsciiStrToLower(p.stem().extension().string());
  auto is_tfrecord = [](const std::string& e) {
    return e == ".tfrecord" || e == ".tfrecords" || e == ".tfrec" || e == ".tfr";
  };
  if (is_tfrecord(ext)) return FileFormat::kTfRecord;
  if (!gz && is_indexed_binary_name(path)) return FileFormat::kIndexedBinary;
  if (!gz) {
    if (ext == ".npy") return FileFormat::kNpy;
    if (ext == ".npz") return FileFormat::kNpz;
    if (ext == ".h5" || ext == ".hdf5" || ext == ".hdf" || ext == ".he5") return FileFormat::kHdf5;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": cannot tell the format from the extension '", gz ? ext + ".gz" : ext,
                   "' (expected .npy, .npz, .h5/.hdf5, .tfrecord/.tfrecords/.tfrec/.tfr (also + .gz), "
                   ".indexed_binary/.mmap_indexed_binary, or .bin with its .idx); pass the format explicitly"));
}

std::string format_name(FileFormat f) {
  switch (f) {
    case FileFormat::kAuto: return "auto";
    case FileFormat::kNpy: return "npy";
    case FileFormat::kNpz: return "npz";
    case FileFormat::kHdf5: return "hdf5";
    case FileFormat::kTfRecord: return "tfrecord";
    case FileFormat::kIndexedBinary: return "indexed_binary";
  }
  return "?";
}

absl::StatusOr<FileFormat> parse_format(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "auto") return FileFormat::kAuto;
  if (n == "npy") return FileFormat::kNpy;
  if (n == "npz") return FileFormat::kNpz;
  if (n == "hdf5" || n == "h5") return FileFormat::kHdf5;
  if (n == "tfrecord" || n == "tfrecords") return FileFormat::kTfRecord;
  if (n == "indexed_binary" || n == "mmap_indexed_binary" || n == "megatron") return FileFormat::kIndexedBinary;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", name, "' (expected npy, npz, hdf5, tfrecord or indexed_binary)"));
}

std::string axis_name(SampleAxis a) {
  switch (a) {
    case SampleAxis::kFirst: return "first";
    case SampleAxis::kLast: return "last";
    case SampleAxis::kAuto: return "auto";
    case SampleAxis::kNone: return "none";
  }
  return "?";
}

absl::StatusOr<SampleAxis> parse_axis(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "first" || n == "0") return SampleAxis::kFirst;
  if (n == "last" || n == "-1") return SampleAxis::kLast;
  if (n == "auto") return SampleAxis::kAuto;
  if (n == "none") return SampleAxis::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "bad axis '", name, "': expected first, last (the DLIO layout), none (the whole array one sample) or auto"));
}

std::optional<std::string> pattern_stem(const std::string& path, absl::string_view pattern) {
  const size_t star = pattern.find('*');
  if (star == absl::string_view::npos) return std::nullopt;
  const absl::string_view head = pattern.substr(0, star), tail = pattern.substr(star + 1);
  const std::string name = fs::path(path).filename().string();
  if (name.size() < head.size() + tail.size() || !absl::StartsWith(name, head) || !absl::EndsWith(name, tail)) {
    return std::nullopt;
  }
  return name.substr(head.size(), name.size() - head.size() - tail.size());
}

namespace {
// open_file with what a folder listing knows of the file.
absl::StatusOr<SampleIndex> open_listed_file(const std::string& path, const FormatOptions& options,
                                             const detail::ListedFile& listed) {
  FileFormat f = options.format;
  if (f == FileFormat::kAuto) {
    DLFEED_ASSIGN_OR_RETURN(f, detect_format(path));
  }
  switch (f) {
    case FileFormat::kNpy: return open_npy(path, options);
    case FileFormat::kNpz: return open_npz(path, options);
    case FileFormat::kHdf5: {
      // HDF5 datasets are read on axis 0 (or whole): DLIO writes its HDF5 files so, and its layout
      // (axis last, layout "dlio") reads its files ({prefix}_{i}_of_{n}.h5, wherever they were
      // copied) so; another file's "last" asked for is not what would be read.
      if (options.axis == SampleAxis::kLast && !detail::dlio_file_name(path)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path,
                         ": axis 'last' (also layout 'dlio') reads NPY and NPZ arrays on their last axis; an HDF5 "
                         "dataset is read on axis 0 (samples first) or whole (axis 'none'), and DLIO's HDF5 files "
                         "({prefix}_{i}_of_{n}.h5) on axis 0: pass axis 'first' or 'none'"));
      }
      DLFEED_ASSIGN_OR_RETURN(SampleIndex index, open_hdf5(path, options));
      if (options.axis == SampleAxis::kNone) {
        for (auto& src : index.sources) src = detail::whole_of(std::move(src));
        index.file_begin = {0, 1};
      }
      return index;
    }
    case FileFormat::kTfRecord: return detail::open_tfrecord_listed(path, options, listed);
    case FileFormat::kIndexedBinary: return open_indexed_binary(path, options);
    case FileFormat::kAuto: break;
  }
  return absl::InternalError("unreachable format");
}
}  // namespace

absl::StatusOr<SampleIndex> open_file(const std::string& path, const FormatOptions& options) {
  return open_listed_file(path, options, detail::ListedFile{});
}

namespace {

bool all_digits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

/// What a folder holds, for the error when none of it is data: up to 12
/// names (sub-folders with a slash) and a count of the rest.
std::string folder_listing(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string() + (it->is_directory(ec) ? "/" : ""));
  }
  if (names.empty()) return "it is empty";
  std::sort(names.begin(), names.end());
  const size_t shown = std::min<size_t>(names.size(), 12);
  std::string out = absl::StrCat("it holds ", absl::StrJoin(names.begin(), names.begin() + shown, ", "));
  if (names.size() > shown) absl::StrAppend(&out, " and ", names.size() - shown, " more");
  return out;
}

// Opening the files of a dataset. Each file is indexed on its own
// (open_file), so files are opened by several threads at once and their
// indices appended in path order: the result is the serial one. Threads, not
// oneTBB tasks: an open mostly waits on the file system (open, stat, a header
// read; each a round trip on a cold cache or a parallel file system), and
// oneTBB's arenas stop at the core count, which would leave a 2-core machine
// with 2 requests in flight. HDF5 files still go through libhdf5 one at a
// time (its calls are under the dlfeed HDF5 lock); the rest overlaps.

// Most threads opening files at once.
constexpr unsigned kMaxOpenThreads = 16;
// Files per thread below which another thread is not worth starting.
constexpr size_t kFilesPerThread = 4;
// Files opened ahead of the one appended next. Bounds the indices held
// before they are appended (behind one slow file) and what is opened in
// vain after a failing one.
constexpr size_t kOpenWindow = 1024;

unsigned open_threads(size_t files) {
  size_t n = std::min<size_t>(kMaxOpenThreads, files / kFilesPerThread);
  // An open holds up to 3 descriptors at once (the file, a .idx sidecar,
  // libhdf5's own); leave the rest of the limit to the process.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    n = std::min<size_t>(n, rl.rlim_cur / 8);
  }
  return static_cast<unsigned>(std::max<size_t>(n, 1));
}

absl::StatusOr<SampleIndex> open_one(const std::string& path, const FormatOptions& options,
                                     const detail::ListedFile& listed) {
  try {
    return open_listed_file(path, options, listed);
  } catch (const std::exception& e) {  // std::bad_alloc: on a worker it would end the process
    return absl::ResourceExhaustedError(absl::StrCat(path, ": indexing failed: ", e.what()));
  }
}

// `ready[i]`, when set, is file i's index already (from the index cache):
// it is appended in its place and the file is not opened.
absl::StatusOr<SampleIndex> open_serially(const std::vector<std::string>& files, const FormatOptions& options,
                                          std::vector<std::optional<SampleIndex>>& ready,
                                          const std::vector<detail::ListedFile>& listed) {
  SampleIndex all;
  for (size_t i = 0; i < files.size(); ++i) {
    if (ready[i]) {
      all.append(std::move(*ready[i]));
      continue;
    }
    DLFEED_ASSIGN_OR_RETURN(SampleIndex one, open_one(files[i], options, listed[i]));
    all.append(std::move(one));
  }
  return all;
}

absl::StatusOr<SampleIndex> open_files(const std::vector<std::string>& files, const FormatOptions& options,
                                       std::vector<std::optional<SampleIndex>>& ready,
                                       const std::vector<detail::ListedFile>& listed) {
  const size_t n = files.size();
  size_t to_open = 0;
  for (const auto& r : ready) to_open += !r.has_value();
  const unsigned threads = open_threads(to_open);
  if (threads <= 1) return open_serially(files, options, ready, listed);
  // File i's index goes to slot i % window once file i - window has been
  // appended; slot.ready == i + 1 says it is there.
  struct Slot {
    std::atomic<uint64_t> ready{0};
    std::optional<absl::StatusOr<SampleIndex>> result;
  };
  const size_t window = std::min(n, kOpenWindow);
  std::vector<Slot> slots(window);
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> appended{0};  // after a failure: n + window, which releases every waiting thread
  std::atomic<bool> stop{false};
  auto work = [&] {
    for (;;) {
      const uint64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      for (uint64_t a = appended.load(std::memory_order_acquire); i >= a + window;
           a = appended.load(std::memory_order_acquire)) {
        appended.wait(a, std::memory_order_acquire);
      }
      if (stop.load(std::memory_order_acquire)) return;
      Slot& slot = slots[i % window];
      if (ready[i]) {
        slot.result.emplace(std::move(*ready[i]));  // from the index cache; each i is one thread's
      } else {
        slot.result.emplace(open_one(files[i], options, listed[i]));
      }
      slot.ready.store(i + 1, std::memory_order_release);
      slot.ready.notify_one();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: open with those started
    }
  }
  if (pool.empty()) return open_serially(files, options, ready, listed);

  SampleIndex all;
  absl::Status failed;
  for (uint64_t i = 0; i < n; ++i) {
    Slot& slot = slots[i % window];
    for (uint64_t r = slot.ready.load(std::memory_order_acquire); r != i + 1;
         r = slot.ready.load(std::memory_order_acquire)) {
      slot.ready.wait(r, std::memory_order_acquire);
    }
    absl::StatusOr<SampleIndex> one = std::move(*slot.result);
    slot.result.reset();
    if (!one.ok()) {
      // The first failure in path order (every file before it is appended),
      // as the serial loop reports it.
      failed = one.status();
      stop.store(true, std::memory_order_release);
      appended.store(n + window, std::memory_order_release);
      appended.notify_all();
      break;
    }
    all.append(std::move(*one));
    appended.store(i + 1, std::memory_order_release);
    appended.notify_all();
  }
  for (std::thread& t : pool) t.join();
  if (!failed.ok()) return failed;
  return all;
}

/// A DLIO data_folder (subfolders train/ and valid/, as DLIO's generator
/// leaves them) is read as its training split, DIR/train, with a note: its
/// valid/ is the evaluation split, and what else it holds (but hidden names)
/// is named as not read. Any other folder is itself.
std::string training_split(const std::string& dir) {
  std::error_code ec;
  const fs::path train = fs::path(dir) / "train";
  if (!fs::is_directory(train, ec) || !fs::is_directory(fs::path(dir) / "valid", ec)) return dir;
  std::vector<std::string> others;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != "train" && name != "valid" && !name.empty() && name[0] != '.') others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  std::string also;
  if (!others.empty()) {
    const size_t shown = std::min<size_t>(others.size(), 4);
    also = absl::StrCat("; not read either: ", absl::StrJoin(others.begin(), others.begin() + shown, ", "),
                        others.size() > shown ? absl::StrCat(" and ", others.size() - shown, " more") : "");
  }
  std::fprintf(stderr,
               "dlfeed: note: %s holds train/ and valid/ (a DLIO data folder): reading %s, the training split; "
               "name %s to read the evaluation split%s\n",
               dir.c_str(), train.lexically_normal().c_str(), (fs::path(dir) / "valid").lexically_normal().c_str(),
               also.c_str());
  return train.string();
}

// The files whose name matches `pattern` (one '*'), ordered by folder, then
// by what the '*' matched: the order every field of another pattern over
// the same files has, so that their files pair one by one.
absl::StatusOr<std::vector<std::string>> files_of_pattern(std::vector<std::string> files, const std::string& pattern,
                                                          const std::vector<std::string>& given) {
  if (std::count(pattern.begin(), pattern.end(), '*') != 1 || pattern.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("file pattern '", pattern,
                                                   "': expected a file name with exactly one '*' (e.g. *_data.npy), "
                                                   "which pairs the files of several fields"));
  }
  std::vector<std::pair<std::pair<std::string, std::string>, std::string>> kept;  // ((folder, stem), path)
  for (std::string& f : files) {
    if (std::optional<std::string> stem = pattern_stem(f, pattern)) {
      kept.emplace_back(std::pair{fs::path(f).parent_path().string(), std::move(*stem)}, std::move(f));
    }
  }
  if (kept.empty()) {
    std::vector<std::string> names;
    names.reserve(files.size());
    for (const std::string& f : files) names.push_back(fs::path(f).filename().string());
    const size_t shown = std::min<size_t>(names.size(), 12);
    std::string there = names.empty() ? "no data file" : absl::StrJoin(names.begin(), names.begin() + shown, ", ");
    if (names.size() > shown) absl::StrAppend(&there, " and ", names.size() - shown, " more");
    return absl::NotFoundError(absl::StrCat(absl::StrJoin(given, ", "), ": no file matches the pattern '", pattern,
                                            "'; the data files there are ", there));
  }
  std::sort(kept.begin(), kept.end());
  std::vector<std::string> out;
  out.reserve(kept.size());
  for (auto& k : kept) out.push_back(std::move(k.second));
  return out;
}

bool is_npy(const std::string& path, FileFormat want) {
  if (want != FileFormat::kAuto) return want == FileFormat::kNpy;
  auto f = detect_format(path);
  return f.ok() && *f == FileFormat::kNpy;
}

}  // namespace

std::string npy_column_of(const std::string& path) {
  const std::string stem = fs::path(path).stem().string();
  // Strip the shard tag: trailing pieces of digits (or "of") behind '_', '-'
  // or '.', as in x_000, x_0_1 or x-00001-of-00010.
  size_t end = stem.size();
  bool digits = false;
  while (end > 0) {
    const size_t sep = stem.find_last_of("_-.", end - 1);
    if (sep == std::string::npos || sep == 0) break;
    const absl::string_view piece = absl::string_view(stem).substr(sep + 1, end - sep - 1);
    if (all_digits(piece)) {
      digits = true;
    } else if (piece != "of") {
      break;
    }
    end = sep;
  }
  return digits ? stem.substr(0, end) : stem;
}

absl::StatusOr<std::vector<std::string>> list_fields(const std::string& path, const FormatOptions& options) {
  FileFormat f = options.format;
  if (f == FileFormat::kAuto) {
    DLFEED_ASSIGN_OR_RETURN(f, detect_format(path));
  }
  switch (f) {
    case FileFormat::kNpy: return std::vector<std::string>{npy_column_of(path)};
    case FileFormat::kNpz: return npz_member_names(path);
    case FileFormat::kHdf5: return hdf5_dataset_names(path);
    case FileFormat::kIndexedBinary: return std::vector<std::string>{"data"};
    case FileFormat::kTfRecord: {
      // The features of the first record (records may differ; the loader checks each).
      DLFEED_ASSIGN_OR_RETURN(detail::File file, detail::File::open(path));
      std::array<std::byte, 12> head{};
      if (file.size() < head.size()) return file_error(path, "a TFRecord record header at offset 0", "a shorter file");
      DLFEED_RETURN_IF_ERROR(file.read_exact(0, head, "TFRecord record header"));
      if (tfrecord::detect_compression(head, file.size()) != tfrecord::Compression::kNone) {
        return absl::UnimplementedError(
            absl::StrCat(path, ": a compressed TFRecord file's features are not listed; name one with --feature"));
      }
      uint64_t length = 0;
      std::memcpy(&length, head.data(), sizeof length);  // little-endian, as TFRecord writes it
      if (length > file.size() - head.size() || length > (uint64_t{1} << 30)) {
        return file_error(path, absl::StrCat("a first record of at most ", file.size() - head.size(), " bytes"),
                          absl::StrCat("a length of ", length, " at offset 0"));
      }
      std::vector<std::byte> example(length);
      DLFEED_RETURN_IF_ERROR(file.read_exact(head.size(), example, "TFRecord record"));
      return example::feature_names(example, {path, head.size()});
    }
    default: break;
  }
  return absl::UnimplementedError(absl::StrCat(path, ": fields are listed for NPY, NPZ, HDF5 and TFRecord files"));
}

namespace {

// `paths` with each glob pattern (*, ?, [...]) expanded to the paths it
// matches, sorted; `globbed` is set when any was a pattern.
absl::StatusOr<std::vector<std::string>> expand_patterns(const std::vector<std::string>& paths, bool& globbed) {
  std::vector<std::string> expanded;
  for (const std::string& p : paths) {
    if (is_object_url(p)) {  // a prefix names a URL's objects; a key may hold any character
      expanded.push_back(p);
      continue;
    }
    globbed = globbed || p.find_first_of("*?[") != std::string::npos;
    if (p.find_first_of("*?[") == std::string::npos) {
      expanded.push_back(p);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), 0, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      globfree(&g);
      return absl::NotFoundError(absl::StrCat(p, ": the pattern matches no file or folder"));
    }
    if (rc != 0) {
      globfree(&g);
      return absl::InvalidArgumentError(absl::StrCat(p, ": cannot expand the pattern"));
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) expanded.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return expanded;
}

// The cache's own folder (auto: DIR/.dlfeed) made now, before DIR's stamp,
// so that the listing this open writes is good for the next one: when
// DIR had settled before, its new mtime is this mkdir's. Returns the given
// folder it was made in ("" if none, or it existed).
std::string make_cache_folder(const std::string& cache, const std::vector<std::string>& expanded,
                              int64_t listed_at_ns) {
  std::string made_in;
  std::error_code ec;
  const fs::path cache_dir = fs::path(cache).parent_path();
  if (!cache_dir.empty() && !fs::exists(cache_dir, ec)) {
    for (const std::string& p : expanded) {
      if (fs::equivalent(p, cache_dir.parent_path(), ec) && detail::stamp_folder(p, listed_at_ns).mtime_ns != 0) {
        made_in = p;
      }
    }
    fs::create_directories(cache_dir, ec);
    if (ec) made_in.clear();
  }
  return made_in;
}

// Appends the data files of folder `given` (its training split), sorted.
absl::Status list_folder(const std::string& given, const FormatOptions& options, Gathered& g,
                         std::vector<std::string>& files) {
  const std::string p = training_split(given);
  g.listed_folders.insert(std::string(absl::StripSuffix(p, "/")));  // entries are "p/name" either way
  std::vector<std::string> found;
  // Each folder's stamp is taken before it is read (a change after it changes the mtime).
  if (g.stamp) {
    g.listing.folders.push_back(detail::stamp_folder(p, p == g.made_in ? INT64_MAX : g.listed_at_ns));
    // A DLIO data folder read as its train/: whether it still is one is its own listing.
    if (p != given) {
      g.listing.folders.push_back(detail::stamp_folder(given, given == g.made_in ? INT64_MAX : g.listed_at_ns));
    }
  }
  g.through_links.clear();
  DLFEED_RETURN_IF_ERROR(walk_folder(p, options, g, found));
  std::sort(found.begin(), found.end());
  read_each_file_once(p, g, found);
  if (found.empty()) {
    const std::string kinds = options.format == FileFormat::kAuto
                                  ? "no data file (.npy, .npz, .h5/.hdf5/.hdf/.he5, .tfrecord/.tfrecords/.tfrec/.tfr "
                                    "(also + .gz), .indexed_binary/.mmap_indexed_binary, .bin + .idx)"
                                  : absl::StrCat("no ", format_name(options.format), " file");
    return absl::NotFoundError(absl::StrCat(p, ": ", kinds, " in this folder or below; ", folder_listing(p)));
  }
  files.insert(files.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
  return absl::OkStatus();
}

// The files of the given paths: each folder's data files, each file itself.
absl::StatusOr<std::vector<std::string>> gather_files(const std::vector<std::string>& expanded,
                                                      const FormatOptions& options, Gathered& g) {
  std::vector<std::string> files;
  for (const std::string& given : expanded) {
    std::error_code ec;
    if (is_object_url(given)) {
      DLFEED_RETURN_IF_ERROR(detail::list_remote(given, options, g, files));
    } else if (fs::is_directory(given, ec)) {
      DLFEED_RETURN_IF_ERROR(list_folder(given, options, g, files));
    } else if (fs::exists(given, ec)) {
      files.push_back(given);
    } else {
      return absl::NotFoundError(absl::StrCat(given, ": no such file or folder"));
    }
  }
  return files;
}

// NPY files are columns: a field name picks the files of that column
// (x.npy, or its shards x_000.npy, x_001.npy, ...), in order of folder and
// shard tag, as a pattern's files (so x_007.npy and y_007.npy are the same
// file of their columns, whatever else the folders hold). Without a name
// every NPY file belongs to the one field.
absl::Status keep_npy_column(std::vector<std::string>& files, const FormatOptions& options,
                             const std::vector<std::string>& expanded) {
  std::vector<std::string> kept, columns;
  bool any_npy = false, only_npy = true;
  for (const std::string& f : files) {
    if (!is_npy(f, options.format)) {
      kept.push_back(f);
      only_npy = false;
      continue;
    }
    any_npy = true;
    const std::string column = npy_column_of(f);
    if (column == options.name) kept.push_back(f);
    if (std::find(columns.begin(), columns.end(), column) == columns.end()) columns.push_back(column);
  }
  if (only_npy) {
    std::vector<std::pair<std::pair<std::string, std::string>, std::string>> keyed;  // ((folder, tag), path)
    keyed.reserve(kept.size());
    for (std::string& f : kept) {
      const fs::path p(f);
      keyed.emplace_back(std::make_pair(p.parent_path().string(), p.stem().string().substr(options.name.size())),
                         std::move(f));
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < keyed.size(); ++i) kept[i] = std::move(keyed[i].second);
  }
  if (any_npy && kept.empty()) {
    std::sort(columns.begin(), columns.end());
    return absl::NotFoundError(absl::StrCat(absl::StrJoin(expanded, ", "), ": no NPY column '", options.name, "' (",
                                            options.name, ".npy or ", options.name, "_NNN.npy); the columns here are ",
                                            absl::StrJoin(columns, ", ")));
  }
  files = std::move(kept);
  return absl::OkStatus();
}

// Opens `files`, each from the index cache at `cache` ("": none) when it
// serves it, and writes the cache again when it is stale.
absl::StatusOr<SampleIndex> open_cached(const std::vector<std::string>& files, const FormatOptions& options,
                                        const std::string& cache, bool folders_only, const Gathered& g) {
  detail::CacheHits cached;
  if (!cache.empty()) cached = detail::read_index_cache(cache, files, options);
  if (!cached.note.empty()) std::fprintf(stderr, "%s\n", cached.note.c_str());
  std::vector<std::optional<SampleIndex>> ready = std::move(cached.files);
  ready.resize(files.size());
  std::vector<uint8_t> from_cache(files.size());
  std::vector<detail::ListedFile> listed(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    from_cache[i] = ready[i].has_value();
    if (from_cache[i]) continue;
    const size_t slash = files[i].rfind('/');
    const absl::string_view parent = absl::string_view(files[i]).substr(0, slash == std::string::npos ? 0 : slash);
    listed[i].no_idx_beside = g.listed_folders.contains(parent) && !g.idx_folders.contains(parent);
  }
  DLFEED_ASSIGN_OR_RETURN(SampleIndex all, open_files(files, options, ready, listed));
  if (!cache.empty()) {
    // Files indexed now that a cache entry would serve (new, changed, or the
    // cache missing or damaged): write it again.
    bool stale = !cached.note.empty();
    for (size_t i = 0; i < files.size() && !stale; ++i) {
      stale = !from_cache[i] && !all.sources[i]->cache_tag().empty();
    }
    // A listing the next open can take (its folders settled) that the cache lacks.
    if (folders_only && g.listing.settled() && cached.listing != g.listing) stale = true;
    if (stale) {
      if (absl::Status st = detail::write_index_cache(cache, all, options, folders_only ? &g.listing : nullptr);
          !st.ok()) {
        std::fprintf(stderr, "dlfeed: note: the index cache is not written: %s\n", std::string(st.message()).c_str());
      }
    }
  }
  return all;
}

}  // namespace

namespace {
// With the axis left to the data, DLIO's layout (a name {prefix}_{i}_of_{n}
// under train/ or valid/) is found file by file; a dataset where it holds
// for some of its NPY or NPZ files and not for others would read them on
// different axes: refused, naming one of each. (TFRecord files of two
// layouts differ in shape, which the field's shape check refuses.)
absl::Status one_layout_rule(const std::vector<std::string>& files, const FormatOptions& options) {
  if (options.axis != SampleAxis::kAuto) return absl::OkStatus();
  const std::string* dlio = nullptr;
  const std::string* plain = nullptr;
  for (const std::string& f : files) {
    const absl::StatusOr<FileFormat> format = options.format == FileFormat::kAuto ? detect_format(f) : options.format;
    if (!format.ok() || (*format != FileFormat::kNpy && *format != FileFormat::kNpz)) continue;
    (detail::in_dlio_layout(f) ? dlio : plain) = &f;
    if (dlio != nullptr && plain != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          *dlio, " is in DLIO's layout (its name and folder: arrays read on their last axis) but ", *plain,
          " of the same dataset is not (read on their first): pass axis 'last' (layout 'dlio') or 'first'"));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<SampleIndex> open_dataset(const std::vector<std::string>& paths, const FormatOptions& options) {
  // Glob patterns (*, ?, [...]) expand to the paths they match, sorted.
  const std::string cache = detail::index_cache_path(paths, options);
  bool globbed = false;
  DLFEED_ASSIGN_OR_RETURN(const std::vector<std::string> expanded, expand_patterns(paths, globbed));
  // Folders only (no pattern, no file named): the listing can be the
  // cache's, when none of the folders changed since it was written.
  bool folders_only = !globbed && !expanded.empty();
  for (const std::string& p : expanded) {
    std::error_code ec;
    folders_only = folders_only && fs::is_directory(p, ec);
  }
  if (options.index_cache_check != "files" && options.index_cache_check != "folders") {
    return absl::InvalidArgumentError(
        absl::StrCat("index_cache_check is files or folders, not '", options.index_cache_check, "'"));
  }
  const std::string listing_key = absl::StrJoin(expanded, "\n");
  if (!cache.empty() && folders_only && options.index_cache_check == "folders") {
    if (std::optional<SampleIndex> again = detail::reopen_from_listing(cache, listing_key, options)) {
      DLFEED_RETURN_IF_ERROR(detail::one_kind_rule(*again, options));
      detail::one_shape_rule(*again, options);
      return std::move(*again);
    }
  }
  Gathered g;
  g.listing.key = listing_key;
  timespec listed_at{};
  ::clock_gettime(CLOCK_REALTIME, &listed_at);
  g.listed_at_ns = static_cast<int64_t>(listed_at.tv_sec) * 1000000000 + listed_at.tv_nsec;
  g.stamp = !cache.empty() && folders_only;
  if (g.stamp) g.made_in = make_cache_folder(cache, expanded, g.listed_at_ns);
  DLFEED_ASSIGN_OR_RETURN(std::vector<std::string> files, gather_files(expanded, options, g));
  if (!options.file_pattern.empty()) {
    DLFEED_ASSIGN_OR_RETURN(files, files_of_pattern(std::move(files), options.file_pattern, expanded));
  } else if (!options.name.empty()) {
    DLFEED_RETURN_IF_ERROR(keep_npy_column(files, options, expanded));
  }
  DLFEED_RETURN_IF_ERROR(one_layout_rule(files, options));
  DLFEED_ASSIGN_OR_RETURN(SampleIndex all, open_cached(files, options, cache, folders_only, g));
  DLFEED_RETURN_IF_ERROR(detail::one_kind_rule(all, options));
  // After the cache is written: its entries keep each file's own verdict.
  detail::one_shape_rule(all, options);
  return all;
}

}  // namespace dlfeed
