// SPDX-License-Identifier: Apache-2.0
// The Python view of a batch, shared by bind_batch.cpp and bind_loader.cpp.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "common.h"
#include "dlfeed/batch/batch.h"

namespace dlfeed::python {

/// Per field: the sample shape to present (Loader(shapes=...)), or none.
using Reshape = std::vector<std::optional<Shape>>;

/// A batch as Python holds it. Every numpy array, Tensor and DLPack capsule
/// made from it holds its own copy of `batch`, so the loader recycles the
/// memory only once the last of them is gone.
struct PyBatch {
  std::shared_ptr<const Batch> batch;
  std::shared_ptr<const Reshape> reshape;  // may be null
};

}  // namespace dlfeed::python
