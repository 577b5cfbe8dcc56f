// SPDX-License-Identifier: Apache-2.0
// Private: the names a folder goes by (as given, resolved, under a bind
// mount), for the DLIO layout's test and for folder walks.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// The real path of `p` ("" when it cannot be resolved).
std::string real_path(const std::string& p);

/// `inner` is `outer` or inside it, component by component (absolute paths).
bool path_within(absl::string_view inner, absl::string_view outer);

/// The folder `folder` is, whatever the spelling of the path to it ("",
/// ".", "..", a relative path, symbolic links): its real path, or `folder`
/// itself when it cannot be resolved. Remembered per thread for the last
/// folder asked while a stat of it finds the same directory (a folder's
/// files are indexed one after another).
std::string real_folder(const std::string& folder);

/// real_folder(folder), and where the folder is (inside) a bind mount, the
/// path its file system knows it by (/proc/self/mountinfo's root of the
/// mount): a DLIO train/ folder bind-mounted at /mnt/x is still train/.
/// For names only: the result may not be reachable from this process.
std::string source_folder(const std::string& folder);

}  // namespace dlfeed::detail
