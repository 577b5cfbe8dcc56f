// SPDX-License-Identifier: Apache-2.0
#include "loader/loader_fields.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/object_store.h"
#include "index/field_patterns.h"
#include "index/folder_walk.h"
#include "read/split_reads.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace {

// options.field_shapes and field_dtypes by field name (`called`, as the
// fields are called), each name checked. With `fields` empty, the one field
// may also be named by the feature or member the options read.
absl::Status per_field(const LoaderOptions& options, const std::vector<std::string>& called,
                       std::map<std::string, Shape>& shapes, std::map<std::string, DType>& dtypes) {
  auto key_of = [&](const std::string& key) -> std::string {
    if (options.fields.empty() && (key == options.format.feature || key == options.format.name)) return called[0];
    return key;
  };
  auto check_named = [&](const std::string& key, absl::string_view what) -> absl::Status {
    if (std::find(called.begin(), called.end(), key_of(key)) != called.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "loader: ", what, " names '", key, "', which is not a field (the fields: ", absl::StrJoin(called, ", "), ")"));
  };
  for (const auto& [key, shape] : options.field_shapes) {
    DLFEED_RETURN_IF_ERROR(check_named(key, "field_shapes"));
    shapes[key_of(key)] = shape;
  }
  for (const auto& [key, dtype] : options.field_dtypes) {
    DLFEED_RETURN_IF_ERROR(check_named(key, "field_dtypes"));
    dtypes[key_of(key)] = dtype;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status open_fields(const LoaderOptions& options, counters::Counters& cnt, std::vector<std::string>& field_names,
                         std::vector<FieldSpec>& field_specs, std::vector<SampleIndex>& indices,
                         std::vector<FormatOptions>& formats) {
  const ListingMemo listings;  // the fields list an object store's prefix once
  std::vector<std::string> names = options.fields;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader: field '", names[i], "' is named twice in fields; name each field once"));
    }
  }
  if (names.empty()) {
    const FileFormat f = options.format.format;
    names.push_back(f == FileFormat::kTfRecord ? options.format.feature : options.format.name);
  }
  std::vector<FieldEntry> parsed;
  std::vector<std::string> called;  // the fields' names
  for (const std::string& entry : names) {
    DLFEED_ASSIGN_OR_RETURN(FieldEntry field, parse_field_entry(entry));
    called.push_back(field.name.empty() ? (names.size() == 1 ? "data" : field.name) : field.name);
    if (std::find(called.begin(), called.end() - 1, called.back()) != called.end() - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader: two fields are named '", called.back(), "'; name each field once"));
    }
    parsed.push_back(std::move(field));
  }
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  DLFEED_RETURN_IF_ERROR(per_field(options, called, shapes, dtypes));
  std::vector<FieldEntry> entries;
  for (FieldEntry& field : parsed) {
    const std::string& name = field.name;
    FormatOptions fo = format_of(field, options.format);
    const std::string& call = called[entries.size()];
    if (auto it = shapes.find(call); it != shapes.end()) fo.feature_shape = it->second;
    if (auto it = dtypes.find(call); it != dtypes.end()) fo.feature_dtype = it->second;
    // A cache file the user named holds one field's index: with several
    // fields each has its own beside it (PATH.FIELD), as "auto" names one per
    // field; else each field's open wrote over the other's and none was used.
    if (parsed.size() > 1 && !fo.index_cache.empty() && fo.index_cache != "off" && fo.index_cache != "auto") {
      std::string suffix;  // the name, other bytes than [A-Za-z0-9_-] as %XX: one file per name
      for (const char ch : call) {
        const auto u = static_cast<unsigned char>(ch);
        if (absl::ascii_isalnum(u) || ch == '_' || ch == '-') {
          suffix.push_back(ch);
        } else {
          absl::StrAppendFormat(&suffix, "%%%02X", u);
        }
      }
      absl::StrAppend(&fo.index_cache, ".", suffix);
    }
    counters::Span open_span(&cnt, counters::kOpenSpan);
    DLFEED_ASSIGN_OR_RETURN(SampleIndex idx, options.advanced.index_opener
                                                 ? options.advanced.index_opener(options.paths, fo)
                                                 : open_dataset(options.paths, fo));
    DLFEED_RETURN_IF_ERROR(idx.check());
    open_span.args(indices.size(), idx.num_files());
    open_span.end();
    if (!indices.empty()) {
      const SampleIndex& first = indices[0];
      for (size_t k = 0; k < entries.size(); ++k) {  // the first field of a pattern pairs with every other
        if (entries[k].pattern.empty()) continue;
        DLFEED_RETURN_IF_ERROR(check_paired(indices[k], entries[k], idx, field));
        break;
      }
      // NPY columns (x_007.npy, y_007.npy): the first column field pairs with every other by folder and tag.
      if (field.pattern.empty() && is_npy_column(idx, fo.name)) {
        for (size_t k = 0; k < entries.size(); ++k) {
          if (!entries[k].pattern.empty() || !is_npy_column(indices[k], formats[k].name)) continue;
          DLFEED_RETURN_IF_ERROR(check_columns_paired(indices[k], formats[k].name, idx, fo.name));
          break;
        }
      }
      if (idx.file_begin != first.file_begin) {
        // The first pair of files that differ, by name: the totals alone
        // may agree (9 and 11 rows in two files), and name no file.
        std::string where;
        for (size_t k = 0; k < idx.num_files() && k < first.num_files(); ++k) {
          const uint64_t a = idx.file_begin[k + 1] - idx.file_begin[k];
          const uint64_t b = first.file_begin[k + 1] - first.file_begin[k];
          if (a == b) continue;
          where = absl::StrCat("; in file ", k + 1, " of ", idx.num_files(), ", ", idx.files[k], " gives '", name, "' ",
                               a, " samples and ", idx.files[k] == first.files[k] ? "" : first.files[k] + " gives ",
                               "'", field_names[0], "' ", b);
          break;
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "loader: field '", name, "' has ", idx.size(), " samples in ", idx.num_files(), " files but field '",
            field_names[0], "' has ", first.size(), " in ", first.num_files(), where,
            "; every field needs the same samples per file (", name, ": ", samples_per_file_str(idx), "; ",
            field_names[0], ": ", samples_per_file_str(first), "; axis none reads each array as one sample)"));
      }
    }
    field_names.push_back(call);
    DLFEED_ASSIGN_OR_RETURN(FieldSpec spec, uniform_spec(idx, field_names.back(), options.ragged));
    // A dtype asked for this field that its files do not give (an NPY or HDF5
    // array keeps its own; a TFRecord float or int64 list is float32 or
    // int64): an error, not the option silently passed over.
    if (auto it = dtypes.find(call); it != dtypes.end() && spec.known && !(spec.dtype == it->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loader: field_dtypes gives field '", call, "' as ", it->second.name(), ", but its samples are ",
          spec.dtype.name(), " (", idx.num_files() > 0 ? idx.sources[0]->describe() : std::string("no file"),
          "): field_dtypes sets the element type of raw bytes (a TFRecord bytes_list feature); other fields "
          "keep the type their files give"));
    }
    field_specs.push_back(std::move(spec));
    indices.push_back(std::move(idx));
    formats.push_back(std::move(fo));
    entries.push_back(std::move(field));
  }
  return absl::OkStatus();
}

