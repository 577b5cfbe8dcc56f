// SPDX-License-Identifier: Apache-2.0
// Fuzz target: dlfeed's DEFLATE/zlib decoder (dlfeed/format/deflate.h)
// against zlib's inflate. The first byte picks the wrapper (bit 0: zlib,
// else raw) and the output's capacity (the rest: 0-127 KiB in 1 KiB steps);
// the other bytes are the stream. A finding: a crash or sanitizer report, a
// stream one decoder accepts and the other refuses, different output, or a
// result that points outside the buffers.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dlfeed/format/deflate.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  if (size == 0) return 0;
  const bool wrapped = data[0] & 1;
  const size_t cap = size_t(data[0] >> 1) * 1024;
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  std::vector<std::byte> out(cap);
  const InflateResult r = wrapped ? inflate_zlib(in, out) : inflate_deflate(in, out);
  if (r.produced > cap || r.consumed > in.size()) fuzz::fail("deflate: produced or consumed past the buffers");
  if (r.code == InflateResult::kCorrupt && std::strlen(r.what) == 0) fuzz::fail("deflate: kCorrupt without a reason");

  z_stream zs{};
  if (inflateInit2(&zs, wrapped ? MAX_WBITS : -MAX_WBITS) != Z_OK) fuzz::fail("zlib inflateInit2 failed");
  std::vector<unsigned char> want(cap + 1);
  zs.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = want.data();
  zs.avail_out = static_cast<uInt>(cap);
  const int rc = inflate(&zs, Z_FINISH);
  const size_t zlib_out = zs.total_out;
  inflateEnd(&zs);
  if ((rc == Z_STREAM_END) != r.ok()) {
    fuzz::fail("deflate: zlib says " + std::to_string(rc) + ", dlfeed code " + std::to_string(int(r.code)) + " (" +
               r.what + ")");
  }
  if (r.ok() && (r.produced != zlib_out || (zlib_out > 0 && std::memcmp(out.data(), want.data(), zlib_out) != 0))) {
    fuzz::fail("deflate: output differs from zlib's");
  }
  const uint32_t a = adler32(in);
  if (!in.empty() && a != uint32_t(::adler32(1, reinterpret_cast<const Bytef*>(in.data()), uInt(in.size())))) {
    fuzz::fail("adler32 differs from zlib's");
  }
  return 0;
}
