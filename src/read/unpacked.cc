// SPDX-License-Identifier: Apache-2.0
#include "read/unpacked.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "counters/record.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "format/array_source.h"

namespace dlfeed::inline DLFEED_ABI::detail {

ByteBuffer UnpackedFiles::take_read_buffer() const {
  std::lock_guard<std::mutex> lock(read_buffers_mu_);
  if (read_buffers_.empty()) return ByteBuffer();
  ByteBuffer b = std::move(read_buffers_.back());
  read_buffers_.pop_back();
  return b;
}

void UnpackedFiles::give_read_buffer(ByteBuffer&& b) const {
  std::lock_guard<std::mutex> lock(read_buffers_mu_);
  read_buffers_.push_back(std::move(b));
}

absl::StatusOr<std::shared_ptr<UnpackedFiles::Loaded>> UnpackedFiles::load(Entry& e) const {
  auto out = std::make_shared<Loaded>();
  Loaded& l = *out;
  const bool deflated = e.source->unpack_inflated_bytes() > 0;
  // What the last epoch's load of this file kept is this one's to fill.
  (deflated ? l.inflated : l.raw) = std::move(e.spare);
  const Extent ext = e.source->unpack_extent();
  const std::string path = table_->path(e.table_id);
  [[maybe_unused]] const uint64_t t0 = counters_ ? now_of(*counters_) : 0;
  std::span<const std::byte> raw;
  if (held_ && held_->wait(e.table_id)) {
    // Held in memory: the bytes are there already (no copy), or soon.
    const uint64_t size = held_->size(e.table_id);
    if (ext.offset > size || ext.length > size - ext.offset) {
      const uint64_t available = ext.offset < size ? size - ext.offset : 0;
      return format_error(path, ext.offset, absl::StrCat(ext.length, " bytes"),
                          absl::StrCat("only ", available, " bytes before the end of the file"));
    }
    raw = std::span<const std::byte>(held_->data(e.table_id) + ext.offset, ext.length);
  } else {
    if (deflated) l.raw = take_read_buffer();
    l.raw.resize(ext.length);
    const std::span<std::byte> to(l.raw.data(), ext.length);
    if (is_object_url(path)) {
      DLFEED_ASSIGN_OR_RETURN(File object, open_object_version(path, table_->identity(e.table_id)));
      DLFEED_RETURN_IF_ERROR(object.read_exact(ext.offset, to, "array to unpack"));
    } else {
      DLFEED_ASSIGN_OR_RETURN(FileTable::Pin pin, table_->pin(e.table_id));
      DLFEED_ASSIGN_OR_RETURN(size_t got, pread_full(pin.fd(), to, ext.offset, path));
      if (got != ext.length) {
        return format_error(path, ext.offset + got, absl::StrCat(ext.length - got, " more bytes"),
                            "the end of the file (truncated)");
      }
    }
    raw = std::span<const std::byte>(l.raw.data(), ext.length);
  }
  bytes_read_.fetch_add(ext.length, std::memory_order_relaxed);
  loads_.fetch_add(1, std::memory_order_relaxed);
  DLFEED_REC({
    if (counters_ != nullptr) record_reads(*counters_, t0, now_of(*counters_), 1, ext.length);  // as the engine counts
  });
  auto data = e.source->unpack(raw, l.inflated);
  if (deflated && l.raw.capacity() > 0) give_read_buffer(std::move(l.raw));  // the compressed bytes are done
  if (!data.ok()) return data.status();
  l.data = *data;
  return out;
}

absl::StatusOr<DecodedSample> UnpackedFiles::decode(size_t field, const SampleRef& ref,
                                                    std::vector<std::byte>& scratch) const {
  Entry& e = *slots_[field][ref.file];
  std::shared_ptr<const Loaded> l;
  {
    // The first decode needing the array loads it; the others wait for it.
    std::lock_guard<std::mutex> lock(e.mu);
    if (!e.loaded) {
      DLFEED_ASSIGN_OR_RETURN(e.loaded, load(e));
    }
    l = e.loaded;
  }
  // Gathered outside the lock: `l` keeps the bytes alive.
  return e.source->decode_unpacked(ref, l->data, scratch);
}

void UnpackedFiles::reset() {
  for (auto& field : slots_) {
    for (auto& e : field) {
      if (e == nullptr) continue;
      std::lock_guard<std::mutex> lock(e->mu);
      // No decode runs now, so nothing else holds the bytes: keep the buffer.
      if (e->loaded != nullptr && e->loaded.use_count() == 1) {
        Loaded& l = *e->loaded;
        e->spare = std::move(e->source->unpack_inflated_bytes() > 0 ? l.inflated : l.raw);
      }
      e->loaded.reset();
    }
  }
}

absl::StatusOr<UnpackChoice> choose_unpacked(const LoaderOptions& o, const std::vector<SampleIndex>& indices,
                                             const std::vector<std::vector<uint32_t>>& file_ids, FileTable& table,
                                             std::shared_ptr<const ResidentFiles> held, bool objects,
                                             counters::Counters* counters) {
  UnpackChoice out;
  if (o.unpack != Mode::kAuto && o.unpack != Mode::kOn && o.unpack != Mode::kOff) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader: unpack is auto, on or off, not ", static_cast<int>(o.unpack)));
  }
  // Which sources would gain, and what each would keep.
  struct Candidate {
    size_t field;
    uint32_t file;
    const ArraySource* source;
    uint64_t keep;
  };
  std::vector<Candidate> want;
  for (size_t f = 0; f < indices.size(); ++f) {
    for (uint32_t k = 0; k < indices[f].sources.size(); ++k) {
      const auto* src = dynamic_cast<const ArraySource*>(indices[f].sources[k].get());
      if (src == nullptr || src->num_samples() == 0 || !src->unpack_pays()) continue;
      const uint32_t id = file_ids[f][k];
      // A raw array in a held file is gathered from the held bytes (no copy).
      const bool view = src->unpack_inflated_bytes() == 0 && held && held->will_hold(id);
      want.push_back({f, k, src,
                      src->unpack_inflated_bytes() > 0 ? src->unpack_inflated_bytes()
                      : view                           ? 0
                                                       : src->unpack_extent().length});
    }
  }
  if (want.empty()) {  // nothing deflated or strided: nothing to say, unless asked
    if (o.unpack == Mode::kOn) out.reason = "unpack=on: nothing deflated or strided to unpack";
    return out;
  }
  if (o.unpack == Mode::kOff) {
    out.reason =
        absl::StrCat("not unpacked: unpack is off (", want.size(), " deflated or strided arrays read per sample)");
    return out;
  }
  if (o.io.direct || !o.stage.dir.empty() || (o.advanced.io_factory && !objects)) {
    const char* why = o.io.direct            ? "io.direct asks for the device"
                      : !o.stage.dir.empty() ? "staging copies the files to stage.dir"
                                             : "io_factory makes the backend";
    if (o.unpack == Mode::kOn) return absl::FailedPreconditionError(absl::StrCat("loader: unpack=on, but ", why));
    out.reason = absl::StrCat("not unpacked: ", why);
    return out;
  }
  const uint64_t half = o.memory_budget / 2;
  const uint64_t used = held ? held->bytes() : 0;
  uint64_t room = half > used ? half - used : 0;
  if (o.unpack == Mode::kOn) {  // every one, or say why not
    uint64_t need = 0;
    for (const Candidate& c : want) need += c.keep;
    if (need > room) {
      return absl::FailedPreconditionError(absl::StrCat("loader: unpack=on, but the ", want.size(),
                                                        " deflated or strided arrays keep ", need,
                                                        " bytes, more than half of memory_budget (", o.memory_budget,
                                                        " bytes) less the held files (", used, " bytes)"));
    }
  }
  auto u = std::make_shared<UnpackedFiles>();
  u->slots_.resize(indices.size());
  for (size_t f = 0; f < indices.size(); ++f) u->slots_[f].resize(indices[f].sources.size());
  u->table_ = &table;
  u->held_ = std::move(held);
  u->counters_ = counters;
  size_t skipped = 0;
  for (const Candidate& c : want) {
    if (c.keep > room) {
      ++skipped;
      continue;
    }
    room -= c.keep;
    u->reserved_ += c.keep;
    auto e = std::make_unique<UnpackedFiles::Entry>();
    e->source = c.source;
    e->table_id = file_ids[c.field][c.file];
    u->slots_[c.field][c.file] = std::move(e);
    ++u->files_;
  }
  const std::string rest = skipped ? absl::StrCat("; ", skipped, " more read per sample (over half of memory_budget, ",
                                                  o.memory_budget, " bytes, less the held files)")
                                   : "";
  if (u->files_ == 0) {
    out.reason = absl::StrCat("not unpacked: ", want.size(),
                              " deflated or strided arrays read per sample (none fits in half of memory_budget, ",
                              o.memory_budget, " bytes, less the held files)");
    return out;
  }
  out.reason = absl::StrCat("unpacked: ", u->files_, " deflated or strided arrays read once whole per epoch, ",
                            u->reserved_, " bytes kept", rest);
  out.files = std::move(u);
  return out;
}

}  // namespace dlfeed::detail
