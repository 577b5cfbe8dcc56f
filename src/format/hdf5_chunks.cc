// SPDX-License-Identifier: Apache-2.0
// HDF5 chunked storage: the chunk grid and table (every stored chunk placed
// in its cell, checked against the file) turned into byte extents, and the
// decode of those extents: the row of each chunk a sample needs, with
// shuffle and deflate undone here, without libhdf5.
#include <hdf5.h>

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/deflate.h"
#include "hdf5_source.h"
#include "hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI::detail::h5 {
namespace {

// The shuffle filter undone 16 elements at a time for 2-, 4- and 8-byte
// elements (SSE2 byte, word and dword interleaves of the byte planes);
// returns how many of the `n` elements it placed (the rest: a plain loop).
uint64_t unshuffle_sse2(const uint8_t* in, uint64_t n, uint64_t es, uint8_t* out) {
#if defined(__SSE2__)
  auto ld = [&](uint64_t plane, uint64_t i) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + plane * n + i));
  };
  auto st = [&](uint64_t at, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at), v); };
  uint64_t i = 0;
  if (es == 2) {
    for (; i + 16 <= n; i += 16) {
      const __m128i a = ld(0, i), b = ld(1, i);
      st(2 * i, _mm_unpacklo_epi8(a, b));
      st(2 * i + 16, _mm_unpackhi_epi8(a, b));
    }
  } else if (es == 4) {
    for (; i + 16 <= n; i += 16) {
      const __m128i a = ld(0, i), b = ld(1, i), c = ld(2, i), d = ld(3, i);
      const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      const __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
      st(4 * i, _mm_unpacklo_epi16(ab_lo, cd_lo));
      st(4 * i + 16, _mm_unpackhi_epi16(ab_lo, cd_lo));
      st(4 * i + 32, _mm_unpacklo_epi16(ab_hi, cd_hi));
      st(4 * i + 48, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
  } else if (es == 8) {
    for (; i + 16 <= n; i += 16) {
      __m128i lo[4], hi[4];  // planes 2k and 2k+1 interleaved
      for (int k = 0; k < 4; ++k) {
        const __m128i a = ld(2 * k, i), b = ld(2 * k + 1, i);
        lo[k] = _mm_unpacklo_epi8(a, b);
        hi[k] = _mm_unpackhi_epi8(a, b);
      }
      // Bytes 0-3 of elements 0-3, 4-7, 8-11, 12-15; then bytes 4-7 of the same.
      const __m128i q[8] = {_mm_unpacklo_epi16(lo[0], lo[1]), _mm_unpackhi_epi16(lo[0], lo[1]),
                            _mm_unpacklo_epi16(hi[0], hi[1]), _mm_unpackhi_epi16(hi[0], hi[1]),
                            _mm_unpacklo_epi16(lo[2], lo[3]), _mm_unpackhi_epi16(lo[2], lo[3]),
                            _mm_unpacklo_epi16(hi[2], hi[3]), _mm_unpackhi_epi16(hi[2], hi[3])};
      for (int k = 0; k < 4; ++k) {
        st(8 * i + 32 * k, _mm_unpacklo_epi32(q[k], q[k + 4]));
        st(8 * i + 32 * k + 16, _mm_unpackhi_epi32(q[k], q[k + 4]));
      }
    }
  }
  return i;
#else
  (void)in, (void)n, (void)es, (void)out;
  return 0;
#endif
}

constexpr uint64_t kMaxChunkCells = uint64_t{1} << 22;  // chunk grid cells indexed
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 32;  // HDF5's own chunk limit

// One cell of the chunk grid.
struct ChunkEntry {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t mask = 0;  // bit i set: filter i of the pipeline was skipped
  bool stored = false;
};

// Chunked storage without filters, or with shuffle and/or deflate.
class ChunkedSource final : public Hdf5Source {
 public:
  ChunkedSource(DatasetGeometry g, FilterPipeline filters, std::vector<ChunkEntry> cells)
      : Hdf5Source(std::move(g)),
        pipeline_(std::move(filters.steps)),
        shuffle_size_(filters.shuffle_size),
        cells_(std::move(cells)) {
    const size_t r = g_.dims.size();
    grid_.resize(r);
    cells_per_row_ = 1;
    row_elems_ = 1;
    for (size_t d = 0; d < r; ++d) {
      grid_[d] = g_.chunk[d] == 0 ? 0 : (g_.dims[d] + g_.chunk[d] - 1) / g_.chunk[d];
      if (d > 0) {
        cells_per_row_ *= grid_[d];
        row_elems_ *= g_.chunk[d];
      }
    }
    row_bytes_ = row_elems_ * g_.dtype.size;
    chunk_bytes_ = row_bytes_ * g_.chunk[0];
    whole_rows_ = cells_per_row_ == 1;
    for (size_t d = 1; d < r; ++d) whole_rows_ = whole_rows_ && g_.chunk[d] == g_.dims[d];
  }

  std::string layout() const override {
    std::string s = "hdf5:chunked";
    for (Filter f : pipeline_) s += f == Filter::kShuffle ? "+shuffle" : "+deflate";
    return s;
  }

  /// True when a chunk with this filter mask is stored exactly as its bytes.
  bool stored_raw(uint32_t mask) const {
    for (size_t i = 0; i < pipeline_.size(); ++i) {
      if (!(mask & (1u << i))) return false;
    }
    return true;
  }

  void fill(uint64_t k, SampleRef& ref) const override {
    Hdf5Source::fill(k, ref);
    // Checked against the file for every chunk row at open.
    (void)extents_for(k, UINT64_MAX, ref.extents);
  }
  uint64_t index_bytes() const override { return cells_.capacity() * sizeof(ChunkEntry); }
  std::string cache_tag() const override { return "hdf5:chunked"; }
  void cache_save(std::string& out) const override {
    save_geometry(g_, out);
    CacheWriter w(out);
    w.u64(pipeline_.size());
    for (Filter f : pipeline_) w.u8(static_cast<uint8_t>(f));
    w.u32(shuffle_size_);
    w.u64(cells_.size());
    for (const ChunkEntry& c : cells_) {
      w.u64(c.addr);
      w.u64(c.size);
      w.u32(c.mask);
      w.u8(c.stored ? 1 : 0);
    }
  }

  /// The extents of sample k: for each stored chunk of its chunk row, the
  /// row's slice of a raw chunk, or the whole stored chunk when filtered.
  absl::Status extents_for(uint64_t k, uint64_t file_size, absl::InlinedVector<Extent, 1>& out) const {
    const uint64_t r = k / g_.chunk[0];
    const uint64_t k0 = k - r * g_.chunk[0];
    uint64_t total = 0;
    for (uint64_t j = 0; j < cells_per_row_; ++j) {
      const ChunkEntry& c = cells_[r * cells_per_row_ + j];
      if (!c.stored) continue;
      Extent e = stored_raw(c.mask) ? Extent{c.addr + k0 * row_bytes_, row_bytes_} : Extent{c.addr, c.size};
      total += e.length;
      if (total > file_size) {
        return format_error(
            g_.path, c.addr,
            absl::StrCat("the chunks of sample ", k, " of '", g_.name, "' within the file of ", file_size, " bytes"),
            absl::StrCat(total, " bytes of chunks"));
      }
      out.push_back(e);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override {
    const uint64_t k = ref.item;
    const uint64_t r = k / g_.chunk[0];
    const uint64_t k0 = k - r * g_.chunk[0];
    const ChunkEntry* row = cells_.data() + r * cells_per_row_;

    // One raw chunk holding whole samples: the sample is a view of raw.
    if (whole_rows_ && row[0].stored && stored_raw(row[0].mask)) {
      if (raw.size() != g_.sample_bytes) return short_raw(ref, raw.size(), g_.sample_bytes);
      return sample_view(raw.data(), raw.size());
    }

    bool any_filtered = false;
    bool any_missing = false;
    uint64_t expect = 0;
    for (uint64_t j = 0; j < cells_per_row_; ++j) {
      if (!row[j].stored) {
        any_missing = true;
      } else if (stored_raw(row[j].mask)) {
        expect += row_bytes_;
      } else {
        any_filtered = true;
        expect += row[j].size;
      }
    }
    if (raw.size() != expect) return short_raw(ref, raw.size(), expect);

    const uint64_t tmp_bytes = any_filtered ? 2 * chunk_bytes_ : 0;
    scratch.resize(g_.sample_bytes + tmp_bytes);
    std::byte* out = scratch.data();
    std::byte* tmp = out + g_.sample_bytes;
    if (any_missing) g_.fill_bytes(out, g_.sample_bytes);

    uint64_t pos = 0;
    for (uint64_t j = 0; j < cells_per_row_; ++j) {
      const ChunkEntry& c = row[j];
      if (!c.stored) continue;
      const std::byte* slice;
      if (stored_raw(c.mask)) {
        slice = raw.data() + pos;
        pos += row_bytes_;
      } else {
        DLFEED_ASSIGN_OR_RETURN(const std::byte* chunk,
                                unfilter(c, std::span<std::byte>(raw.data() + pos, c.size), tmp, tmp + chunk_bytes_));
        slice = chunk + k0 * row_bytes_;
        pos += c.size;
      }
      copy_cell(j, slice, out);
    }
    return sample_view(out, g_.sample_bytes);
  }

 private:
  absl::Status short_raw(const SampleRef& ref, uint64_t got, uint64_t want) const {
    return format_error(g_.path, ref.extents.empty() ? 0 : ref.extents[0].offset,
                        absl::StrCat(want, " stored bytes for sample ", ref.item, " of '", g_.name, "'"),
                        absl::StrCat(got, " bytes"));
  }

  // Undoes the chunk's filters; returns the decoded chunk (chunk_bytes_ long),
  // in buf_a or buf_b.
  absl::StatusOr<const std::byte*> unfilter(const ChunkEntry& c, std::span<std::byte> stored, std::byte* buf_a,
                                            std::byte* buf_b) const {
    const std::byte* cur = stored.data();
    uint64_t cur_len = stored.size();
    for (size_t i = pipeline_.size(); i-- > 0;) {
      if (c.mask & (1u << i)) continue;  // this filter was skipped for this chunk
      std::byte* dst = cur == buf_a ? buf_b : buf_a;
      if (pipeline_[i] == Filter::kDeflate) {
        absl::StatusOr<uint64_t> inflated;
        {
          counters::StepTimer inflate(counters::Id::kDecodeInflate);
          inflated = inflate_chunk(c, cur, cur_len, dst);
        }
        DLFEED_ASSIGN_OR_RETURN(cur_len, std::move(inflated));
      } else {
        // Shuffling keeps the length, and dst holds one chunk: a longer
        // stored chunk (its deflate skipped by the filter mask) cannot be one.
        if (cur_len > chunk_bytes_) {
          return format_error(g_.path, c.addr,
                              absl::StrCat("a chunk of '", g_.name, "' decoding to ", chunk_bytes_, " bytes"),
                              absl::StrCat(cur_len, " bytes"));
        }
        unshuffle(cur, cur_len, dst);
      }
      cur = dst;
    }
    if (cur_len != chunk_bytes_) {
      return format_error(g_.path, c.addr,
                          absl::StrCat("a chunk of '", g_.name, "' decoding to ", chunk_bytes_, " bytes"),
                          absl::StrCat(cur_len, " bytes"));
    }
    if (cur == stored.data()) {  // every filter skipped (handled as raw before; kept for safety)
      std::memcpy(buf_a, cur, cur_len);
      cur = buf_a;
    }
    return cur;
  }

  absl::StatusOr<uint64_t> inflate_chunk(const ChunkEntry& c, const std::byte* in, uint64_t in_len,
                                         std::byte* out) const {
    const InflateResult r =
        inflate_zlib(std::span<const std::byte>(in, in_len), std::span<std::byte>(out, chunk_bytes_));
    if (r.ok()) return r.produced;
    std::string found;
    switch (r.code) {
      case InflateResult::kTooLong: found = absl::StrCat("more than ", chunk_bytes_, " bytes"); break;
      case InflateResult::kTruncated:
        found = absl::StrCat("a stream that ends early after ", r.produced, " bytes");
        break;
      default: found = absl::StrCat(r.what, " at byte ", r.consumed, " of the stored chunk");
    }
    return format_error(g_.path, c.addr,
                        absl::StrCat("a deflate (zlib) chunk of '", g_.name, "' inflating to ", chunk_bytes_, " bytes"),
                        found);
  }

  // HDF5's shuffle stores byte b of every element together; put them back.
  void unshuffle(const std::byte* in, uint64_t len, std::byte* out) const {
    const uint64_t es = shuffle_size_;
    if (len == 0) return;  // an empty stored chunk (its length is checked after the filters)
    if (es <= 1 || len < es) {
      std::memcpy(out, in, len);
      return;
    }
    const uint64_t n = len / es;
    const uint64_t done = unshuffle_sse2(reinterpret_cast<const uint8_t*>(in), n, es, reinterpret_cast<uint8_t*>(out));
    for (uint64_t b = 0; b < es; ++b) {
      const std::byte* src = in + b * n;
      std::byte* dst = out + b;
      for (uint64_t i = done; i < n; ++i) dst[i * es] = src[i];
    }
    std::memcpy(out + n * es, in + n * es, len - n * es);  // trailing bytes stay as they are
  }

  // Copies the part of chunk-row `slice` (shape chunk[1:]) that lies inside
  // the sample (shape dims[1:]) to its place in `out`.
  void copy_cell(uint64_t j, const std::byte* slice, std::byte* out) const {
    const size_t m = g_.dims.size() - 1;  // sample rank
    const uint64_t es = g_.dtype.size;
    if (m == 0) {
      std::memcpy(out, slice, es);
      return;
    }
    absl::InlinedVector<uint64_t, 4> origin(m), ext(m), sstride(m), dstride(m);
    uint64_t rem = j;
    for (size_t d = m; d-- > 0;) {
      const uint64_t g = grid_[d + 1];
      const uint64_t gi = rem % g;
      rem /= g;
      origin[d] = gi * g_.chunk[d + 1];
      ext[d] = std::min(g_.chunk[d + 1], g_.dims[d + 1] - origin[d]);
    }
    uint64_t s = es, t = es;
    for (size_t d = m; d-- > 0;) {
      sstride[d] = s;
      dstride[d] = t;
      s *= g_.chunk[d + 1];
      t *= g_.dims[d + 1];
    }
    // One run copies dimension `lead` and every one inside it; it grows
    // outward while the dimension inside is whole in both the chunk and the
    // sample (a chunk of one whole sample: one copy, not one per row).
    size_t lead = m - 1;
    uint64_t run = ext[m - 1] * es;
    while (lead > 0 && ext[lead] == g_.chunk[lead + 1] && ext[lead] == g_.dims[lead + 1]) {
      --lead;
      run *= ext[lead];
    }
    absl::InlinedVector<uint64_t, 4> idx(m, 0);
    while (true) {
      uint64_t so = 0, dof = origin[lead] * dstride[lead];
      for (size_t d = 0; d < lead; ++d) {
        so += idx[d] * sstride[d];
        dof += (origin[d] + idx[d]) * dstride[d];
      }
      std::memcpy(out + dof, slice + so, run);
      // Advance the odometer over the outer dimensions 0..lead-1.
      int64_t d = static_cast<int64_t>(lead) - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < ext[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }

  std::vector<Filter> pipeline_;
  uint32_t shuffle_size_;
  std::vector<ChunkEntry> cells_;  // C order over the chunk grid
  std::vector<uint64_t> grid_;
  uint64_t cells_per_row_ = 1;
  uint64_t row_elems_ = 1;
  uint64_t row_bytes_ = 0;
  uint64_t chunk_bytes_ = 0;
  bool whole_rows_ = false;
};

struct StoredChunk {
  std::vector<uint64_t> coord;  // element offset of the chunk's first element
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t mask = 0;
};

// libhdf5 before 1.14 answers chunk queries by scanning the chunk index, so
// listing n chunks costs O(n^2); past this many we read through the library.
constexpr uint64_t kMaxChunksWithoutIter = 2048;

#if H5_VERSION_GE(1, 14, 0)
int chunk_iter_cb(const hsize_t* offset, unsigned mask, haddr_t addr, hsize_t size, void* data) {
  auto* v = static_cast<std::pair<size_t, std::vector<StoredChunk>*>*>(data);
  StoredChunk c;
  c.coord.assign(offset, offset + v->first);
  c.addr = addr;
  c.size = size;
  c.mask = mask;
  v->second->push_back(std::move(c));
  return H5_ITER_CONT;
}
#endif

// Every stored chunk of `dset`, in one pass where libhdf5 allows it. Sets
// `why` (and lists nothing) when the table is too costly to list.
absl::Status list_chunks(const std::string& path, const std::string& name, hid_t dset, size_t rank,
                         std::vector<StoredChunk>& out, std::string& why) {
#if H5_VERSION_GE(1, 14, 0)
  std::pair<size_t, std::vector<StoredChunk>*> data{rank, &out};
  if (H5Dchunk_iter(dset, H5P_DEFAULT, chunk_iter_cb, &data) < 0) {
    return h5_fail(path, absl::StrCat("the chunk index of dataset '", name, "'"));
  }
  (void)why;
#else
  hsize_t nchunks = 0;
  Hid fspace(H5Dget_space(dset), H5Sclose);
  if (!fspace.ok() || H5Dget_num_chunks(dset, fspace.get(), &nchunks) < 0) {
    return h5_fail(path, absl::StrCat("the chunk index of dataset '", name, "'"));
  }
  if (nchunks > kMaxChunksWithoutIter) {
    why = absl::StrCat(nchunks, " chunks, and libhdf5 ", H5_VERS_MAJOR, ".", H5_VERS_MINOR,
                       " can only list a chunk table in quadratic time (H5Dchunk_iter needs 1.14)");
    return absl::OkStatus();
  }
  std::vector<hsize_t> coord(rank);
  for (hsize_t i = 0; i < nchunks; ++i) {
    StoredChunk c;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info(dset, fspace.get(), i, coord.data(), &mask, &addr, &size) < 0) {
      return h5_fail(path, absl::StrCat("chunk ", i, " of the chunk index of dataset '", name, "'"));
    }
    c.coord.assign(coord.begin(), coord.end());
    c.addr = addr;
    c.size = size;
    c.mask = mask;
    out.push_back(std::move(c));
  }
#endif
  return absl::OkStatus();
}

// 0 or `userblock`: what to add to libhdf5's chunk addresses to get file
// offsets, found by comparing the first stored chunk with H5Dread_chunk.
absl::StatusOr<uint64_t> chunk_address_shift(const std::string& path, hid_t dset, const std::vector<ChunkEntry>& table,
                                             const std::vector<uint64_t>& grid, const std::vector<uint64_t>& chunk,
                                             uint64_t userblock, uint64_t file_size) {
  uint64_t c = 0;
  while (!table[c].stored) ++c;
  const ChunkEntry& e = table[c];
  std::vector<hsize_t> coord(grid.size());
  uint64_t rem = c;
  for (size_t d = grid.size(); d-- > 0;) {
    coord[d] = (rem % grid[d]) * chunk[d];
    rem /= grid[d];
  }
  std::vector<std::byte> lib(e.size), disk(e.size);
  uint32_t filters = 0;
  if (H5Dread_chunk(dset, H5P_DEFAULT, coord.data(), &filters, lib.data()) < 0) {
    return h5_fail(path, e.addr, "a chunk that H5Dread_chunk can read");
  }
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
  for (uint64_t shift : {userblock, uint64_t{0}}) {
    if (e.addr + shift + e.size > file_size) continue;
    if (f.read_exact(e.addr + shift, disk, "chunk").ok() && disk == lib) return shift;
  }
  return format_error(path, e.addr, "the chunk libhdf5 reports at this address (with or without the user block)",
                      "different bytes");
}

// The chunk grid: cells along each dimension, and the bytes of one chunk.
struct ChunkGrid {
  std::vector<uint64_t> dims;
  uint64_t cells = 1;
  uint64_t chunk_bytes = 0;
};

absl::StatusOr<ChunkGrid> chunk_grid(const DatasetGeometry& g) {
  ChunkGrid grid;
  uint64_t chunk_elems = 1;
  bool fits = true;
  for (size_t d = 0; d < g.dims.size(); ++d) {
    if (g.chunk[d] == 0) fits = false;
    const uint64_t gd = g.chunk[d] == 0 ? 0 : (g.dims[d] + g.chunk[d] - 1) / g.chunk[d];
    grid.dims.push_back(gd);
    fits = fits && mul_ok(grid.cells, gd, &grid.cells) && mul_ok(chunk_elems, g.chunk[d], &chunk_elems);
  }
  fits = fits && mul_ok(chunk_elems, g.dtype.size, &grid.chunk_bytes) && grid.chunk_bytes <= kMaxChunkBytes;
  if (!fits) {
    return file_error(g.path, absl::StrCat("chunks of at most ", kMaxChunkBytes, " bytes in dataset '", g.name, "'"),
                      absl::StrCat("chunk shape ", absl::StrJoin(g.chunk, "x")));
  }
  return grid;
}

// Why the chunk index of `dset` (of `rank` dimensions) cannot be listed,
// or empty: libhdf5 (1.10 to 1.14 at least) keeps an extensible-array index
// (one unlimited dimension, libver "latest" or "v110") with the unlimited
// dimension moved first, and H5Dget_chunk_info, H5Dchunk_iter and
// H5Dget_chunk_info_by_coord report such a chunk's coordinates in that
// moved order when the unlimited dimension is not the first: a chunk at
// rows 4-7 is reported at columns 4-7. H5Dread places them right.
std::string swapped_chunk_coordinates(hid_t dset, size_t rank) {
  H5D_chunk_index_t kind{};
  if (H5Dget_chunk_index_type(dset, &kind) < 0 || kind != H5D_CHUNK_IDX_EARRAY || rank < 2) return "";
  Hid space(H5Dget_space(dset), H5Sclose);
  std::vector<hsize_t> dims(rank), max(rank);
  if (!space.ok() || H5Sget_simple_extent_dims(space.get(), dims.data(), max.data()) != static_cast<int>(rank)) {
    return "its extent could not be read";
  }
  for (size_t d = 1; d < rank; ++d) {
    if (max[d] == H5S_UNLIMITED) {
      return absl::StrCat("its one unlimited dimension is ", d,
                          ", not 0, and libhdf5 reports the chunks of such an index at swapped coordinates");
    }
  }
  return "";
}

// The stored chunk of every cell of the grid (C order), each checked to be
// on the grid and inside the file, an unfiltered one exactly one chunk long.
// Sets `why` (and places nothing) when the table is too costly to list.
absl::StatusOr<std::vector<ChunkEntry>> chunk_table(hid_t dset, const DatasetGeometry& g, const ChunkGrid& grid,
                                                    size_t nfilters, uint64_t file_size, std::string& why) {
  std::vector<ChunkEntry> table(grid.cells);
  const size_t r = g.dims.size();
  why = swapped_chunk_coordinates(dset, r);
  if (!why.empty()) return table;
  std::vector<StoredChunk> stored;
  DLFEED_RETURN_IF_ERROR(list_chunks(g.path, g.name, dset, r, stored, why));
  if (!why.empty()) return table;
  for (const StoredChunk& sc : stored) {
    uint64_t c = 0;
    bool inside = true;
    for (size_t d = 0; d < r; ++d) {
      const uint64_t gi = sc.coord[d] / g.chunk[d];
      inside = inside && sc.coord[d] % g.chunk[d] == 0 && gi < grid.dims[d];
      c = c * grid.dims[d] + gi;
    }
    if (!inside) {
      return format_error(g.path, sc.addr, absl::StrCat("a chunk of '", g.name, "' on the chunk grid"),
                          absl::StrCat("a chunk at element offset ", absl::StrJoin(sc.coord, ",")));
    }
    if (sc.addr == HADDR_UNDEF || sc.size == 0) continue;
    ChunkEntry& e = table[c];
    if (e.stored) {  // two chunks listed at one place: the index is not what it says
      return format_error(g.path, sc.addr, absl::StrCat("one chunk of '", g.name, "' at each place of the chunk grid"),
                          absl::StrCat("a second chunk at element offset ", absl::StrJoin(sc.coord, ","),
                                       " (the first at file offset ", e.addr, ")"));
    }
    e.addr = sc.addr;
    e.size = sc.size;
    e.mask = sc.mask;
    e.stored = true;
    uint64_t end = 0;
    if (!add_ok(e.addr, e.size, &end) || end > file_size) {
      return format_error(g.path, e.addr,
                          absl::StrCat("a chunk of '", g.name, "' within the file of ", file_size, " bytes"),
                          absl::StrCat(e.size, " bytes ending at offset ", end));
    }
    bool raw = true;
    for (size_t i = 0; i < nfilters; ++i) raw = raw && (e.mask & (1u << i));
    if (raw && e.size != grid.chunk_bytes) {
      return format_error(g.path, e.addr,
                          absl::StrCat("an unfiltered chunk of '", g.name, "' of ", grid.chunk_bytes, " bytes"),
                          absl::StrCat(e.size, " bytes"));
    }
  }
  return table;
}

// libhdf5 versions differ on whether chunk addresses count a user block;
// checks one chunk against H5Dread_chunk and shifts them all if needed.
absl::Status shift_for_userblock(hid_t dset, const DatasetGeometry& g, const ChunkGrid& grid, uint64_t userblock,
                                 uint64_t file_size, std::vector<ChunkEntry>& table) {
  const bool any_stored = std::any_of(table.begin(), table.end(), [](const ChunkEntry& e) { return e.stored; });
  if (!any_stored || userblock == 0) return absl::OkStatus();
  DLFEED_ASSIGN_OR_RETURN(uint64_t shift,
                          chunk_address_shift(g.path, dset, table, grid.dims, g.chunk, userblock, file_size));
  for (ChunkEntry& e : table) {
    uint64_t end = 0;
    if (!e.stored) continue;
    e.addr += shift;
    if (!add_ok(e.addr, e.size, &end) || end > file_size) {
      return format_error(g.path, e.addr,
                          absl::StrCat("a chunk of '", g.name, "' within the file of ", file_size, " bytes"),
                          absl::StrCat(e.size, " bytes ending at offset ", end));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SampleSource>> index_chunked(hid_t dset, DatasetGeometry& g, FilterPipeline filters,
                                                            uint64_t userblock, uint64_t file_size) {
  DLFEED_ASSIGN_OR_RETURN(ChunkGrid grid, chunk_grid(g));
  if (grid.cells > kMaxChunkCells) {
    g.reason = absl::StrCat("its chunk grid has ", grid.cells, " cells, more than dlfeed indexes");
    return std::unique_ptr<SampleSource>();
  }
  std::string why;
  DLFEED_ASSIGN_OR_RETURN(std::vector<ChunkEntry> table,
                          chunk_table(dset, g, grid, filters.steps.size(), file_size, why));
  if (!why.empty()) {
    g.reason = std::move(why);
    return std::unique_ptr<SampleSource>();
  }
  DLFEED_RETURN_IF_ERROR(shift_for_userblock(dset, g, grid, userblock, file_size, table));
  const uint64_t rows_of = std::max<uint64_t>(1, g.chunk[0]);
  auto src = std::make_unique<ChunkedSource>(std::move(g), std::move(filters), std::move(table));
  // Samples of one chunk row share their chunks: checking each row's first
  // sample checks every sample's extents against the file.
  absl::InlinedVector<Extent, 1> scratch;
  const uint64_t n = src->num_samples();
  for (uint64_t k = 0; k < n; k += rows_of) {
    scratch.clear();
    DLFEED_RETURN_IF_ERROR(src->extents_for(k, file_size, scratch));
  }
  return std::unique_ptr<SampleSource>(std::move(src));
}

absl::StatusOr<std::unique_ptr<SampleSource>> load_chunked(const std::string& path, uint64_t file_size,
                                                           CacheReader& in) {
  DLFEED_ASSIGN_OR_RETURN(DatasetGeometry g, load_geometry(path, file_size, in));
  FilterPipeline filters;
  const uint64_t steps = in.u64();
  if (!in.ok() || steps > 8) return file_error(path, "a cached HDF5 filter pipeline", "a malformed one");
  for (uint64_t i = 0; i < steps; ++i) {
    const uint8_t f = in.u8();
    if (f > static_cast<uint8_t>(Filter::kDeflate)) in.fail();
    filters.steps.push_back(static_cast<Filter>(f));
  }
  filters.shuffle_size = in.u32();
  const uint64_t n = in.u64();
  if (!in.ok() || g.chunk.size() != g.dims.size() || n > in.left() / 21) {
    return file_error(path, "an HDF5 chunked entry in the index cache", "a truncated or malformed one");
  }
  // The grid the geometry implies must be the table's, within the limits
  // open_hdf5 indexes, and every stored chunk must lie in the file.
  DLFEED_ASSIGN_OR_RETURN(ChunkGrid grid, chunk_grid(g));
  // A decoded chunk is at most what deflate makes of the whole file (the
  // decode allocates two of them).
  const uint64_t most =
      std::max<uint64_t>(uint64_t{1} << 20, file_size > (uint64_t{1} << 40) ? UINT64_MAX : file_size * 1032);
  if (grid.chunk_bytes > most) {
    return file_error(path,
                      absl::StrCat("cached chunks of at most ", most, " bytes for the file of ", file_size, " bytes"),
                      absl::StrCat(grid.chunk_bytes, " bytes"));
  }
  if (grid.cells != n || grid.cells > kMaxChunkCells) {
    return file_error(path,
                      absl::StrCat("a cached chunk table of ", grid.cells, " cells (at most ", kMaxChunkCells, ")"),
                      absl::StrCat(n, " cells"));
  }
  std::vector<ChunkEntry> cells(n);
  for (ChunkEntry& c : cells) {
    c.addr = in.u64();
    c.size = in.u64();
    c.mask = in.u32();
    c.stored = in.u8() != 0;
    uint64_t end = 0;
    if (c.stored && (!add_ok(c.addr, c.size, &end) || end > file_size)) {
      return file_error(path, absl::StrCat("cached chunks within the file of ", file_size, " bytes"),
                        absl::StrCat("a chunk of ", c.size, " bytes at offset ", c.addr));
    }
    // As chunk_table checks: a chunk stored with every filter skipped is the
    // chunk's bytes, exactly (samples are cut from it by offset).
    bool raw = true;
    for (size_t i = 0; i < filters.steps.size(); ++i) raw = raw && (c.mask & (1u << i));
    if (c.stored && raw && c.size != grid.chunk_bytes) {
      return file_error(path, absl::StrCat("cached unfiltered chunks of ", grid.chunk_bytes, " bytes"),
                        absl::StrCat("a chunk of ", c.size, " bytes at offset ", c.addr));
    }
  }
  if (!in.ok()) return file_error(path, "an HDF5 chunk table in the index cache", "a truncated one");
  const uint64_t rows_of = std::max<uint64_t>(1, g.chunk[0]);
  auto src = std::make_unique<ChunkedSource>(std::move(g), std::move(filters), std::move(cells));
  absl::InlinedVector<Extent, 1> scratch;
  for (uint64_t k = 0; k < src->num_samples(); k += rows_of) {
    scratch.clear();
    DLFEED_RETURN_IF_ERROR(src->extents_for(k, file_size, scratch));
  }
  return std::unique_ptr<SampleSource>(std::move(src));
}

}  // namespace dlfeed::detail::h5
