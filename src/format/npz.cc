// SPDX-License-Identifier: Apache-2.0
// NPZ: a zip archive of NPY members. Stored members are indexed by direct
// offset into the archive; deflated ones are inflated with zlib at decode.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "array_source.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "dlfeed/format/npy.h"
#include "dlfeed/format/zip.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

constexpr uint64_t kMaxHeaderProbe = (1 << 20) + kNpyPreamble;
// The most deflate can expand (258-byte matches from 2 bits each, about 1032:1).
constexpr uint64_t kMaxDeflateRatio = 1032;

// Inflates the first bytes of a raw deflate stream (for the NPY header of a
// deflated member); returns how many bytes came out.
absl::StatusOr<size_t> inflate_prefix(std::span<const std::byte> in, std::span<std::byte> out, absl::string_view path,
                                      uint64_t offset) {
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&zs, Z_SYNC_FLUSH);
  const size_t produced = zs.total_out;
  const uint64_t consumed = zs.total_in;
  inflateEnd(&zs);
  if (rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR) {
    return format_error(path, offset + consumed, "valid deflate data", "corrupt data");
  }
  return produced;
}

// A member's field name: "x.npy" is field "x".
std::string field_of(const ZipMember& m) {
  return absl::EndsWith(m.name, ".npy") ? m.name.substr(0, m.name.size() - 4) : m.name;
}

std::string member_list(const std::vector<ZipMember>& members) {
  std::vector<std::string> names;
  names.reserve(members.size());
  for (const auto& m : members) {
    names.push_back(absl::StrCat("'", field_of(m), "'"));
  }
  return names.empty() ? "no members" : absl::StrJoin(names, ", ");
}

}  // namespace

