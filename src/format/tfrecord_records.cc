// SPDX-License-Identifier: Apache-2.0
// TFRecord records: the writer, sidecars (.idx: parse, find, validate) and the header scan. The sample source is
// tfrecord.cc.
#include "dlfeed/format/tfrecord.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "array_source.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/example.h"
#include "dlfeed/io/object_store.h"
#include "format/checked_bytes.h"
#include "format/index_codec.h"
#include "format/open_listed.h"
#include "format/paths.h"
#include "tfrecord_scan.h"

namespace dlfeed::inline DLFEED_ABI {
namespace tfrecord {
namespace fs = std::filesystem;
namespace {

// scan_records and sidecars describe plain files: a compressed one is
// indexed by scan_compressed instead.
absl::Status refuse_compressed(const detail::File& file, absl::string_view what) {
  std::byte head[kHeaderSize];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(file.size(), kHeaderSize));
  DLFEED_RETURN_IF_ERROR(file.read_exact(0, std::span<std::byte>(head, n), "TFRecord header"));
  const Compression c = detect_compression(std::span<const std::byte>(head, n), file.size());
  if (c == Compression::kNone) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(file.path(), ": expected an uncompressed TFRecord for ", what,
                                                 ", found a ", compression_name(c),
                                                 "-compressed one (its records' offsets are those of the "
                                                 "inflated stream)"));
}

absl::Status idx_error(const std::string& idx_path, size_t line, absl::string_view expected, absl::string_view found,
                       const std::string& data_path) {
  return absl::DataLossError(absl::StrCat(idx_path, ":", line, ": expected ", expected, ", found ", found,
                                          " (index sidecar of ", data_path, ")"));
}

}  // namespace

// masked_crc32c, append_record, parse_header and unframe_record: the header
// tier, dlfeed/format/tfrecord_framing-inl.h.

// ---- sidecars ----

std::string format_idx(const std::vector<Extent>& records) {
  std::string s;
  for (const Extent& e : records) absl::StrAppend(&s, e.offset, " ", e.length, "\n");
  return s;
}

absl::Status write_idx(const std::string& idx_path, const std::vector<Extent>& records) {
  const std::string tmp = absl::StrCat(idx_path, ".tmp", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(tmp, "open for writing", errno);
    const std::string text = format_idx(records);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) return io_error(tmp, "write", errno);
  }
  std::error_code ec;
  fs::rename(tmp, idx_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return io_error(idx_path, "rename", ec.value());
  }
  return absl::OkStatus();
}

namespace {

// A sidecar's text, fed in pieces as it is read, as records: only the
// records are kept (a sidecar of 10^7 lines is ~200 MB of text), and errors
// name the idx file and line.
class IdxParser {
 public:
  explicit IdxParser(const std::string& idx_path) : path_(idx_path) {}

  /// Parses the complete lines of `text` (and the one left from the last
  /// piece); keeps an unfinished last line for the next piece.
  absl::Status feed(absl::string_view text) {
    for (;;) {
      const size_t eol = text.find('\n');
      if (eol == absl::string_view::npos) {
        absl::StrAppend(&tail_, text);
        return absl::OkStatus();
      }
      if (tail_.empty()) {
        DLFEED_RETURN_IF_ERROR(line(text.substr(0, eol)));
      } else {
        absl::StrAppend(&tail_, text.substr(0, eol));
        DLFEED_RETURN_IF_ERROR(line(tail_));
        tail_.clear();
      }
      text.remove_prefix(eol + 1);
    }
  }
  /// The records, once the last piece was fed (a last line without a newline counts).
  absl::StatusOr<std::vector<Extent>> finish() {
    if (!tail_.empty()) {
      const std::string last = std::move(tail_);
      tail_.clear();
      DLFEED_RETURN_IF_ERROR(line(last));
    }
    return std::move(records_);
  }

