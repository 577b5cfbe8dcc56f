// SPDX-License-Identifier: Apache-2.0
// HDF5 files that are objects of a store (s3://bucket/key): libhdf5 reads
// their metadata (superblock, object headers, chunk B-trees) through a
// read-only virtual file driver of dlfeed's whose reads are the store's
// ranged reads (dlfeed/io/object_store.h: the same client, credentials,
// retries and node-local cache as every other object), kept in blocks so
// that its many small metadata reads are few requests. The samples' bytes
// are then read by the loader's engines as for any other format.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "dlfeed/detail/export.h"
#include "format/hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI::detail::h5 {

/// A file-access property list for `path`: the object driver for a URL
/// (is_object_url), libhdf5's default (with file locking off where the file
/// system has none) for a file. Needs the HDF5 lock.
absl::StatusOr<Hid> file_access_for(const std::string& path);

/// Why the object driver's last open failed on this thread (the store's own
/// error, with its code, naming the object), or OK when it did not:
/// libhdf5's error stack only says that the open failed.
absl::Status object_open_error();

/// Bytes [offset, offset + out.size()) of the object `url` through the
/// driver's blocks (what libhdf5 reads next is then in them). Needs the HDF5
/// lock.
absl::Status read_object(const std::string& url, uint64_t offset, std::span<std::byte> out);

}  // namespace dlfeed::detail::h5
