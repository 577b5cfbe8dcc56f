// SPDX-License-Identifier: Apache-2.0
// detail::copy_large: the same bytes as memcpy, whatever the alignment of
// either side and the length around the streaming threshold and the 64-byte
// lines (head, whole lines, tail), and nothing written outside the range.
#include "io/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace dlfeed::detail {
namespace {

TEST(CopyLarge, SameBytesAsMemcpyAtAnyAlignmentAndLength) {
  const size_t T = kStreamCopyAtLeast;
  std::vector<uint8_t> src(T + 4096);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  std::vector<uint8_t> dst(T + 4096);
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, T - 1, T, T + 1, T + 63, T + 64, T + 1000}) {
    for (size_t so : {0, 1, 17, 64}) {
      for (size_t dof : {0, 3, 32, 63}) {
        if (so + n > src.size() || dof + n + 1 > dst.size()) continue;
        std::memset(dst.data(), 0xEE, dst.size());
        copy_large(dst.data() + dof, src.data() + so, n);
        ASSERT_EQ(std::memcmp(dst.data() + dof, src.data() + so, n), 0) << n << " " << so << " " << dof;
        for (size_t i = 0; i < dof; ++i) ASSERT_EQ(dst[i], 0xEE) << "byte before the range, " << n;
        for (size_t i = dof + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE) << "byte after the range, " << n;
      }
    }
  }
}

}  // namespace
}  // namespace dlfeed::detail