absl::Status still_indexed(const SampleIndex& index, uint32_t k, const FormatOptions& options) {
  if (k >= index.num_files()) return absl::InternalError(absl::StrCat("no file ", k, " in the index"));
  absl::StatusOr<SampleIndex> again = open_file(index.files[k], options);
  if (!again.ok()) return again.status();
  if (again->num_files() != 1) return absl::DataLossError(absl::StrCat(again->num_files(), " files"));
  const uint64_t begin = index.file_begin[k], n = index.file_begin[k + 1] - begin;
  if (again->size() != n) return absl::DataLossError(absl::StrCat(again->size(), " samples, not ", n));
  const SampleSource& was_src = *index.sources[k];
  const SampleSource& now_src = *again->sources[0];
  std::string was_state, now_state;
  was_src.cache_save(was_state);
  now_src.cache_save(now_state);
  if (was_src.layout() != now_src.layout() || was_state != now_state) {
    return absl::DataLossError(absl::StrCat("now ", now_src.describe(), ", was ", was_src.describe()));
  }
  auto known = [](const Shape& s) { return std::none_of(s.begin(), s.end(), [](int64_t d) { return d < 0; }); };
  SampleRef was, now;
  for (uint64_t i = 0; i < n; ++i) {
    index.ref_in_file(begin + i, k, was);
    again->ref_in_file(i, 0, now);
    if (was.item != now.item || was.extents != now.extents || !(was.dtype == now.dtype) ||
        (known(was.shape) && known(now.shape) && was.shape != now.shape)) {
      return absl::DataLossError(absl::StrCat("sample ", i, " now ", shape_str(now.shape), " ", now.dtype.name(),
                                              ", was ", shape_str(was.shape), " ", was.dtype.name()));
    }
  }
  return absl::OkStatus();
}

