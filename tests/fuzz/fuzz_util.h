// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets share. Each target feeds one input to one of
// dlfeed's parsers and checks, beyond "no crash, no sanitizer report":
// - an error names the file it is about;
// - an index only points inside its file (every extent within the file's
//   size);
// - reading and decoding a sample either fails with an error naming the file
//   or gives exactly the bytes its shape and dtype announce.
// A violated property aborts (a finding, like a crash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "dlfeed/sample.h"

namespace dlfeed::fuzz {

/// Writes `data` to `name` in this process's scratch folder (under $TMPDIR
/// or /tmp) and returns the path. The folder is removed at exit.
std::string write_input(const std::string& name, const uint8_t* data, size_t size);
/// The scratch folder.
const std::string& scratch();

/// Aborts with `what` and the status when `st` is an error not naming `path`.
void check_error_names(const absl::Status& st, const std::string& path, const char* what);

/// The index checks above, for a single-file index of `path` (`size` bytes),
/// reading at most `max_samples` samples (spread over the index).
void check_index(const SampleIndex& index, const std::string& path, uint64_t size, size_t max_samples = 16);

/// Aborts with a message (a finding).
[[noreturn]] void fail(const std::string& message);

}  // namespace dlfeed::fuzz
