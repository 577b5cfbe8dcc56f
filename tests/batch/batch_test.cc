// BufferPool: reuse without hiding memory from the loader's budget.
#include "dlfeed/batch/batch.h"

#include <gtest/gtest.h>

namespace dlfeed {
namespace {

TEST(BufferPool, ReusesAnExactFit) {
  BufferPool pool;
  ByteBuffer a = pool.take(1 << 20);
  const std::byte* p = a.data();
  pool.give(std::move(a));
  ByteBuffer b = pool.take(1 << 20);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), size_t{1} << 20);
  EXPECT_EQ(pool.reuses(), 1u);
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

TEST(BufferPool, EmptyRequestTakesNothingFromTheCache) {
  BufferPool pool;
  pool.give(pool.take(4 << 20));
  const uint64_t cached = pool.cached_bytes();
  ASSERT_GE(cached, uint64_t{4} << 20);
  ByteBuffer b = pool.take(0);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(pool.cached_bytes(), cached);
}

// The budget counts the bytes asked for: a small request must not walk off
// with a large cached buffer (its memory would be resident but uncounted).
TEST(BufferPool, SmallRequestDoesNotTakeAMuchLargerBuffer) {
  BufferPool pool;
  pool.give(pool.take(4 << 20));
  ByteBuffer small = pool.take(1024);
  EXPECT_LT(small.capacity(), size_t{2048} + 1);
  EXPECT_EQ(pool.cached_bytes(), uint64_t{4} << 20);
  // Within twice the size a cached buffer is reused.
  ByteBuffer half = pool.take(2 << 20);
  EXPECT_EQ(half.capacity(), size_t{4} << 20);
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

TEST(BufferPool, TrimFreesLargestFirst) {
  BufferPool pool;
  pool.give(pool.take(1 << 20));
  pool.give(pool.take(3 << 20));
  pool.trim_to(2 << 20);
  EXPECT_EQ(pool.cached_bytes(), uint64_t{1} << 20);
}

TEST(BufferPool, BuffersAre64ByteAligned) {
  BufferPool pool;
  for (size_t n : {size_t{1}, size_t{100}, size_t{4096}, size_t{300000}}) {
    ByteBuffer b = pool.take(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << n;
  }
}

}  // namespace
}  // namespace dlfeed