 private:
  absl::Status line(absl::string_view raw) {
    ++lineno_;
    const absl::string_view l = absl::StripAsciiWhitespace(raw);
    if (l.empty()) return absl::OkStatus();
    // "offset length": two runs of digits split by spaces or tabs.
    const size_t gap = l.find_first_of(" \t");
    const absl::string_view a = l.substr(0, gap);
    const absl::string_view b =
        gap == absl::string_view::npos ? absl::string_view() : absl::StripLeadingAsciiWhitespace(l.substr(gap));
    auto digits = [](absl::string_view v) {
      return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    Extent e;
    if (!digits(a) || !digits(b) || !absl::SimpleAtoi(a, &e.offset) || !absl::SimpleAtoi(b, &e.length)) {
      const std::string shown(l.substr(0, 60));
      return absl::DataLossError(absl::StrCat(path_, ":", lineno_,
                                              ": expected \"offset length\" (two unsigned integers), found \"",
                                              absl::CHexEscape(shown), l.size() > 60 ? "...\"" : "\""));
    }
    records_.push_back(e);
    return absl::OkStatus();
  }

  const std::string& path_;
  std::string tail_;
  size_t lineno_ = 0;
  std::vector<Extent> records_;
};

// The records of the sidecar open as `fd`, read in 64 KiB pieces until a
// short read (a regular file's end): one read for a small sidecar. nullopt
// for a folder (not a sidecar).
absl::StatusOr<std::optional<std::vector<Extent>>> read_idx_fd(int fd, const std::string& path) {
  IdxParser parser(path);
  constexpr size_t kPiece = 1 << 16;
  std::vector<char> buf(kPiece);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), kPiece);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EISDIR) return std::nullopt;
      return io_error(path, "read", errno);
    }
    DLFEED_RETURN_IF_ERROR(parser.feed(absl::string_view(buf.data(), static_cast<size_t>(n))));
    if (static_cast<size_t>(n) < kPiece) break;
  }
  DLFEED_ASSIGN_OR_RETURN(std::vector<Extent> records, parser.finish());
  return records;
}

// The places a sidecar of `data_path` may be, in the order they are tried
// (FILE.idx beside it only when `beside`: the folder listing may know there
// is none).
std::vector<std::string> idx_candidates(const std::string& data_path, const FormatOptions& options,
                                        bool beside = true) {
  const fs::path data(data_path);
  const std::string name = data.filename().string() + ".idx";
  if (!options.index_dir.empty()) return {(fs::path(options.index_dir) / name).string()};
  std::vector<std::string> out;
  if (beside) out.push_back(data_path + ".idx");
  if (is_object_url(data_path)) {
    // An object's folders are its key's: no links, and a URL is not
    // normalised as a path would be ("s3://" is no empty component).
    const size_t slash = data_path.rfind('/');
    const size_t up = slash == 0 || slash == std::string::npos ? std::string::npos : data_path.rfind('/', slash - 1);
    // The split folder is a folder of the key, never the bucket (s3://train/x).
    const size_t key_start = data_path.find('/', data_path.find("://") + 3);
    if (up == std::string::npos || key_start == std::string::npos || up < key_start) return out;
    const std::string split = data_path.substr(up + 1, slash - up - 1);
    if (split == "train" || split == "valid") {
      out.push_back(absl::StrCat(data_path.substr(0, up), "/index/", split, "/", name));
    }
    return out;
  }
  // DLIO's {data}/index/{split}/ beside the folder the file is in, by the
  // path given (a link named train/) and by the folder it resolves to (".",
  // a link to train/).
  // The name given first, with no system call (DLIO's folders are mostly
  // named so); the real folder only when that is not a split.
  auto add = [&](const fs::path& folder) {
    const std::string split = folder.filename().string();
    if (split != "train" && split != "valid") return false;
    out.push_back((folder.parent_path() / "index" / split / name).string());
    return true;
  };
  const fs::path given = data.parent_path().lexically_normal();
  if (!add(given)) add(fs::path(detail::real_folder(given.string())));
  return out;
}

}  // namespace

// The first sidecar of `data_path` that opens, read and parsed: an open
// per place tried and one read for a small sidecar, no stat.
// The records of a sidecar that is an object of a store (NotFound: none).
absl::StatusOr<std::vector<Extent>> read_idx_object(const std::string& url) {
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(url));
  std::vector<std::byte> bytes(f.size());
  DLFEED_RETURN_IF_ERROR(f.read_exact(0, bytes, "the idx sidecar"));
  IdxParser parser(url);
  DLFEED_RETURN_IF_ERROR(parser.feed(absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
  return parser.finish();
}

// An index file opened to read: never waiting on a FIFO (a FIFO, socket or
// device is an error naming it); a folder opens (read_idx_fd says so). -1
// with errno when it cannot be opened.
absl::StatusOr<int> open_idx(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is not a regular file (",
                                                   S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket",
                                                   "), expected a TFRecord index"));
  }
  ::fcntl(fd, F_SETFL, 0);  // blocking reads again
  return fd;
}

