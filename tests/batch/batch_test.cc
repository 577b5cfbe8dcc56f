// SPDX-License-Identifier: Apache-2.0
// BufferPool: reuse without hiding memory from the loader's budget. Batch:
// move-only, its fields' spans valid after a move.
#include "dlfeed/batch/batch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>

namespace dlfeed {
namespace {

// A copy would keep spans into the original's storage.
static_assert(!std::is_copy_constructible_v<Batch>);
static_assert(!std::is_copy_assignable_v<Batch>);
static_assert(std::is_nothrow_move_constructible_v<Batch>);
static_assert(std::is_nothrow_move_assignable_v<Batch>);

TEST(Batch, FieldsStayValidAfterMoves) {
  Batch a;
  a.sample_ids = {7, 9};
  a.storage.emplace_back(16);
  for (size_t i = 0; i < 16; ++i) a.storage[0][i] = static_cast<std::byte>(i);
  BatchField f;
  f.name = "x";
  f.dtype = DType::u8();
  f.shape = {2, 8};
  f.bytes = std::span<const std::byte>(a.storage[0].data(), 16);
  f.offsets = {0, 8, 16};
  a.fields.push_back(std::move(f));
  const std::byte* data = a.storage[0].data();

  Batch b(std::move(a));
  Batch c;
  c = std::move(b);
  ASSERT_EQ(c.storage.size(), 1u);
  EXPECT_EQ(c.storage[0].data(), data);  // the buffer moved, not copied
  const BatchField* x = c.field("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->bytes.data(), c.storage[0].data());
  EXPECT_EQ(c.nbytes(), 16u);
  EXPECT_EQ(x->sample(1)[3], std::byte{11});
}

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

// Buffers of 4 MiB and more are huge-page aligned mappings of whole 2 MiB
// pages; every byte asked for is writable, and the next buffer of that size
// is a separate mapping (nothing overlaps the trimmed head or tail).
TEST(BufferPool, LargeBuffersAreWholeHugePages) {
  for (size_t n : {size_t{4} << 20, (size_t{5} << 20) + 1, size_t{64} << 20}) {
    void* a = allocate_buffer(n);
    void* b = allocate_buffer(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (2 << 20), 0u) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % (2 << 20), 0u) << n;
    auto* pa = static_cast<unsigned char*>(a);
    auto* pb = static_cast<unsigned char*>(b);
    for (size_t i = 0; i < n; i += 4093) pa[i] = static_cast<unsigned char>(i * 7);
    pa[n - 1] = 0x5a;
    for (size_t i = 0; i < n; i += 4093) pb[i] = 0xff;
    pb[n - 1] = 0xa5;
    for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(pa[i], static_cast<unsigned char>(i * 7)) << n << " at " << i;
    EXPECT_EQ(pa[n - 1], 0x5a);
    free_buffer(a, n);
    free_buffer(b, n);
  }
}

}  // namespace
}  // namespace dlfeed
