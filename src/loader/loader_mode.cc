// SPDX-License-Identifier: Apache-2.0
// The loader's switches (LoaderOptions::resident, unpack) as text: how
// Python and the command line name them.
#include "absl/strings/str_cat.h"
#include "dlfeed/loader.h"

namespace dlfeed::inline DLFEED_ABI {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kAuto: return "auto";
    case Mode::kOn: return "on";
    case Mode::kOff: return "off";
  }
  return "?";
}

absl::StatusOr<Mode> parse_mode(absl::string_view text, absl::string_view what) {
  if (text == "auto") return Mode::kAuto;
  if (text == "on") return Mode::kOn;
  if (text == "off") return Mode::kOff;
  return absl::InvalidArgumentError(absl::StrCat("loader: ", what, " is auto, on or off, not '", text, "'"));
}

}  // namespace dlfeed
