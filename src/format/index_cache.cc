// The persistent dataset index (index_cache.h).
//
// File layout (little-endian):
//   "DLFIDX\r\n"  magic (8 bytes; the \r\n catches text-mode copies)
//   u32 version   kCacheVersion
//   u32 crc32c    of everything after this field
//   str abi       DLFEED_ABI's name: another library version's cache is not read
//   str options   the format options that change an index (fingerprint)
//   u64 files, then per file:
//     str path, u64 size, u64 mtime_ns, u64 inode, u64 device, str tag, str state
#include "index_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "array_source.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "hdf5_source.h"
#include "index_codec.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'D', 'L', 'F', 'I', 'D', 'X', '\r', '\n'};
constexpr uint32_t kCacheVersion = 1;
constexpr size_t kHeaderBytes = 16;  // magic, version, crc

#define DLFEED_STR2(x) #x
#define DLFEED_STR(x) DLFEED_STR2(x)
constexpr const char* kAbi = DLFEED_STR(DLFEED_ABI);

using Identity = FileIdentity;

bool identity_of(const std::string& path, Identity& id) {
  struct stat st;
  if (stat_path(path.c_str(), &st) != 0) return false;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.device = static_cast<uint64_t>(st.st_dev);
  return true;
}

// The options that change what a file's index is.
std::string fingerprint(const FormatOptions& o) {
  std::string s = absl::StrCat("format=", format_name(o.format), ";axis=", static_cast<int>(o.axis), ";name=", o.name,
                               ";feature=", o.feature, ";feature_dtype=", o.feature_dtype.str(), ";feature_shape=");
  if (o.feature_shape) absl::StrAppend(&s, shape_str(*o.feature_shape));
  absl::StrAppend(&s, ";verify_crc=", o.verify_crc, ";use_index_files=", o.use_index_files, ";index_dir=", o.index_dir);
  return s;
}

uint64_t fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

absl::StatusOr<std::unique_ptr<SampleSource>> load_source(const std::string& tag, const std::string& path,
                                                          uint64_t file_size, const FormatOptions& options,
                                                          CacheReader& in) {
  if (tag == "array") {
    DLFEED_ASSIGN_OR_RETURN(auto src, load_array_source(path, file_size, in));
    return std::unique_ptr<SampleSource>(std::move(src));
  }
  if (tag == "hdf5:contiguous") return h5::load_contiguous(path, file_size, in);
  if (tag == "hdf5:chunked") return h5::load_chunked(path, file_size, in);
  if (tag == "tfrecord") return load_tfrecord_source(path, file_size, options, in);
  return file_error(path, "a source kind this version caches (array, hdf5:contiguous, hdf5:chunked, tfrecord)",
                    absl::StrCat("'", tag, "'"));
}

std::string user_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return absl::StrCat(x, "/dlfeed");
  if (const char* h = std::getenv("HOME"); h && *h) return absl::StrCat(h, "/.cache/dlfeed");
  return "/tmp/dlfeed-cache";
}

}  // namespace

std::string index_cache_path(const std::vector<std::string>& paths, const FormatOptions& options) {
  if (options.index_cache.empty() || options.index_cache == "off") return "";
  if (options.index_cache != "auto") return options.index_cache;
  std::vector<std::string> abs;
  std::error_code ec;
  for (const std::string& p : paths) abs.push_back(fs::absolute(p, ec).lexically_normal().string());
  const std::string key = absl::StrCat(absl::StrJoin(abs, "\n"), "\n", fingerprint(options));
  const std::string name = absl::StrFormat(".dlfeed-index-%016x", fnv1a(key));
  if (abs.size() == 1 && fs::is_directory(abs[0], ec) && ::access(abs[0].c_str(), W_OK) == 0) {
    return absl::StrCat(abs[0], "/", name);
  }
  return absl::StrCat(user_cache_dir(), "/", name.substr(1));
}