absl::StatusOr<FoundIdx> load_idx(const std::string& data_path, const FormatOptions& options, bool beside) {
  for (std::string& p : idx_candidates(data_path, options, beside)) {
    if (is_object_url(p)) {
      absl::StatusOr<std::vector<Extent>> records = read_idx_object(p);
      if (absl::IsNotFound(records.status())) continue;
      if (!records.ok()) return records.status();
      return FoundIdx{std::move(p), *std::move(records)};
    }
    DLFEED_ASSIGN_OR_RETURN(const int fd, open_idx(p));
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return io_error(p, "open", errno);
    }
    absl::StatusOr<std::optional<std::vector<Extent>>> records = read_idx_fd(fd, p);
    ::close(fd);
    if (!records.ok()) return records.status();
    if (!records->has_value()) continue;  // a folder of that name
    return FoundIdx{std::move(p), std::move(**records)};
  }
  return FoundIdx{};
}

// Bytes [offset, offset + out.size()) of `file`, from `head` (its first
// bytes, already read) when they lie there.
absl::Status read_at(const detail::File& file, std::span<const std::byte> head, uint64_t offset,
                     std::span<std::byte> out, absl::string_view what) {
  if (offset <= head.size() && out.size() <= head.size() - offset) {
    if (!out.empty()) std::memcpy(out.data(), head.data() + offset, out.size());
    return absl::OkStatus();
  }
  return file.read_exact(offset, out, what);
}

absl::StatusOr<std::vector<Extent>> read_idx(const std::string& idx_path) {
  if (is_object_url(idx_path)) return read_idx_object(idx_path);
  DLFEED_ASSIGN_OR_RETURN(const int fd, open_idx(idx_path));
  if (fd < 0) return io_error(idx_path, "open", errno);
  absl::StatusOr<std::optional<std::vector<Extent>>> records = read_idx_fd(fd, idx_path);
  ::close(fd);
  if (!records.ok()) return records.status();
  if (!records->has_value()) return io_error(idx_path, "read", EISDIR);
  return std::move(**records);
}

