// SPDX-License-Identifier: Apache-2.0
// The loader's switches (LoaderOptions::resident, unpack) as text: how
// Python and the command line name them; and the machine's memory budget.
#include "absl/strings/str_cat.h"
#include "dlfeed/loader.h"
#include "pipeline/cores.h"

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

MachineBudget machine_memory_budget(uint32_t workers) {
  pipeline::MemoryBudget b = pipeline::process_memory_budget(workers);
  return {b.bytes, std::move(b.why)};
}

}  // namespace dlfeed
