// SPDX-License-Identifier: Apache-2.0
// The persistent dataset index (index_cache.h).
//
// File layout (little-endian):
//   "DLFIDX\r\n"  magic (8 bytes; the \r\n catches text-mode copies)
//   u32 version   kCacheVersion
//   u32 crc32c    of everything after this field
//   str abi       DLFEED_ABI's name: another library version's cache is not read
//   str options   the format options that change an index (fingerprint)
//   u8 listed     1: the listing follows, and the entries are every listed file
//     str key, u64 folders, then per folder: str path, u64 mtime_ns, u64 inode
//   u64 files, then per file:
//     str path, u64 size, u64 mtime_ns, u64 inode, u64 device, u64 ctime_ns, str tag, str state
//   (an empty tag: a source that is not cached, indexed from its file)
#include "index_cache.h"
#include "format/whole_source.h"

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
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "format/array_source.h"
#include "format/hdf5_source.h"
#include "format/index_codec.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'D', 'L', 'F', 'I', 'D', 'X', '\r', '\n'};
// 8: an HDF5 dataset's entry says whether it is 0-d (read whole). 7: hidden names below a listed folder are not listed
// (a cached listing may hold them). 6: HDF5 datasets behind external links, non-IEEE floats and unwritten storage
// without a fill value are no longer indexed as extents, and an NPZ member named as asked wins over one with .npy (5: a
// file's change time; 4: a TFRecord entry keeps its split layout; 3: the shape feature's 1-D verdict).
constexpr uint32_t kCacheVersion = 9;
constexpr size_t kHeaderBytes = 16;  // magic, version, crc

#define DLFEED_STR2(x) #x
#define DLFEED_STR(x) DLFEED_STR2(x)
constexpr const char* kAbi = DLFEED_STR(DLFEED_ABI);

using Identity = FileIdentity;

// The same file as the cache recorded, device aside: a cache beside the
// data on a shared file system is read by hosts whose device numbers differ.
// The change time too: a file rewritten in place with its size and mtime
// kept (rsync -t, tar -x, os.utime) has a new ctime.
bool same_file(const Identity& a, const Identity& b) {
  return a.size == b.size && a.mtime_ns == b.mtime_ns && a.inode == b.inode && a.ctime_ns == b.ctime_ns;
}

// The identity of `path` as stat finds it now; false when it cannot be stat'ed.
bool stat_identity(const std::string& path, Identity& id) {
  if (is_object_url(path)) {  // its size and ETag, as the listing gave them
    absl::StatusOr<FileIdentity> object = object_identity(path);
    if (!object.ok() || object->inode == 0) return false;  // no ETag: never matches a cache entry
    id = *object;
    return true;
  }
  struct stat st;
  if (stat_path(path.c_str(), &st) != 0) return false;
  id = identity_of(st);
  return true;
}

// The options that change what a file's index is.
std::string fingerprint(const FormatOptions& o) {
  std::string s = absl::StrCat("format=", format_name(o.format), ";axis=", static_cast<int>(o.axis), ";name=", o.name,
                               ";file_pattern=", o.file_pattern, ";feature=", o.feature,
                               ";feature_dtype=", o.feature_dtype.str(), ";feature_shape=");
  if (o.feature_shape) absl::StrAppend(&s, shape_str(*o.feature_shape));
  absl::StrAppend(&s, ";shape_feature=", o.shape_feature);
  absl::StrAppend(&s, ";verify_crc=", o.verify_crc, ";use_index_files=", o.use_index_files, ";index_dir=", o.index_dir);
  return s;
}

uint64_t fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

absl::StatusOr<std::unique_ptr<SampleSource>> load_source(std::string_view tag, const std::string& path,
                                                          uint64_t file_size, const FormatOptions& options,
                                                          CacheReader& in) {
  if (tag == "array") {
    DLFEED_ASSIGN_OR_RETURN(auto src, load_array_source(path, file_size, in));
    return std::unique_ptr<SampleSource>(std::move(src));
  }
  if (const std::string inner = inner_tag_of(tag); !inner.empty()) {
    if (!inner_tag_of(inner).empty()) {  // one level only: an untrusted cache must not recurse at will
      return file_error(path, "a whole-dataset entry over one source kind", absl::StrCat("'", std::string(tag), "'"));
    }
    DLFEED_ASSIGN_OR_RETURN(auto src, load_source(inner, path, file_size, options, in));
    return whole_of(std::move(src));
  }
  if (tag == "hdf5:contiguous") return h5::load_contiguous(path, file_size, in);
  if (tag == "hdf5:chunked") return h5::load_chunked(path, file_size, in);
  if (tag == "tfrecord") return load_tfrecord_source(path, file_size, options, in);
  return file_error(path, "a source kind this version caches (array, hdf5:contiguous, hdf5:chunked, tfrecord)",
                    absl::StrCat("'", std::string(tag), "'"));
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
  // Objects (URLs, taken as written) are checked by size and ETag; their
  // cache is the user's, as the bucket is not a folder to write in.
  std::vector<std::string> abs;
  abs.reserve(paths.size());
  std::error_code ec;
  bool objects = false;
  for (const std::string& p : paths) {
    objects = objects || is_object_url(p);
    abs.push_back(is_object_url(p) ? p : fs::absolute(p, ec).lexically_normal().string());
  }
  const std::string key = absl::StrCat(absl::StrJoin(abs, "\n"), "\n", fingerprint(options));
  const std::string name = absl::StrFormat("index-%016x", fnv1a(key));
  // In a folder of its own, so that writing it (a temporary file renamed)
  // leaves the dataset folder's mtime, which index_cache_check=folders
  // compares, as it was.
  if (!objects && abs.size() == 1 && fs::is_directory(abs[0], ec) && ::access(abs[0].c_str(), W_OK) == 0) {
    return absl::StrCat(abs[0], "/", kCacheFolder, "/", name);
  }
  return absl::StrCat(user_cache_dir(), "/dlfeed-", name);
}

