// SPDX-License-Identifier: Apache-2.0
// TFRecord framing and CRC32C: known vectors, the hardware and portable CRC agree, framing errors.
#include "tfrecord_fixture.h"

namespace dlfeed {
namespace {

// ---- CRC32C ----

TEST(Crc32cTest, KnownVectorsPortableAndHardware) {
  const std::string digits = "123456789";
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  std::vector<uint8_t> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<uint8_t>(i);
  struct Impl {
    const char* name;
    uint32_t (*fn)(uint32_t, const void*, size_t);
  };
  std::vector<Impl> impls = {{"portable", detail::crc32c_extend_portable}, {"dispatch", detail::crc32c_extend}};
  if (detail::crc32c_hardware_available()) {
    impls.push_back({"hardware", detail::crc32c_extend_hardware});
    impls.push_back({"chains", detail::crc32c_extend_chains});
  } else {
    std::printf("note: no SSE4.2 crc32 on this CPU; hardware path not tested\n");
  }
  for (const Impl& impl : impls) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.fn(0, digits.data(), digits.size()), 0xE3069283u);
    EXPECT_EQ(impl.fn(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(impl.fn(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(impl.fn(0, ascending.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(impl.fn(0, nullptr, 0), 0u);
    // Extending in pieces equals one pass.
    EXPECT_EQ(impl.fn(impl.fn(0, digits.data(), 4), digits.data() + 4, 5), 0xE3069283u);
  }
}

TEST(Crc32cTest, HardwareEqualsPortableOnEveryLengthAndAlignment) {
  if (!detail::crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2";
  std::mt19937 rng(1);
  std::vector<uint8_t> buf(1100);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; n + start <= buf.size(); n += (n < 80 ? 1 : 37)) {
      ASSERT_EQ(detail::crc32c_extend_hardware(0x1234, buf.data() + start, n),
                detail::crc32c_extend_portable(0x1234, buf.data() + start, n))
          << "start " << start << " n " << n;
    }
  }
}

// The hardware path runs three chains over 24 KiB and 768-byte blocks and
// combines them: lengths on and around each block boundary, at every
// alignment, equal the one-chain table loop.
TEST(Crc32cTest, HardwareEqualsPortableAcrossThreeWayBlocks) {
  if (!detail::crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2 and PCLMUL";
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(200000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const size_t big = 3 * 8192, small = 3 * 256;
  for (size_t start = 0; start < 9; ++start) {
    for (size_t base : {small, 2 * small, big, big + small, 2 * big, 6 * big + 5 * small, size_t{150528}}) {
      for (size_t n : {base - 9, base - 1, base, base + 1, base + 8, base + 63}) {
        ASSERT_EQ(detail::crc32c_extend_chains(0xdeadbeef, buf.data() + start, n),
                  detail::crc32c_extend_portable(0xdeadbeef, buf.data() + start, n))
            << "start " << start << " n " << n;
      }
    }
  }
  // Extending in uneven pieces equals one pass.
  const uint32_t whole = detail::crc32c(buf.data(), buf.size());
  uint32_t pieces = 0;
  for (size_t at = 0, step = 1; at < buf.size(); at += step, step = step * 3 + 1) {
    pieces = detail::crc32c_extend(pieces, buf.data() + at, std::min(step, buf.size() - at));
  }
  EXPECT_EQ(pieces, whole);
  EXPECT_EQ(whole, detail::crc32c_extend_portable(0, buf.data(), buf.size()));
}

// Where the CPU has AVX-512 and VPCLMULQDQ, 1 KiB and more are folded 256
// bytes at a time, then 64, and the last 64 finished with crc32; from 4 KiB
// (on AMD, and here on every CPU) three crc32 chains run beside the folds over
// the buffer's end, in steps of 376 bytes: lengths on and around each of those steps, at every alignment,
// with a nonzero starting CRC (xored into the first lanes), equal the table
// loop; so do all-zero and all-one buffers, whose lanes fold to zero or repeat.
TEST(Crc32cTest, WideFoldEqualsPortable) {
  if (!detail::crc32c_wide_available()) GTEST_SKIP() << "no AVX-512 VPCLMULQDQ on this CPU";
  std::mt19937 rng(11);
  std::vector<uint8_t> buf(160000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t base : {size_t{1024}, size_t{1088}, size_t{1280}, size_t{1536}, size_t{4096}, size_t{4096 + 376},
                        size_t{9999}, size_t{150528}}) {
      for (size_t n : {base - 1, base, base + 1, base + 7, base + 8, base + 63, base + 64, base + 255}) {
        for (uint32_t init : {0u, 0xdeadbeefu}) {
          const uint32_t want = detail::crc32c_extend_portable(init, buf.data() + start, n);
          ASSERT_EQ(detail::crc32c_extend_hardware(init, buf.data() + start, n), want)
              << "start " << start << " n " << n << " init " << init;
          for (detail::crc32c_impl::Path path :
               {detail::crc32c_impl::Path::kFolds, detail::crc32c_impl::Path::kFused}) {
            ASSERT_EQ(detail::crc32c_extend_by(path, init, buf.data() + start, n), want)
                << "path " << static_cast<int>(path) << " start " << start << " n " << n << " init " << init;
          }
        }
      }
    }
  }
  for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
    const std::vector<uint8_t> same(50000, fill);
    const uint32_t want = detail::crc32c_extend_portable(7, same.data(), same.size());
    EXPECT_EQ(detail::crc32c_extend_hardware(7, same.data(), same.size()), want);
    EXPECT_EQ(detail::crc32c_extend_by(detail::crc32c_impl::Path::kFolds, 7, same.data(), same.size()), want);
    EXPECT_EQ(detail::crc32c_extend_by(detail::crc32c_impl::Path::kFused, 7, same.data(), same.size()), want);
  }
}

// crc32c_combine joins two parts' CRCs as one pass over both would give,
// through the hardware shift and the portable table alike, for parts of
// every length class (0-7 bytes go through crc32 over zeros, longer ones
// through the carry-less table).
TEST(Crc32cTest, CombineEqualsOnePass) {
  std::mt19937 rng(13);
  std::vector<uint8_t> buf(310000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t a : {size_t{0}, size_t{1}, size_t{5}, size_t{8}, size_t{100}, size_t{4096}, size_t{150000}}) {
    for (size_t b : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{64},
                     size_t{1000}, size_t{149999}, size_t{150528}}) {
      const uint32_t whole = detail::crc32c(buf.data(), a + b);
      const uint32_t ca = detail::crc32c(buf.data(), a), cb = detail::crc32c(buf.data() + a, b);
      EXPECT_EQ(detail::crc32c_combine(ca, cb, b), whole) << "a " << a << " b " << b;
      EXPECT_EQ(detail::crc32c_shift_portable(ca, b) ^ cb, whole) << "a " << a << " b " << b;
    }
  }
  // A shift past 2^32 bytes: the portable table and the hardware agree.
  for (uint64_t n : {uint64_t{1} << 33, (uint64_t{1} << 40) + 12345}) {
    EXPECT_EQ(detail::crc32c_shift(0x9abcdef0u, n), detail::crc32c_shift_portable(0x9abcdef0u, n)) << n;
  }
}

// ---- framing ----

TEST(FramingTest, MaskedCrcAndTensorFlowVectors) {
  EXPECT_EQ(tfrecord::mask_crc(0), 0xa282ead8u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(tfrecord::unmask_crc(tfrecord::mask_crc(c)), c);
  // tf.io.TFRecordWriter: write(b"hello"); write(b"").
  const auto tf = from_hex(
      "0500000000000000eab2043e68656c6c6fbb1f1c19"
      "000000000000000029039807d8ea82a2");
  std::vector<std::byte> ours;
  tfrecord::append_record(ours, as_bytes("hello"));
  tfrecord::append_record(ours, {});
  EXPECT_EQ(ours, tf);
  auto p = tfrecord::unframe_record(std::span<const std::byte>(tf).first(21), true, "f", 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p->data()), p->size()), "hello");
  EXPECT_EQ(p->data(), tf.data() + kHeaderSize);  // a view, no copy
  auto e = tfrecord::unframe_record(std::span<const std::byte>(tf).subspan(21), true, "f", 21);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->empty());
}

TEST(FramingTest, UnframeErrors) {
  std::vector<std::byte> rec;
  tfrecord::append_record(rec, as_bytes("payload!"));
  // Too short.
  auto r = tfrecord::unframe_record(std::span<const std::byte>(rec).first(10), true, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "a.tfrecord: at offset 50");
  // Extent longer than the header says.
  std::vector<std::byte> longer = rec;
  longer.push_back(std::byte{0});
  r = tfrecord::unframe_record(longer, false, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "length 8 in the record header");
  // Length CRC.
  std::vector<std::byte> bad = rec;
  bad[9] ^= std::byte{1};
  r = tfrecord::unframe_record(bad, true, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "a.tfrecord: at offset 58: expected length CRC");
  EXPECT_TRUE(tfrecord::unframe_record(bad, false, "a.tfrecord", 50).ok());
  // Payload CRC.
  bad = rec;
  bad[kHeaderSize + 2] ^= std::byte{1};
  r = tfrecord::unframe_record(bad, true, "a.tfrecord", 50);
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "a.tfrecord: at offset 70: expected payload CRC 0x");
  EXPECT_CONTAINS(r.status().message(), "record at offset 50");
  EXPECT_TRUE(tfrecord::unframe_record(bad, false, "a.tfrecord", 50).ok());
}

}  // namespace
}  // namespace dlfeed
