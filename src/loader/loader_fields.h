// SPDX-License-Identifier: Apache-2.0
// Private: the first part of Loader::create, before the I/O engines and the
// stages: each field's index opened, and every field's files in one FileTable.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/loader.h"
#include "dlfeed/order/order.h"
#include "dlfeed/sample.h"
#include "dlfeed/staging/staging.h"
#include "pipeline/cores.h"
#include "read/resident.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Opens the index of each field options.fields names (none: the one field
/// options.format names), checks that the fields pair sample for sample, and
/// appends each field's name, spec, index and the format options it was
/// indexed with to `field_names`, `field_specs`, `indices` and `formats`.
absl::Status open_fields(const LoaderOptions& options, counters::Counters& cnt, std::vector<std::string>& field_names,
                         std::vector<FieldSpec>& field_specs, std::vector<SampleIndex>& indices,
                         std::vector<FormatOptions>& formats);

/// OK when file `k` of `index` (indexed with `options`) is still described
/// by it: indexed again now, the same source state and the same samples at
/// the same extents, with the same dtypes and (where known before decode)
/// shapes; else what differs, or why it could not be indexed. For a file
/// whose change time alone is new (FileTable::check_open_files).
absl::Status still_indexed(const SampleIndex& index, uint32_t k, const FormatOptions& options);

/// still_indexed() by FileTable id, for FileTable::check_open_files: every
/// field's file with that id (file_ids[field][file]) is indexed again.
std::function<absl::Status(uint32_t id)> still_indexed_by_id(const std::vector<SampleIndex>& indices,
                                                             const std::vector<std::vector<uint32_t>>& file_ids,
                                                             const std::vector<FormatOptions>& formats);

/// Adds every field's files to `files`: appends to `file_ids` each field's
/// FileTable ids (per file), and sets `file_names[id]` to id's path.
void add_files(const std::vector<SampleIndex>& indices, FileTable& files, std::vector<std::vector<uint32_t>>& file_ids,
               std::vector<std::string>& file_names);

/// The loader's FileTable (options.advanced.max_open_files, options.io.direct)
/// with every field's files added (add_files), each reopen that finds only
/// a new change time asking still_indexed_by_id first
/// (FileTable::check_reopens_with: `indices`, `file_ids` and `formats` must
/// outlive its reads).
std::shared_ptr<FileTable> make_file_table(const LoaderOptions& options, const std::vector<SampleIndex>& indices,
                                           const std::vector<FormatOptions>& formats,
                                           std::vector<std::vector<uint32_t>>& file_ids,
                                           std::vector<std::string>& file_names);

/// Each file's staging source: file_names[id]'s path, size and identity as
/// every rank of the node finds it now (its copy's name carries them). The
/// ids of files that changed since the loader indexed them
/// (files.identity()) go to `unstageable`: read from the source, never a copy.
absl::Status staging_sources(const std::vector<std::string>& file_names, const FileTable& files,
                             std::vector<staging::Source>& sources, absl::flat_hash_set<uint32_t>& unstageable);

/// The object cache (LoaderOptions::object_cache) for the stores of the
/// paths that are URLs, before they are indexed: headers read from it too.
/// Returns the stores whose cache is bounded (max_bytes), which keep by the
/// loader's ObjectUses (plan_uses).
absl::StatusOr<std::vector<std::shared_ptr<ObjectStore>>> use_object_cache(const LoaderOptions& options);

/// When each piece of each object of the fields' files is used over the
/// epoch `cursor` starts, its first batch `first_batch` (batches of
/// `batch_size`); null when no file is an object, when the order uses no
/// sample again within the epoch (but for 1 in 100), or when the uses
/// would pass `max_uses`.
std::shared_ptr<ObjectUses> object_uses(OrderCursor cursor, uint64_t epoch, uint64_t first_batch, uint32_t batch_size,
                                        const std::vector<SampleIndex>& indices, size_t max_uses);

/// When the fields' files are objects of a store (URLs): its backend reads
/// them (AdvancedOptions::io_factory, unless one is given), with no
/// read-ahead hints to files. Files and URLs in one loader, or staging of
/// objects, are errors. True when the objects are read by the store's own
/// backend (no io_factory was given): they may then be held in memory
/// (LoaderOptions::resident) like files.
absl::StatusOr<bool> use_object_store(LoaderOptions& options, const std::vector<SampleIndex>& indices);
/// The largest read of an object store (coalesce.max_read when the read
/// sizes are left at their defaults): bench/object_store.py measured 2 MiB
/// pieces of 16 MiB samples at 0.74-0.88 of whole-sample GETs.
inline constexpr uint64_t kObjectReadBytes = 8u << 20;

/// FailedPrecondition when this is not process `made_in` (a child of fork():
/// a loader's threads stay in the parent).
absl::Status made_here(pid_t made_in);

/// AdvancedOptions::prefetch "auto" when copying from held files; when
/// reading, the machine's depth and read-ahead budget (pipeline/cores.h).
inline constexpr const char* kHeldPrefetch = "depth:8,budget:16M";
std::string read_prefetch(const pipeline::MachineDefaults& d);

/// Whether any field has records read around their value (TFRecord images,
/// split_reads.h): held or not, the engines copy them and the decode stage
/// checks them, so batches ahead overlap the two as when reading (one 16
/// MiB batch ahead made a held TFRecord dataset slower to load than reading).
bool any_split_sources(const std::vector<SampleIndex>& indices);

/// The bytes read for a batch of `batch_size` samples of every field, on
/// average over the dataset (0 for an empty one).
uint64_t mean_batch_bytes(const std::vector<SampleIndex>& indices, uint32_t batch_size);

/// The FileTable ids of every field's files in the order `cursor` (a copy,
/// run to its end or until every file is seen) first uses them.
std::vector<uint32_t> first_use_order(OrderCursor cursor, const FileLayout& layout,
                                      const std::vector<std::vector<uint32_t>>& file_ids);

/// LoaderStats::resident_reason now: `reason` and, while the files are
/// being held, how many are, and why any is read from its source instead.
std::string resident_reason_now(const std::string& reason, const ResidentFiles* held);

/// Options no machine could run, refused with what they are and may be:
/// thread counts beyond any machine's, read pieces below a page.
absl::Status check_limits(const LoaderOptions& options);

}  // namespace dlfeed::inline DLFEED_ABI::detail