absl::Status validate_idx(const std::vector<Extent>& records, const std::string& idx_path, const detail::File& file,
                          bool verify_crc, std::span<const std::byte> head) {
  const uint64_t size = file.size();
  const std::string& data = file.path();
  if (records.empty()) {
    if (size == 0) return absl::OkStatus();
    return idx_error(idx_path, 1, absl::StrCat("records covering the ", size, "-byte data file"),
                     "an empty sidecar (stale or wrong sidecar?)", data);
  }
  if (head.empty()) DLFEED_RETURN_IF_ERROR(refuse_compressed(file, absl::StrCat("the sidecar ", idx_path)));
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const Extent& e = records[i];
    if (e.length < kOverhead) {
      return idx_error(idx_path, i + 1, "a record length of at least 16 bytes", absl::StrCat(e.length), data);
    }
    if (e.offset != expected_offset) {
      return idx_error(
          idx_path, i + 1,
          absl::StrCat("offset ", expected_offset,
                       i == 0 ? " (the first record starts the file)" : " (where the previous record ends)"),
          absl::StrCat("offset ", e.offset), data);
    }
    if (e.offset > size || e.length > size - e.offset) {
      return idx_error(idx_path, i + 1, absl::StrCat("a record within the ", size, "-byte data file"),
                       absl::StrCat("offset ", e.offset, " length ", e.length, " (ends past the end of the file)"),
                       data);
    }
    expected_offset = e.offset + e.length;
  }
  if (expected_offset != size) {
    return idx_error(idx_path, records.size(), absl::StrCat("records up to the end of the ", size, "-byte data file"),
                     absl::StrCat("the last record ending at ", expected_offset, " (stale sidecar?)"), data);
  }
  // The first and last records' headers must announce the idx lengths.
  for (size_t i : {size_t{0}, records.size() - 1}) {
    std::byte header[kHeaderSize];
    DLFEED_RETURN_IF_ERROR(read_at(file, head, records[i].offset, header, "TFRecord header"));
    DLFEED_ASSIGN_OR_RETURN(const uint64_t length, parse_header(header, verify_crc, data, records[i].offset));
    if (length != records[i].length - kOverhead) {
      return idx_error(
          idx_path, i + 1,
          absl::StrCat("a record of ", records[i].length, " bytes (payload ", records[i].length - kOverhead, ")"),
          absl::StrCat("a record header at offset ", records[i].offset, " announcing a ", length, "-byte payload"),
          data);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Extent>> scan_records(const detail::File& file, bool verify_crc,
                                                 std::span<const std::byte> head) {
  const uint64_t size = file.size();
  std::vector<Extent> records;
  if (size == 0) return records;
  if (head.empty()) DLFEED_RETURN_IF_ERROR(refuse_compressed(file, "a scan of the record headers"));
  constexpr size_t kWindow = 1 << 16;
  std::vector<std::byte> buf(std::max(kWindow, head.size()));
  // The head is the first window.
  if (!head.empty()) std::memcpy(buf.data(), head.data(), head.size());
  uint64_t buf_off = 0, buf_len = head.size();
  uint64_t off = 0;
  while (off < size) {
    const uint64_t left = size - off;
    const uint64_t n = records.size();
    if (left < kHeaderSize) {
      return format_error(
          file.path(), off, absl::StrCat("a 12-byte header for record ", n),
          absl::StrCat(left, " bytes before the end of the ", size, "-byte file (truncated inside the record header)"));
    }
    if (off < buf_off || off + kHeaderSize > buf_off + buf_len) {
      buf_off = off;
      buf_len = std::min<uint64_t>(kWindow, left);
      DLFEED_ASSIGN_OR_RETURN(size_t got, file.read_some(off, std::span<std::byte>(buf.data(), buf_len)));
      if (got < kHeaderSize) {
        return format_error(file.path(), off, absl::StrCat("a 12-byte header for record ", n),
                            absl::StrCat(got, " bytes (the file shrank while reading?)"));
      }
      buf_len = got;
    }
    std::span<const std::byte> header(buf.data() + (off - buf_off), kHeaderSize);
    DLFEED_ASSIGN_OR_RETURN(const uint64_t length, parse_header(header, verify_crc, file.path(), off));
    const uint64_t payload_left = left - kHeaderSize;
    if (length > payload_left) {
      return format_error(file.path(), off,
                          absl::StrCat("record ", n, " with a ", length, "-byte payload (", length,
                                       " + 16 bytes of framing) within the file"),
                          absl::StrCat(left, " bytes before the end of the ", size,
                                       "-byte file: the record is truncated inside its payload, or its "
                                       "length points past the end of the file"));
    }
    if (payload_left - length < kFooterSize) {
      return format_error(file.path(), off + kHeaderSize + length,
                          absl::StrCat("the 4-byte payload CRC of record ", n, " (record at offset ", off, ")"),
                          absl::StrCat(payload_left - length, " bytes before the end of the ", size,
                                       "-byte file (truncated inside the record footer)"));
    }
    records.push_back({off, length + kOverhead});
    off += length + kOverhead;
  }
  return records;
}

std::string find_idx(const std::string& data_path, const FormatOptions& options) {
  std::error_code ec;
  for (std::string& p : idx_candidates(data_path, options)) {
    if (fs::is_regular_file(p, ec)) return std::move(p);
  }
  return "";
}

std::string idx_path_for_write(const std::string& data_path, const FormatOptions& options) {
  if (!options.index_dir.empty()) {
    return (fs::path(options.index_dir) / (fs::path(data_path).filename().string() + ".idx")).string();
  }
  return data_path + ".idx";
}

bool split_crcs_hold(std::span<const std::byte> skeleton, uint64_t value_at, std::span<const std::byte> value,
                     const uint32_t* value_crc) {
  const uint64_t n = skeleton.size(), after = value_at + value.size();
  if (n < kOverhead || value_at < kHeaderSize || after + kFooterSize > n) return false;
  auto le = [&](uint64_t at, int bytes) {  // the framing's little-endian fields
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(skeleton[at + i]);
    return v;
  };
  const uint64_t length = le(0, 8);
  const uint32_t length_crc = static_cast<uint32_t>(le(8, 4)), payload_crc = static_cast<uint32_t>(le(n - 4, 4));
  if (length != n - kOverhead || length_crc != masked_crc32c(skeleton.first(8))) return false;
  uint32_t c = detail::crc32c_extend(0, skeleton.data() + kHeaderSize, value_at - kHeaderSize);
  c = value_crc != nullptr ? detail::crc32c_combine(c, *value_crc, value.size())
                           : detail::crc32c_extend(c, value.data(), value.size());
  c = detail::crc32c_extend(c, skeleton.data() + after, n - kFooterSize - after);
  return mask_crc(c) == payload_crc;
}

}  // namespace tfrecord

}  // namespace dlfeed
