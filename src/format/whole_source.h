// SPDX-License-Identifier: Apache-2.0
// Private: every sample of a source read as one (SampleAxis::kNone for the
// formats whose sources cut samples along axis 0 themselves: HDF5).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dlfeed/sample.h"
#include "format/index_codec.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// `inner`'s samples as one sample of shape (n,) + theirs: the whole dataset.
std::unique_ptr<SampleSource> whole_of(std::unique_ptr<SampleSource> inner);

/// The cache tag of a whole source over a source tagged `inner_tag`, and back
/// (an empty string when `tag` is not one).
std::string whole_tag(const std::string& inner_tag);
std::string inner_tag_of(std::string_view tag);

}  // namespace dlfeed::detail
