// SPDX-License-Identifier: Apache-2.0
// The loader's tuning flags (I/O backend, prefetch, memory budget, coalescing,
// decode threads), shared by the commands that run the loader (`dlfeed run`,
// `dlfeed dlio`).
#pragma once

#include "command.h"
#include "dlfeed/loader.h"

namespace dlfeed::cli {

/// Sets the I/O, prefetch, memory, coalescing and thread fields of `o` from
/// the flags (throws dlfeed::Error on a bad value). `cold`: the run drops the
/// files' pages to measure the device (--evict), so the dataset is read, not
/// held in memory, unless --resident says otherwise.
void apply_loader_flags(LoaderOptions& o, bool cold);
/// The flags apply_loader_flags() reads (for a command's flag list).
FlagGroup loader_flags();

}  // namespace dlfeed::cli