std::function<absl::Status(uint32_t id)> still_indexed_by_id(const std::vector<SampleIndex>& indices,
                                                             const std::vector<std::vector<uint32_t>>& file_ids,
                                                             const std::vector<FormatOptions>& formats) {
  // FileTable id -> (field, file), made when a file is first asked about
  // (once, whichever reading thread asks first).
  struct FieldsOf {
    std::once_flag made;
    std::vector<std::vector<std::pair<size_t, uint32_t>>> of;
  };
  auto fields = std::make_shared<FieldsOf>();
  return [&indices, &file_ids, &formats, fields](uint32_t id) -> absl::Status {
    std::call_once(fields->made, [&] {
      for (size_t f = 0; f < file_ids.size(); ++f) {
        for (uint32_t k = 0; k < file_ids[f].size(); ++k) {
          if (fields->of.size() <= file_ids[f][k]) fields->of.resize(file_ids[f][k] + 1);
          fields->of[file_ids[f][k]].emplace_back(f, k);
        }
      }
    });
    if (id >= fields->of.size()) return absl::OkStatus();
    for (const auto& [f, k] : fields->of[id]) DLFEED_RETURN_IF_ERROR(still_indexed(indices[f], k, formats[f]));
    return absl::OkStatus();
  };
}

std::shared_ptr<FileTable> make_file_table(const LoaderOptions& options, const std::vector<SampleIndex>& indices,
                                           const std::vector<FormatOptions>& formats,
                                           std::vector<std::vector<uint32_t>>& file_ids,
                                           std::vector<std::string>& file_names) {
  FileTableOptions fto;
  fto.max_open = options.advanced.max_open_files;
  fto.direct = options.io.direct;
  auto files = std::make_shared<FileTable>(fto);
  files->reserve(indices[0].num_files());
  add_files(indices, *files, file_ids, file_names);
  // A file found at its open with only its change time new (rewritten with
  // the mtime set back, or an identity an index cache recorded earlier) is
  // indexed again before any of it is read.
  files->check_reopens_with(still_indexed_by_id(indices, file_ids, formats));
  files->reindex_reopened(options.advanced.reindex_changed_files);
  return files;
}

absl::Status staging_sources(const std::vector<std::string>& file_names, const FileTable& files,
                             std::vector<staging::Source>& sources, absl::flat_hash_set<uint32_t>& unstageable) {
  sources.resize(file_names.size());
  for (uint32_t id = 0; id < file_names.size(); ++id) {
    struct stat st {};
    if (::stat(file_names[id].c_str(), &st) != 0) return io_error(file_names[id], "stat for staging", errno);
    const FileIdentity now = identity_of(st);
    sources[id] = {file_names[id], static_cast<uint64_t>(st.st_size), now};
    const std::optional<FileIdentity> indexed = files.identity(id);
    if (indexed && !same_file_as_known(*indexed, now)) unstageable.insert(id);
  }
  return absl::OkStatus();
}

void add_files(const std::vector<SampleIndex>& indices, FileTable& files, std::vector<std::vector<uint32_t>>& file_ids,
               std::vector<std::string>& file_names) {
  for (const SampleIndex& idx : indices) {
    std::vector<uint32_t> ids;
    const bool identified = idx.has_identities();  // then no stat per file (an MPI rank given the index)
    for (size_t f = 0; f < idx.files.size(); ++f) {
      const std::string& path = idx.files[f];
      if (identified) {
        ids.push_back(files.add(path, idx.identities[f]));
      } else if (is_object_url(path)) {
        // The version indexed (what its listing or HEAD said, remembered by
        // the store: no request): the backend reads that one or fails.
        absl::StatusOr<FileIdentity> id = detail::object_identity(path);
        ids.push_back(id.ok() ? files.add(path, *id) : files.add(path));
      } else {
        ids.push_back(files.add(path));
      }
      if (file_names.size() <= ids.back()) file_names.resize(ids.back() + 1);
      file_names[ids.back()] = path;
    }
    file_ids.push_back(std::move(ids));
  }
}

absl::StatusOr<std::vector<std::shared_ptr<ObjectStore>>> use_object_cache(const LoaderOptions& options) {
  std::vector<std::shared_ptr<ObjectStore>> bounded;
  if (options.object_cache.max_bytes != 0 && options.object_cache.dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cache_limit ", options.object_cache.max_bytes,
                                                   " bounds the folder of cache_dir, which is not given: give "
                                                   "cache_dir (--cache-dir DIR) too, or no cache_limit"));
  }
  // Set either way: a loader without a cache uses none, whatever an earlier one did.
  for (const std::string& p : options.paths) {
    if (!is_object_url(p)) continue;
    DLFEED_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, object_store_for(p));
    DLFEED_RETURN_IF_ERROR(store->use_cache(options.object_cache));
    if (options.object_cache.max_bytes == 0 || options.object_cache.dir.empty()) continue;
    if (std::find(bounded.begin(), bounded.end(), store) == bounded.end()) bounded.push_back(std::move(store));
  }
  return bounded;
}