namespace {
// The cache's bytes; with all_files, files without a cache tag too (an
// empty tag and state: the receiver indexes them itself).
std::string encode(const SampleIndex& index, const FormatOptions& options, bool all_files) {
  std::string body;
  CacheWriter w(body);
  w.str(kAbi);
  w.str(fingerprint(options));
  std::vector<size_t> cached;
  for (size_t f = 0; f < index.num_files(); ++f) {
    if (all_files || !index.sources[f]->cache_tag().empty()) cached.push_back(f);
  }
  w.u64(cached.size());
  std::string state;
  const bool identified = index.has_identities();  // known from this open's checks: no stat again
  for (size_t f : cached) {
    Identity id;
    if (identified) {
      id = index.identities[f];
    } else if (!identity_of(index.files[f], id)) {
      id = {};  // a file gone since: an entry that never matches
    }
    w.str(index.files[f]);
    w.u64(id.size);
    w.u64(id.mtime_ns);
    w.u64(id.inode);
    w.u64(id.device);
    const std::string tag = index.sources[f]->cache_tag();
    w.str(tag);
    state.clear();
    if (!tag.empty()) index.sources[f]->cache_save(state);
    w.str(state);
  }
  return index_cache_header(body) + body;
}
}  // namespace

std::string encode_index_cache(const SampleIndex& index, const FormatOptions& options) {
  return encode(index, options, false);
}

std::string index_cache_header(const std::string& body) {
  std::string out(kMagic, sizeof(kMagic));
  CacheWriter h(out);
  h.u32(kCacheVersion);
  h.u32(crc32c(body.data(), body.size()));
  return out;
}

CacheHits decode_index_cache(const std::string& bytes, const std::string& cache_path,
                             const std::vector<std::string>& files, const FormatOptions& options, bool match_identity) {
  CacheHits out;
  out.files.resize(files.size());
  auto unusable = [&](const std::string& why) -> CacheHits {
    CacheHits none;
    none.files.resize(files.size());
    none.note = absl::StrCat("dlfeed: note: the index cache ", cache_path, " is not used (", why,
                             "); indexing the files and writing it again");
    return none;
  };
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return unusable("not a dlfeed index cache: bad magic");
  }
  CacheReader head(std::string_view(bytes).substr(sizeof(kMagic), 8));
  const uint32_t version = head.u32();
  const uint32_t crc = head.u32();
  if (version != kCacheVersion) return unusable(absl::StrCat("version ", version, ", expected ", kCacheVersion));
  const std::string_view body = std::string_view(bytes).substr(kHeaderBytes);
  if (crc32c(body.data(), body.size()) != crc) return unusable("its checksum does not match: truncated or damaged");
  CacheReader in(body);
  const std::string abi = in.str();
  const std::string fp = in.str();
  const uint64_t n = in.u64();
  if (!in.ok()) return unusable("its header is truncated");
  if (abi != kAbi) return unusable(absl::StrCat("written by dlfeed ", abi, ", this is ", kAbi));
  if (fp != fingerprint(options)) return unusable("written for other format options");
  if (n > in.left() / 48) return unusable("it claims more entries than it holds");

  std::unordered_map<std::string_view, size_t> want;
  want.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) want.emplace(files[i], i);
  std::vector<std::string> bad;
  for (uint64_t e = 0; e < n; ++e) {
    const std::string path = in.str();
    Identity cached;
    cached.size = in.u64();
    cached.mtime_ns = in.u64();
    cached.inode = in.u64();
    cached.device = in.u64();
    const std::string tag = in.str();
    const std::string state = in.str();
    if (!in.ok()) return unusable(absl::StrCat("entry ", e, " is truncated"));
    const auto it = want.find(path);
    if (it == want.end() || out.files[it->second]) continue;  // a file no longer listed
    Identity now;
    if (!identity_of(path, now) || (match_identity && !(now == cached))) continue;  // changed: indexed again
    CacheReader sr(state);
    auto src = load_source(tag, path, now.size, options, sr);
    if (src.ok() && !sr.at_end()) src = file_error(path, "a cache entry of exactly its source's state", "extra bytes");
    if (!src.ok()) {
      if (bad.size() < 3) bad.push_back(std::string(src.status().message()));
      continue;
    }
    SampleIndex one;
    one.add_file(path, std::move(*src));
    one.identities.push_back(now);
    out.files[it->second] = std::move(one);
    ++out.hits;
  }
  if (!bad.empty()) {
    out.note =
        absl::StrCat("dlfeed: note: the index cache ", cache_path,
                     " has entries that fail their checks; those files are indexed again: ", absl::StrJoin(bad, "; "));
  }
  return out;
}

