// SPDX-License-Identifier: Apache-2.0
// Flags shared by several commands (one Abseil flag per name per binary). A
// flag that sets a loader option defaults to that option's C++ default.
#include <cstdint>

#include <string>

#include "absl/flags/flag.h"
#include "dlfeed/loader.h"
#include "dlfeed/order/order.h"

ABSL_FLAG(uint64_t, files, 4, "Number of files (generate: training files to write; order: synthetic layout)");
ABSL_FLAG(uint64_t, samples_per_file, 16, "Samples in each file (generate; order's synthetic layout)");
ABSL_FLAG(uint64_t, seed, 42, "Seed: generate's content, order's shuffles. Same seed, same result");
ABSL_FLAG(int64_t, limit, -1,
          "Print at most this many samples/ids (inspect: -1 means 10 per file in text, all in JSON; "
          "order: -1 means all)");

// The order (order, run).
ABSL_FLAG(std::string, strategy, dlfeed::OrderSpec{}.strategy,
          "Order strategy: sequential, file_shuffle, local_shuffle, buffered_shuffle, block_shuffle, global_shuffle, "
          "global_feistel");
ABSL_FLAG(uint32_t, rank, 0, "This rank, below --world-size");
ABSL_FLAG(uint32_t, world_size, dlfeed::OrderSpec{}.world_size, "Number of ranks");
ABSL_FLAG(bool, drop_last, dlfeed::OrderSpec{}.drop_last,
          "Equal shards for the ranks by dropping the order's tail (default: pad with its head); a short last "
          "batch is --drop-last-batch");
ABSL_FLAG(uint64_t, buffer_size, dlfeed::OrderParams{}.buffer_size, "buffered_shuffle: shuffle buffer in samples");
ABSL_FLAG(uint64_t, block_size, dlfeed::OrderParams{}.block_size, "block_shuffle: samples per block");
ABSL_FLAG(uint64_t, window, dlfeed::OrderParams{}.window, "block_shuffle: blocks per shuffling window");
ABSL_FLAG(uint64_t, batch_size, dlfeed::LoaderOptions{}.batch_size,
          "Samples per batch (run: the loader's batch; order --stats: for distinct files per batch)");

// Datasets (run, inspect, calibrate).
ABSL_FLAG(std::string, fields, "",
          "Comma-separated fields of a sample (NPZ members, HDF5 datasets, TFRecord features), e.g. x,y, or "
          "NAME=PATTERN fields read from the files a pattern with one '*' matches, paired by what '*' matched "
          "as in x=*_data.npy,y=*_label.npy, or NAME=PATTERN:MEMBER naming the dataset in them too, as in "
          "x=data-*.h5:climate/data. Without it: the one --name/--feature selects (calibrate measures the first "
          "field; inspect shows each)");
// Output files (inspect, calibrate).
ABSL_FLAG(std::string, out, "",
          "Output file: inspect --dump-sample's bytes (- for stdout); calibrate's JSON (default: "
          "DATASET/dlfeed-calibration.json for a folder)");
