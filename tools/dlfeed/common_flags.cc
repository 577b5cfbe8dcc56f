// Flags shared by several commands (one Abseil flag per name per binary).
#include <cstdint>

#include "absl/flags/flag.h"

ABSL_FLAG(uint64_t, files, 4, "Number of files (generate: training files to write; order: synthetic layout)");
ABSL_FLAG(uint64_t, samples_per_file, 16, "Samples in each file (generate; order's synthetic layout)");
ABSL_FLAG(uint64_t, seed, 42, "Seed: generate's content, order's shuffles. Same seed, same result");
ABSL_FLAG(int64_t, limit, -1,
          "Print at most this many samples/ids (inspect: -1 means 10 per file in text, all in JSON; "
          "order: -1 means all)");
