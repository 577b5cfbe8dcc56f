// SPDX-License-Identifier: Apache-2.0
// `dlfeed order`: prints one rank's sample order for one epoch, or its
// shuffle-quality figures (--stats).
#include <cstdint>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "common_format.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "dlfeed/order/order.h"
#include "dlfeed/order/quality.h"

// --files, --samples-per-file, --seed and --limit are shared with other
// commands (common_flags.cc): the synthetic layout, the seed, and how many ids to print.

ABSL_FLAG(std::string, dataset, "",
          "take the file boundaries of this file or folder (read as the dataset flags say); without it the "
          "layout is --files x --samples-per-file");
ABSL_FLAG(uint64_t, epoch, 0, "epoch");
ABSL_FLAG(bool, stats, false, "print quality figures of the rank's order instead of the ids");

namespace {

dlfeed::FileLayout layout_from_flags() {
  const std::string dataset = absl::GetFlag(FLAGS_dataset);
  if (!dataset.empty()) {
    // The shared --format/--name/--axis/... flags of common_format.cc apply.
    const auto options = dlfeed::value_or_throw(dlfeed::cli::format_options_from_flags());
    auto index = dlfeed::value_or_throw(dlfeed::open_dataset({dataset}, options));
    return dlfeed::FileLayout::of(index);
  }
  const uint64_t files = absl::GetFlag(FLAGS_files);
  const uint64_t per = absl::GetFlag(FLAGS_samples_per_file);
  if (files == 0 || per == 0) {
    throw dlfeed::Error(
        absl::InvalidArgumentError("give --dataset PATH, or --files N and --samples-per-file M (both >= 1)"));
  }
  if (per > (UINT64_MAX - 1) / files) {
    throw dlfeed::Error(absl::InvalidArgumentError(absl::StrCat("--files ", files, " x --samples-per-file ", per,
                                                                ": more samples than a 64-bit id counts (at most ",
                                                                UINT64_MAX - 1, ")")));
  }
  const auto too_many = [files] {
    return dlfeed::Error(
        absl::ResourceExhaustedError(absl::StrCat("--files ", files, ": the layout keeps 8 bytes a file (", files,
                                                  " files), more than this machine gave; "
                                                  "give fewer --files (and more --samples-per-file)")));
  };
  try {
    return dlfeed::FileLayout::uniform(files, per);
  } catch (const std::bad_alloc&) {  // the layout keeps each file's first id
    throw too_many();
  } catch (const std::length_error&) {
    throw too_many();
  }
}

int run_order(const std::vector<std::string>& args) {
  if (!args.empty()) {
    throw dlfeed::Error(absl::InvalidArgumentError(
        absl::StrCat("unexpected arguments: ", absl::StrJoin(args, " "), " (use --dataset PATH)")));
  }
  const dlfeed::FileLayout layout = layout_from_flags();
  dlfeed::OrderSpec spec = dlfeed::value_or_throw(dlfeed::cli::order_spec_from_flags());
  spec.epoch = absl::GetFlag(FLAGS_epoch);
  auto cursor = dlfeed::value_or_throw(dlfeed::OrderCursor::create(layout, spec));

  uint64_t n = cursor.size();
  const int64_t limit = absl::GetFlag(FLAGS_limit);
  if (limit < -1) {
    throw dlfeed::Error(absl::InvalidArgumentError(absl::StrCat("--limit ", limit, ": 0 or more, or -1 for all")));
  }
  if (limit >= 0 && static_cast<uint64_t>(limit) < n) n = static_cast<uint64_t>(limit);

  if (absl::GetFlag(FLAGS_stats)) {
    std::vector<uint64_t> ids(n);
    cursor.next(std::span<uint64_t>(ids));
    const auto stats = dlfeed::score(ids, layout, absl::GetFlag(FLAGS_batch_size));
    std::string out =
        absl::StrCat("strategy: ", spec.strategy, "\nseed: ", spec.seed, "\nepoch: ", spec.epoch, "\nrank: ", spec.rank,
                     "\nworld_size: ", spec.world_size, "\nsamples: ", layout.num_samples(),
                     "\nfiles: ", layout.num_files(), "\nrank_length: ", cursor.size(), "\n");
    out += dlfeed::format_stats(stats);
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  std::vector<uint64_t> chunk(1 << 16);
  std::string out;
  while (n > 0) {
    const size_t got = cursor.next(std::span<uint64_t>(chunk).first(std::min<uint64_t>(n, chunk.size())));
    n -= got;
    out.clear();
    for (size_t k = 0; k < got; ++k) absl::StrAppend(&out, chunk[k], "\n");
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (got == 0) break;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

std::vector<dlfeed::cli::FlagGroup> order_command_flags() {
  using dlfeed::cli::flag_group;
  return {flag_group("", FLAGS_dataset, FLAGS_files, FLAGS_samples_per_file, FLAGS_epoch, FLAGS_limit, FLAGS_stats,
                     FLAGS_batch_size),
          dlfeed::cli::order_flags(), dlfeed::cli::format_flags()};
}

}  // namespace

DLFEED_COMMAND(order, "print a rank's sample order for an epoch, or its shuffle quality (--stats)", "", run_order,
               order_command_flags);
