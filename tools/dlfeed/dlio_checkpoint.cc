// SPDX-License-Identifier: Apache-2.0
// `dlfeed dlio`'s checkpoints: the files DLIO's checkpointing writes, as zeros.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "dlfeed/error.h"
#include "dlio_internal.h"

namespace dlfeed::cli::dlio {
namespace {

namespace fs = std::filesystem;

/// Writes `bytes` zeros (DLIO's tensors are torch.randint(high=1): zeros).
void write_zeros(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_if_error(absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno))));
  static const std::vector<char> zeros(4 << 20, 0);
  uint64_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, zeros.data(), std::min<uint64_t>(left, zeros.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw_if_error(absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(err))));
    }
    left -= static_cast<uint64_t>(n);
  }
  if (::close(fd) != 0) throw_if_error(absl::InternalError(absl::StrCat(path, ": close failed")));
}

}  // namespace

CheckpointResult checkpoint(const DlioConfig& c, uint64_t epoch, uint64_t step, int rank) {
  CheckpointResult r;
  if (c.checkpoint_type == "rank_zero" && rank != 0) return r;
  const auto t0 = Clock::now();
  std::error_code ec;
  fs::create_directories(c.checkpoint_folder, ec);
  if (ec) throw_if_error(absl::InternalError(absl::StrCat(c.checkpoint_folder, ": mkdir: ", ec.message())));
  const std::string ext = c.framework == "pytorch" ? "pt" : "pb";
  auto put = [&](const std::string& stem, uint64_t bytes) {
    write_zeros((fs::path(c.checkpoint_folder) / absl::StrCat(stem, ".", ext)).string(), bytes);
    ++r.files;
    r.bytes += bytes;
  };
  const std::string tag = absl::StrCat(epoch, "-", step, "-", rank);
  if (c.model_size > 0) put(absl::StrCat("model-", tag), static_cast<uint64_t>(c.model_size));
  uint64_t groups = 0;
  for (int64_t g : c.optimization_groups) groups += static_cast<uint64_t>(std::max<int64_t>(0, g));
  if (!c.optimization_groups.empty()) put(absl::StrCat("optimizer-", tag), 3 * groups);
  uint64_t layer = 0;
  for (int64_t p : c.layer_parameters) layer += static_cast<uint64_t>(std::max<int64_t>(0, p));
  if (!c.layer_parameters.empty() && c.num_layers > 0 && rank % c.pipeline_parallelism == 0) {
    const int64_t layers = c.num_layers + (c.tensor_parallelism > 1 ? c.tensor_parallelism : 0);
    for (int64_t l = 0; l < layers; ++l) put(absl::StrCat("layer-", l, "-", tag), layer);
  }
  r.secs = since(t0);
  return r;
}

}  // namespace dlfeed::cli::dlio
