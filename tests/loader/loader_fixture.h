// SPDX-License-Identifier: Apache-2.0
// What the loader tests share (loader_test.cc, loader_resident_test.cc,
// loader_failure_test.cc): generated datasets of every format, the options
// that read them, and an epoch read with every sample's bytes checked.
#pragma once

#include "dlfeed/loader.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {

using testing::scratch_dir;

struct DatasetCase {
  const char* name;
  FileFormat format;
  bool dlio;
  std::vector<std::string> fields;
};

inline const DatasetCase kDatasets[] = {
    {"npz", FileFormat::kNpz, false, {"x", "y"}},
    {"npz_dlio", FileFormat::kNpz, true, {"x", "y"}},
    {"npy_dlio", FileFormat::kNpy, true, {}},
    {"hdf5", FileFormat::kHdf5, false, {"records", "labels"}},
    {"tfrecord", FileFormat::kTfRecord, false, {"image", "label"}},
};

inline constexpr uint64_t kSeed = 5;
inline const Shape kShape{6, 5};

inline std::string make_dataset(const DatasetCase& c, const std::string& root, uint64_t files = 5,
                                uint64_t per_file = 7) {
  gen::DatasetSpec spec =
      testing::dataset_spec(root + "/" + c.name, c.format, files, per_file, kShape, DType::f32(), kSeed);
  spec.dlio_layout = c.dlio;
  auto written = testing::write_generated(spec);
  EXPECT_TRUE(written.ok()) << written.status();
  return written.ok() ? written->path : "";
}

inline std::string expected_bytes(uint64_t id) { return testing::expected_sample(kSeed, id, DType::f32(), kShape); }

inline LoaderOptions options_for(const DatasetCase& c, const std::string& path) {
  LoaderOptions o;
  o.paths = {path};
  o.fields = c.fields;
  if (c.format == FileFormat::kTfRecord) o.format.feature_dtype = DType::parse("<f4").value();
  o.batch_size = 4;
  o.threads = 2;
  o.resident = Mode::kOff;  // the read path (ResidentDatasets... tests the other)
  return o;
}

// Reads a whole epoch; checks every sample's bytes; returns the ids in order.
inline std::vector<uint64_t> read_epoch(Loader& loader, const DatasetCase& c, uint64_t epoch) {
  std::vector<uint64_t> ids;
  EXPECT_TRUE(loader.start_epoch(epoch).ok());
  while (true) {
    auto b = loader.next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !*b) break;
    const Batch& batch = **b;
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint64_t id = batch.sample_ids[i];
      ids.push_back(id);
      const auto data = batch.fields[0].sample(i);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), expected_bytes(id))
          << c.name << " sample " << id;
      if (batch.fields.size() > 1) {
        int64_t label = -1;
        EXPECT_EQ(batch.fields[1].sample(i).size(), 8u);
        if (batch.fields[1].sample(i).size() != 8) continue;
        std::memcpy(&label, batch.fields[1].sample(i).data(), 8);
        EXPECT_EQ(label, c.dlio ? 0 : gen::sample_label(id)) << c.name << " sample " << id;
      }
    }
    if (!batch.fields[0].ragged()) {
      EXPECT_EQ(batch.fields[0].shape[0], static_cast<int64_t>(batch.size()));
    }
  }
  return ids;
}

inline std::vector<IoKind> backends() {
  std::vector<IoKind> k{IoKind::kSync, IoKind::kThreadPool};
  if (io_uring_available().ok()) k.push_back(IoKind::kIoUring);
  return k;
}

}  // namespace dlfeed