std::shared_ptr<ObjectUses> object_uses(OrderCursor cursor, uint64_t epoch, uint64_t first_batch, uint32_t batch_size,
                                        const std::vector<SampleIndex>& indices, size_t max_uses) {
  // Each field's files as objects (numbered over all fields), or none.
  constexpr uint32_t kFile = ~0u;
  std::vector<std::string> urls;
  absl::flat_hash_map<std::string, uint32_t> numbers;
  std::vector<std::vector<uint32_t>> object_of(indices.size());
  for (size_t f = 0; f < indices.size(); ++f) {
    for (const std::string& path : indices[f].files) {
      if (!is_object_url(path)) {
        object_of[f].push_back(kFile);
        continue;
      }
      const auto [it, added] = numbers.emplace(path, static_cast<uint32_t>(urls.size()));
      if (added) urls.push_back(path);
      object_of[f].push_back(it->second);
    }
  }
  if (urls.empty() || cursor.remaining() * indices.size() > max_uses || batch_size == 0) return nullptr;
  // Only for an order that uses samples again within the epoch (more than
  // its padding, 1 in 100): when each is used once, what is kept once full
  // is the least any cache fetches again (in bytes, each epoch), and ranking
  // 1 MiB pieces by the next of their samples' uses would let go of pieces
  // the next epoch reads for pieces read once more in this one.
  const uint64_t samples = indices.empty() ? 0 : indices[0].size();
  std::vector<uint64_t> ids(4096);
  {
    OrderCursor look = cursor;
    std::vector<bool> seen(samples, false);
    uint64_t again = 0;
    while (!look.done()) {
      const size_t n = look.next(std::span<uint64_t>(ids));
      if (n == 0) break;
      for (size_t i = 0; i < n; ++i) {
        if (ids[i] >= samples) continue;
        again += seen[ids[i]] ? 1 : 0;
        seen[ids[i]] = true;
      }
      if (again * 100 > cursor.remaining()) break;
    }
    if (again * 100 <= cursor.remaining()) return nullptr;
  }
  auto uses = std::make_shared<ObjectUses>(std::move(urls), epoch, (cursor.size() + batch_size - 1) / batch_size);
  const uint64_t start = cursor.position();
  SampleRef ref;
  while (!cursor.done()) {
    const uint64_t at = cursor.position();
    const size_t n = cursor.next(std::span<uint64_t>(ids));
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t batch = first_batch + (at + i - start) / batch_size;
      for (size_t f = 0; f < indices.size(); ++f) {
        indices[f].ref(ids[i], ref);
        const uint32_t object = ref.file < object_of[f].size() ? object_of[f][ref.file] : kFile;
        if (object == kFile) continue;
        for (const Extent& e : ref.extents) uses->add(object, e.offset, e.length, batch);
      }
    }
    if (uses->size() > max_uses) return nullptr;
  }
  uses->finish();
  return uses;
}

absl::StatusOr<bool> use_object_store(LoaderOptions& options, const std::vector<SampleIndex>& indices) {
  size_t urls = 0, all = 0;
  const std::string* url = nullptr;
  const std::string* file = nullptr;
  for (const SampleIndex& idx : indices) {
    for (const std::string& p : idx.files) {
      ++all;
      if (is_object_url(p)) {
        ++urls;
        url = &p;
      } else {
        file = &p;
      }
    }
  }
  if (urls == 0) return false;
  if (urls != all) {
    return absl::InvalidArgumentError(absl::StrCat("loader: ", *url, " is an object and ", *file,
                                                   " a file: one loader reads files or objects, not both"));
  }
  if (!options.stage.dir.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("loader: stage.dir copies files; ", *url, " is an object (staging objects is not built yet)"));
  }
  DLFEED_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, object_store_for(*url));
  const bool own_backend = !options.advanced.io_factory;
  if (own_backend) {
    options.advanced.io_factory = [store](std::shared_ptr<FileTable> files, IoOptions io) {
      return store->make_backend(std::move(files), io);
    };
  }
  options.advanced.fadvise_willneed = false;
  // A request costs a round trip and the server's time whatever its size:
  // reads go whole up to 8 MiB (a merged run, a large sample's pieces), not
  // in the small pieces that spread page-cache copies over cores. Only
  // where the read sizes are the defaults: a caller's own stand.
  prefetch::CoalesceOptions& co = options.advanced.coalesce;
  const prefetch::CoalesceOptions d;
  if (co.max_read == d.max_read && co.split_above == d.split_above && co.large_above == d.large_above &&
      co.large_piece == d.large_piece) {
    co.max_read = kObjectReadBytes;
    co.split_above = 0;
    co.large_above = 0;
  }
  return own_backend;
}