namespace {
// The cache's bytes; with all_files, files without a cache tag too (an
// empty tag and state: the receiver indexes them itself).
std::string encode(const SampleIndex& index, const FormatOptions& options, bool all_files, const Listing* listing) {
  std::string body;
  CacheWriter w(body);
  w.str(kAbi);
  w.str(fingerprint(options));
  w.u8(listing ? 1 : 0);
  if (listing) {
    all_files = true;  // the entries are the listing
    w.str(listing->key);
    w.u64(listing->folders.size());
    for (const FolderStamp& f : listing->folders) {
      w.str(f.path);
      w.u64(f.mtime_ns);
      w.u64(f.inode);
    }
  }
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
    } else if (!stat_identity(index.files[f], id)) {
      id = {};  // a file gone since: an entry that never matches
    }
    w.str(index.files[f]);
    w.u64(id.size);
    w.u64(id.mtime_ns);
    w.u64(id.inode);
    w.u64(id.device);
    w.u64(id.ctime_ns);
    const std::string tag = index.sources[f]->cache_tag();
    w.str(tag);
    state.clear();
    if (!tag.empty()) index.sources[f]->cache_save(state);
    w.str(state);
  }
  return index_cache_header(body) + body;
}
}  // namespace

std::string encode_index_cache(const SampleIndex& index, const FormatOptions& options, const Listing* listing) {
  return encode(index, options, false, listing);
}

// The listing section (after the fingerprint); false when truncated.
bool read_listing(CacheReader& in, std::optional<Listing>& out) {
  const uint8_t listed = in.u8();
  if (!in.ok() || listed > 1) return false;
  if (listed == 0) return true;
  Listing l;
  l.key = in.str();
  const uint64_t n = in.u64();
  if (!in.ok() || n > in.left() / 24) return false;
  l.folders.resize(n);
  for (FolderStamp& f : l.folders) {
    f.path = in.str();
    f.mtime_ns = in.u64();
    f.inode = in.u64();
  }
  if (!in.ok()) return false;
  out = std::move(l);
  return true;
}

bool Listing::settled() const {
  for (const FolderStamp& f : folders) {
    if (f.mtime_ns == 0) return false;
  }
  return true;
}

FolderStamp stamp_folder(const std::string& path, int64_t listed_at_ns) {
  FolderStamp out;
  out.path = path;
  struct stat st;
  if (stat_path(path.c_str(), &st) != 0) return out;
  out.inode = static_cast<uint64_t>(st.st_ino);
  const uint64_t m = mtime_ns_of(st);
  // A folder changed just before its listing might change again within the
  // same clock tick after it, leaving the same mtime: not trusted.
  if (static_cast<int64_t>(m) < listed_at_ns - kListingSettleNs) out.mtime_ns = m;
  return out;
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
  std::optional<Listing> listing;
  const bool listing_ok = read_listing(in, listing);
  const uint64_t n = in.u64();
  if (!in.ok() || !listing_ok) return unusable("its header is truncated");
  if (abi != kAbi) return unusable(absl::StrCat("written by dlfeed ", abi, ", this is ", kAbi));
  if (fp != fingerprint(options)) return unusable("written for other format options");
  if (n > in.left() / 48) return unusable("it claims more entries than it holds");

  out.listing = std::move(listing);
  std::unordered_map<std::string_view, size_t> want;  // built on the first entry out of order
  size_t next = 0;
  std::vector<std::string> bad;
  for (uint64_t e = 0; e < n; ++e) {
    const std::string path = in.str();
    Identity cached;
    cached.size = in.u64();
    cached.mtime_ns = in.u64();
    cached.inode = in.u64();
    cached.device = in.u64();
    cached.ctime_ns = in.u64();
    const std::string tag = in.str();
    const std::string state = in.str();
    if (!in.ok()) return unusable(absl::StrCat("entry ", e, " is truncated"));
    if (tag.empty()) continue;  // not cached: indexed from its file
    // The entries are in path order, as the files are listed: look the next
    // one up first, the map only when the lists differ.
    size_t at = next < files.size() && files[next] == path ? next : files.size();
    if (at == files.size()) {
      if (want.empty()) {
        want.reserve(files.size());
        for (size_t i = 0; i < files.size(); ++i) want.emplace(files[i], i);
      }
      const auto it = want.find(path);
      if (it == want.end()) continue;  // a file no longer listed
      at = it->second;
    }
    next = at + 1;
    if (out.files[at]) continue;
    Identity now;
    if (!stat_identity(path, now) || (match_identity && !same_file(now, cached))) continue;  // changed: indexed again
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
    out.files[at] = std::move(one);
    ++out.hits;
  }
  if (!bad.empty()) {
    out.note =
        absl::StrCat("dlfeed: note: the index cache ", cache_path,
                     " has entries that fail their checks; those files are indexed again: ", absl::StrJoin(bad, "; "));
  }
  return out;
}

