// SPDX-License-Identifier: Apache-2.0
// DEFLATE (RFC 1951) and its zlib wrapper (RFC 1950), decoded whole into a
// buffer of known size: HDF5's deflate filter and numpy's savez_compressed
// members; and from a checkpoint inside a stream (a block start, a window),
// the records of compressed TFRecord files. Header tier
// (dlfeed/detail/inline.h): no zlib needed.
//
// Decoded in one call, with no state kept between calls: a 64-bit bit buffer
// refilled 8 bytes at a time, 11-bit literal/length and 8-bit distance lookup
// tables (with second-level tables for longer codes), matches copied a word
// at a time. Everything zlib refuses is refused, with what was wrong and the
// input offset where it was seen; tests/format/deflate_test.cc checks the
// two against each other.
#pragma once

#include <cstdint>
#include <span>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

/// What inflate_deflate()/inflate_zlib() found.
struct InflateResult {
  enum Code : uint8_t {
    kOk,         // the stream ended (its final block, and for zlib its Adler-32)
    kCorrupt,    // not a valid stream: `what` says why
    kTruncated,  // the input ended before the stream did
    kTooLong,    // the stream decodes to more than `out` holds
    kChecksum,   // zlib: the Adler-32 of the output does not match the trailer
  };
  Code code = kOk;
  /// Bytes written to `out` (the output's length when kOk). Bytes of `out`
  /// past this are unspecified: the decoder may have written scratch there.
  uint64_t produced = 0;
  /// Input bytes used: the stream's length (trailer included) when kOk, else
  /// about where the decoder stopped (what an error message names).
  uint64_t consumed = 0;
  /// For kCorrupt (and kChecksum): what was wrong, e.g. "an invalid distance code".
  const char* what = "";
  bool ok() const { return code == kOk; }
};

/// Decodes the raw DEFLATE stream at the start of `in` into `out`. Input
/// after the final block is left alone (as zlib does); `consumed` says where
/// the stream ended.
DLFEED_EXPORT InflateResult inflate_deflate(std::span<const std::byte> in, std::span<std::byte> out);

/// A place in a DEFLATE stream: input bit `in_bit` (from the first byte's
/// least significant bit), output position `out`.
struct InflateResume {
  uint64_t in_bit = 0;
  uint64_t out = 0;
};

/// Decodes from bit `start.in_bit` of `in`, where a block begins, into
/// `out` from position `start.out`; out[0, start.out) is the history that
/// back-references may reach (a checkpoint's window, or earlier output).
/// `produced` is then the output's end in `out` (start.out included). It
/// stops at the stream's end (kOk); when `out` is full (kTooLong, with all
/// of `out` written: a caller that wanted a prefix of the output has it);
/// or at the input's end (kTruncated, `produced` bytes written, every one of
/// them the stream's). When `last_block` is not null it gets the start of
/// the last block begun, where a later call can go on with the same input
/// and the output written so far.
DLFEED_EXPORT InflateResult inflate_deflate_at(std::span<const std::byte> in, InflateResume start,
                                               std::span<std::byte> out, InflateResume* last_block = nullptr);

/// inflate_deflate() for a zlib stream (2-byte header, DEFLATE, big-endian
/// Adler-32 of the output); a preset dictionary is refused (kCorrupt).
DLFEED_EXPORT InflateResult inflate_zlib(std::span<const std::byte> in, std::span<std::byte> out);

/// Adler-32 of `bytes`, continuing from `adler` (1 for a new stream).
DLFEED_EXPORT uint32_t adler32(std::span<const std::byte> bytes, uint32_t adler = 1);

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/format/deflate-inl.h"
#endif