namespace {

// The central directory of the zip file at `path`.
absl::StatusOr<std::vector<ZipMember>> read_members(const std::string& path, detail::File& f, ZipDirectory& dir) {
  const uint64_t size = f.size();
  std::vector<std::byte> tail(std::min<uint64_t>(size, 22 + 65535 + 20));
  DLFEED_RETURN_IF_ERROR(f.read_exact(size - tail.size(), tail, "zip end record"));
  DLFEED_ASSIGN_OR_RETURN(dir, parse_zip_end(tail, size, path));
  if (dir.entries == UINT64_MAX) {
    const uint64_t z64_at = dir.offset;
    if (z64_at > size || size - z64_at < 56) {
      return format_error(path, z64_at, "a Zip64 end-of-central-directory record (56 bytes)",
                          "an offset past the end of the file");
    }
    std::vector<std::byte> z64(56);
    DLFEED_RETURN_IF_ERROR(f.read_exact(z64_at, z64, "Zip64 end record"));
    DLFEED_ASSIGN_OR_RETURN(dir, parse_zip64_end(z64, z64_at, path));
  }
  std::vector<std::byte> cd(dir.size);
  DLFEED_RETURN_IF_ERROR(f.read_exact(dir.offset, cd, "zip central directory"));
  return parse_zip_directory(cd, dir.offset, dir.entries, size, path);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> npz_member_names(const std::string& path) {
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
  ZipDirectory dir;
  DLFEED_ASSIGN_OR_RETURN(std::vector<ZipMember> members, read_members(path, f, dir));
  std::vector<std::string> names;
  names.reserve(members.size());
  for (const ZipMember& m : members) {
    names.push_back(field_of(m));
  }
  return names;
}

namespace {

// Picks the member as numpy's NpzFile does: the option's name as it is,
// else with .npy (an archive with both 'x' and 'x.npy' gives 'x' for 'x',
// whatever their order); the last of members of one name, as zipfile does;
// else x, else the only one.
absl::StatusOr<const ZipMember*> choose_member(const std::vector<ZipMember>& members, const std::string& wanted,
                                               const std::string& path) {
  const ZipMember* chosen = nullptr;
  const ZipMember* with_npy = nullptr;
  for (const auto& m : members) {
    if (wanted.empty()) {
      if (m.name == "x.npy") chosen = &m;
    } else if (m.name == wanted) {
      chosen = &m;
    } else if (m.name == wanted + ".npy") {
      with_npy = &m;
    }
  }
  if (chosen == nullptr) chosen = with_npy;
  if (chosen == nullptr && wanted.empty() && members.size() == 1) chosen = members.data();
  if (chosen == nullptr) {
    return absl::NotFoundError(
        wanted.empty()
            ? absl::StrCat(path, ": no member 'x' and more than one other: choose one by its name (members: ",
                           member_list(members), ")")
            : absl::StrCat(path, ": no member '", wanted, "' (members: ", member_list(members), ")"));
  }
  return chosen;
}

// Checks that `m` is readable (unencrypted, stored or deflated) and reads
// its local header: sets m.data_offset.
absl::Status locate_member_data(detail::File& f, uint64_t size, ZipMember& m, const std::string& path) {
  // A valid zip dlfeed does not read: InvalidArgument (docs/formats.md), not DataLoss.
  if (m.flags & 1) {
    return absl::InvalidArgumentError(format_error(path, m.local_header_offset,
                                                   absl::StrCat("an unencrypted member '", m.name, "'"),
                                                   "an encrypted one")
                                          .message());
  }
  if (m.method != 0 && m.method != 8) {
    const char* known = m.method == 12 ? " (bzip2)" : m.method == 14 ? " (LZMA)" : m.method == 93 ? " (zstd)" : "";
    return absl::InvalidArgumentError(
        format_error(path, m.local_header_offset,
                     absl::StrCat("member '", m.name, "' stored (0) or deflated (8), as np.savez writes them"),
                     absl::StrCat("compression method ", m.method, known))
            .message());
  }
  std::vector<std::byte> lh(30);
  if (m.local_header_offset + 30 > size) {
    return format_error(path, m.local_header_offset, "a 30-byte zip local header", "end of file");
  }
  DLFEED_RETURN_IF_ERROR(f.read_exact(m.local_header_offset, lh, "zip local header"));
  DLFEED_ASSIGN_OR_RETURN(m.data_offset, zip_data_offset(lh, m, size, path));
  return absl::OkStatus();
}

// A member that does not begin as an NPY array does (a text file zipped with
// the arrays): InvalidArgument naming it, not a truncated NPY.
absl::Status npy_member_check(std::span<const std::byte> head, const ZipMember& m, const std::string& path,
                              const std::string& label) {
  static constexpr char kMagic[] = "\x93NUMPY";
  if (head.size() >= 6 && std::memcmp(head.data(), kMagic, 6) == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", label, " (", m.uncompressed_size,
                                                 " bytes) is not an NPY array: it does not begin with \\x93NUMPY"));
}

// The NPY header of stored member `m` (`label` names it in errors).
absl::StatusOr<NpyHeader> stored_header(detail::File& f, const ZipMember& m, const std::string& path,
                                        const std::string& label) {
  if (m.compressed_size != m.uncompressed_size) {
    return format_error(path, m.local_header_offset, absl::StrCat("equal sizes for stored ", label),
                        absl::StrCat(m.compressed_size, " vs ", m.uncompressed_size));
  }
  std::vector<std::byte> pre(std::min<uint64_t>(kNpyPreamble, m.compressed_size));
  DLFEED_RETURN_IF_ERROR(f.read_exact(m.data_offset, pre, "NPY preamble"));
  DLFEED_RETURN_IF_ERROR(npy_member_check(pre, m, path, label));
  DLFEED_ASSIGN_OR_RETURN(uint64_t hsize, npy_header_size(pre, path, m.data_offset));
  if (hsize > m.compressed_size) {
    return format_error(path, m.data_offset, absl::StrCat("an NPY header inside ", label),
                        absl::StrCat("a header of ", hsize, " bytes in a member of ", m.compressed_size));
  }
  std::vector<std::byte> hb(hsize);
  DLFEED_RETURN_IF_ERROR(f.read_exact(m.data_offset, hb, "NPY header"));
  return parse_npy_header(hb, path, m.data_offset);
}

// The NPY header of deflated member `m` (`label` names it in errors).
absl::StatusOr<NpyHeader> deflated_header(detail::File& f, const ZipMember& m, const std::string& path,
                                          const std::string& label) {
  // Deflate expands at most 1032:1; a directory claiming more is corrupt
  // (and decode would allocate what it claims).
  if (m.uncompressed_size / kMaxDeflateRatio > m.compressed_size + 1) {
    return format_error(path, m.local_header_offset,
                        absl::StrCat("an uncompressed size deflate can reach from the ", m.compressed_size,
                                     " compressed bytes of ", label, " (at most ", kMaxDeflateRatio, "x)"),
                        absl::StrCat(m.uncompressed_size, " bytes"));
  }
  std::vector<std::byte> comp(std::min<uint64_t>(m.compressed_size, kMaxHeaderProbe));
  DLFEED_RETURN_IF_ERROR(f.read_exact(m.data_offset, comp, "deflated NPY header"));
  std::vector<std::byte> head(std::min<uint64_t>(m.uncompressed_size, kMaxHeaderProbe));
  DLFEED_ASSIGN_OR_RETURN(size_t got, inflate_prefix(comp, head, path, m.data_offset));
  head.resize(got);
  DLFEED_RETURN_IF_ERROR(npy_member_check(head, m, path, label));
  // Offsets inside a deflated member are reported at the member's start.
  return parse_npy_header(head, path, m.data_offset);
}

// DLIO's NPZ told by its content, wherever it lies (a link to its train/
// folder under another name, say): exactly the members x and y, as
// np.savez(x=records, y=labels) writes them, with one label per sample of
// x's last axis, and that axis not also its first.
bool dlio_npz_content(detail::File& f, uint64_t size, const std::vector<ZipMember>& members, const std::string& path) {
  if (members.size() != 2) return false;
  std::optional<NpyHeader> x, y;
  for (ZipMember m : members) {
    if (m.name != "x.npy" && m.name != "y.npy") return false;
    if (!locate_member_data(f, size, m, path).ok()) return false;
    const std::string label = absl::StrCat("member '", m.name, "'");
    absl::StatusOr<NpyHeader> h = m.method == 0 ? stored_header(f, m, path, label) : deflated_header(f, m, path, label);
    if (!h.ok()) return false;
    (m.name == "x.npy" ? x : y) = *std::move(h);
  }
  return x && y && x->shape.size() >= 2 && y->shape.size() == 1 && y->shape[0] == x->shape.back() &&
         x->shape.front() != x->shape.back();
}

}  // namespace

absl::StatusOr<SampleIndex> open_npz(const std::string& path, const FormatOptions& options) {
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
  const uint64_t size = f.size();
  ZipDirectory dir;
  DLFEED_ASSIGN_OR_RETURN(std::vector<ZipMember> members, read_members(path, f, dir));
  DLFEED_ASSIGN_OR_RETURN(const ZipMember* chosen, choose_member(members, options.name, path));
  ZipMember m = *chosen;
  DLFEED_RETURN_IF_ERROR(locate_member_data(f, size, m, path));

  const std::string label = absl::StrCat("member '", m.name, "'");
  NpyHeader h;
  if (m.method == 0) {
    DLFEED_ASSIGN_OR_RETURN(h, stored_header(f, m, path, label));
  } else {
    DLFEED_ASSIGN_OR_RETURN(h, deflated_header(f, m, path, label));
  }
  if (h.data_offset > m.uncompressed_size || h.data_bytes() > m.uncompressed_size - h.data_offset) {
    return format_error(
        path, m.data_offset,
        absl::StrCat(h.data_bytes(), " bytes of array data for shape ", shape_str(h.shape), " in ", label),
        absl::StrCat("a member of ", m.uncompressed_size, " bytes"));
  }
  SampleAxis axis = detail::resolve_axis(options, path);
  if (options.axis == SampleAxis::kAuto && axis == SampleAxis::kFirst && detail::dlio_file_name(path) &&
      dlio_npz_content(f, size, members, path)) {
    axis = SampleAxis::kLast;
  }
  DLFEED_ASSIGN_OR_RETURN(detail::SampleGeometry g, detail::sample_geometry(h, axis, path));
  std::string name = m.name;
  if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") name.resize(name.size() - 4);
  auto src =
      std::make_unique<detail::ArraySource>(path, name, h, g, axis, m.method == 8 ? "npz:deflated" : "npz:stored");
  if (m.method == 8) src->set_deflated(m);
  src->set_array_offset(m.data_offset);
  SampleIndex index;
  index.add_file(path, std::move(src));
  index.identities.assign(1, f.identity());
  return index;
}

}  // namespace dlfeed