CacheHits read_index_cache(const std::string& cache_path, const std::vector<std::string>& files,
                           const FormatOptions& options) {
  const int fd = ::open(cache_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    CacheHits none;
    none.files.resize(files.size());
    if (errno != ENOENT)
      none.note = absl::StrCat("dlfeed: note: cannot read the index cache ", cache_path, ": ", std::strerror(errno));
    return none;
  }
  std::string bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    bytes.resize(got);
  }
  ::close(fd);
  return decode_index_cache(bytes, cache_path, files, options);
}

absl::Status write_index_cache(const std::string& cache_path, const SampleIndex& index, const FormatOptions& options) {
  const std::string bytes = encode_index_cache(index, options);
  std::error_code ec;
  const fs::path dir = fs::path(cache_path).parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  const std::string tmp = absl::StrCat(cache_path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(tmp, "open", errno);
  size_t put = 0;
  while (put < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error(tmp, "write", err);
    }
    put += static_cast<size_t>(w);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error(tmp, "close", err);
  }
  if (::rename(tmp.c_str(), cache_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error(cache_path, "rename", err);
  }
  return absl::OkStatus();
}

}  // namespace dlfeed::detail

namespace dlfeed::inline DLFEED_ABI {

std::string encode_index(const SampleIndex& index, const FormatOptions& options) {
  return detail::encode(index, options, true);
}

absl::StatusOr<SampleIndex> decode_index(const std::string& bytes, const FormatOptions& options) {
  using detail::CacheReader;
  auto bad = [](const std::string& why) { return absl::DataLossError(absl::StrCat("decode_index: ", why)); };
  if (bytes.size() < detail::kHeaderBytes || std::memcmp(bytes.data(), detail::kMagic, sizeof(detail::kMagic)) != 0) {
    return bad("not an encoded index (bad magic)");
  }
  CacheReader head(std::string_view(bytes).substr(sizeof(detail::kMagic), 8));
  const uint32_t version = head.u32();
  const uint32_t crc = head.u32();
  const std::string_view body = std::string_view(bytes).substr(detail::kHeaderBytes);
  if (version != detail::kCacheVersion || detail::crc32c(body.data(), body.size()) != crc) {
    return bad("version or checksum mismatch (damaged in transit?)");
  }
  CacheReader in(body);
  const std::string abi = in.str();
  const std::string fp = in.str();
  const uint64_t n = in.u64();
  if (!in.ok() || abi != detail::kAbi || fp != detail::fingerprint(options) || n > in.left() / 48) {
    return bad(absl::StrCat("encoded by dlfeed ", abi, " for options '", fp, "'; expected ", detail::kAbi, " and '",
                            detail::fingerprint(options), "'"));
  }
  SampleIndex index;
  for (uint64_t e = 0; e < n; ++e) {
    const std::string path = in.str();
    FileIdentity id;  // the sender's stat: the loader's file table checks the first open against it
    id.size = in.u64();
    id.mtime_ns = in.u64();
    id.inode = in.u64();
    in.u64();  // the sender's device number, which may differ on this host (a network file system)
    const std::string tag = in.str();
    const std::string state = in.str();
    if (!in.ok()) return bad(absl::StrCat("entry ", e, " is truncated"));
    if (tag.empty()) {  // a source that is not encoded: index the file here
      DLFEED_ASSIGN_OR_RETURN(SampleIndex one, open_file(path, options));
      one.identities.assign(one.files.size(), id);
      index.append(std::move(one));
      continue;
    }
    CacheReader sr(state);
    DLFEED_ASSIGN_OR_RETURN(auto src, detail::load_source(tag, path, id.size, options, sr));
    if (!sr.at_end()) return bad(absl::StrCat(path, ": extra bytes after the source's state"));
    index.add_file(path, std::move(src));
    index.identities.push_back(id);
  }
  return index;
}

}  // namespace dlfeed