namespace {
// The cache file's bytes; false (errno set) when it cannot be opened, or is
// no regular file (a FIFO is not waited on).
bool read_cache_bytes(const std::string& cache_path, std::string& bytes) {
  const int fd = ::open(cache_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return false;
  }
  if (st.st_size > 0) {
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
  return true;
}
}  // namespace

CacheHits read_index_cache(const std::string& cache_path, const std::vector<std::string>& files,
                           const FormatOptions& options) {
  std::string bytes;
  if (!read_cache_bytes(cache_path, bytes)) {
    CacheHits none;
    none.files.resize(files.size());
    if (errno != ENOENT)
      none.note = absl::StrCat("dlfeed: note: cannot read the index cache ", cache_path, ": ", std::strerror(errno));
    return none;
  }
  return decode_index_cache(bytes, cache_path, files, options);
}

std::optional<SampleIndex> reopen_from_listing(const std::string& cache_path, const std::string& key,
                                               const FormatOptions& options) {
  std::string bytes;
  if (!read_cache_bytes(cache_path, bytes)) return std::nullopt;
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  CacheReader head(std::string_view(bytes).substr(sizeof(kMagic), 8));
  const uint32_t version = head.u32();
  const uint32_t crc = head.u32();
  const std::string_view body = std::string_view(bytes).substr(kHeaderBytes);
  if (version != kCacheVersion || crc32c(body.data(), body.size()) != crc) return std::nullopt;
  CacheReader in(body);
  if (in.view() != kAbi || in.view() != fingerprint(options)) return std::nullopt;
  std::optional<Listing> listing;
  if (!read_listing(in, listing) || !listing || listing->key != key || !listing->settled()) return std::nullopt;
  for (const FolderStamp& f : listing->folders) {  // an entry added, removed or renamed changes its folder's mtime
    struct stat st;
    if (stat_path(f.path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_ino) != f.inode ||
        mtime_ns_of(st) != f.mtime_ns) {
      return std::nullopt;
    }
  }
  const uint64_t n = in.u64();
  if (!in.ok() || n > in.left() / 48) return std::nullopt;
  SampleIndex index;
  index.files.reserve(n);
  index.sources.reserve(n);
  index.file_begin.reserve(n + 1);
  index.identities.reserve(n);
  std::string path;
  for (uint64_t e = 0; e < n; ++e) {
    path = in.view();
    Identity id;
    id.size = in.u64();
    id.mtime_ns = in.u64();
    id.inode = in.u64();
    in.u64();  // the device of the host that wrote it: not compared (device 0)
    id.ctime_ns = in.u64();
    const std::string_view tag = in.view();
    const std::string_view state = in.view();
    if (!in.ok()) return std::nullopt;
    if (tag.empty()) {  // not cached: indexed from its file, which must still be the one listed
      auto one = open_file(path, options);
      if (!one.ok() || one->num_files() != 1) return std::nullopt;
      one->identities.assign(1, id);
      index.append(std::move(*one));
      continue;
    }
    CacheReader sr(state);
    auto src = load_source(tag, path, id.size, options, sr);
    if (!src.ok() || !sr.at_end()) return std::nullopt;  // the full open reports it
    index.add_file(std::move(path), std::move(*src));
    index.identities.push_back(id);
    path.clear();
  }
  if (!in.at_end()) return std::nullopt;
  return index;
}

absl::Status write_index_cache(const std::string& cache_path, const SampleIndex& index, const FormatOptions& options,
                               const Listing* listing) {
  const std::string bytes = encode_index_cache(index, options, listing);
  std::error_code ec;
  const fs::path dir = fs::path(cache_path).parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  // Host and process: ranks on several nodes of a shared file system may
  // write the same cache at once (each renames its own complete copy).
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string tmp = absl::StrCat(cache_path, ".tmp.", host, ".", ::getpid());
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
  return detail::encode(index, options, true, nullptr);
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
  std::optional<detail::Listing> listing;
  if (!detail::read_listing(in, listing)) return bad("its header is truncated");
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
    id.ctime_ns = in.u64();
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