absl::Status made_here(pid_t made_in) {
  if (made_in == ::getpid()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("loader: made in process ", made_in, ", used in process ", ::getpid(),
                   " (a child of fork()), where its threads do not exist: make a new Loader in this process"));
}

std::string read_prefetch(const pipeline::MachineDefaults& d) {
  return absl::StrCat("depth:", d.read_depth, ",budget:", d.read_budget);
}

bool any_split_sources(const std::vector<SampleIndex>& indices) {
  for (const auto& field : detail::split_sources(indices)) {
    for (const SplitRecords* s : field) {
      if (s != nullptr) return true;
    }
  }
  return false;
}

uint64_t mean_batch_bytes(const std::vector<SampleIndex>& indices, uint32_t batch_size) {
  uint64_t bytes = 0;
  for (const SampleIndex& index : indices) {
    const uint64_t n = index.size();
    if (n > 0) bytes += index.total_read_bytes() / n * batch_size;
  }
  return bytes;
}

absl::Status check_limits(const LoaderOptions& options) {
  // Threads beyond what any machine runs: a clear error, not a process the
  // system cannot give its threads (an abort, or a hang in oneTBB).
  for (auto [value, name, most] : {std::tuple{options.threads, "threads (--threads)", 1024u},
                                   std::tuple{options.io.threads, "io.threads (--io-threads)", 1024u},
                                   std::tuple{options.advanced.io_engines, "io_engines (--io-engines)", 256u}}) {
    if (value > most) {
      return absl::InvalidArgumentError(absl::StrCat("loader: ", name, " is at most ", most, ", not ", value));
    }
  }
  // Read pieces below a page: a request (and its buffer) per byte or few
  // (a large_piece of 1 read 7 MB in minutes, at gigabytes of memory).
  const prefetch::CoalesceOptions& co = options.advanced.coalesce;
  for (auto [value, on, name] :
       {std::tuple{co.max_read, true, "max_read (--max-read)"},
        std::tuple{co.split_piece, co.split_above != 0, "split_piece (--split-piece)"},
        std::tuple{co.split_piece_cold, co.split_above != 0, "split_piece_cold (--split-piece-cold)"},
        std::tuple{co.large_piece, co.large_above != 0, "large_piece (--large-piece)"}}) {
    if (on && value != 0 && value < 4096) {
      return absl::InvalidArgumentError(absl::StrCat("loader: ", name, " is 0 or at least 4096 bytes, not ", value));
    }
  }
  return absl::OkStatus();
}

std::vector<uint32_t> first_use_order(OrderCursor cursor, const FileLayout& layout,
                                      const std::vector<std::vector<uint32_t>>& file_ids) {
  const uint64_t files = layout.file_begin.empty() ? 0 : layout.file_begin.size() - 1;
  std::vector<uint8_t> seen(files, 0);
  std::vector<uint32_t> out;
  uint64_t left = files;
  std::vector<uint64_t> ids(4096);
  while (left > 0 && !cursor.done()) {
    const size_t n = cursor.next(std::span<uint64_t>(ids));
    if (n == 0) break;
    for (size_t i = 0; i < n && left > 0; ++i) {
      const uint64_t file = layout.file_of(ids[i]);
      if (file >= files || seen[file]) continue;
      seen[file] = 1;
      --left;
      for (const std::vector<uint32_t>& field : file_ids) {
        if (file < field.size()) out.push_back(field[file]);
      }
    }
  }
  return out;
}

std::string resident_reason_now(const std::string& reason, const ResidentFiles* held) {
  if (held == nullptr) return reason;
  std::string out = reason;
  if (!held->over()) absl::StrAppend(&out, " (", held->files_held(), " of ", held->files(), " held so far)");
  if (const size_t n = held->files_dropped(); n > 0) {
    absl::StrAppend(&out, "; ", n, " changed in place since they were read, read from their source since");
  }
  if (const absl::Status why = held->failure(); !why.ok() && !absl::IsCancelled(why)) {
    absl::StrAppend(&out, "; some are read from their source instead: ", why.message());
  }
  return out;
}

}  // namespace dlfeed::inline DLFEED_ABI::detail
