// SPDX-License-Identifier: Apache-2.0
// Private: the byte encoding of a source's state in the dataset index cache
// (src/index/index_cache.cc). Little-endian fixed-width integers and
// length-prefixed strings. The reader never trusts a length: every read is
// checked against what is left, and a failed read leaves the reader failed
// (ok() false), so a loader checks once at the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "dlfeed/dtype.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

class CacheWriter {
 public:
  explicit CacheWriter(std::string& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s.data(), s.size());
  }
  void dtype(const DType& d) {
    u8(static_cast<uint8_t>(d.kind));
    u8(d.size);
    u8(d.big_endian ? 1 : 0);
  }
  void shape(const Shape& s) {
    u64(s.size());
    for (int64_t d : s) i64(d);
  }
  void u64s(const std::vector<uint64_t>& v) {
    u64(v.size());
    for (uint64_t x : v) u64(x);
  }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& out_;
};

class CacheReader {
 public:
  explicit CacheReader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && pos_ == in_.size(); }
  size_t left() const { return in_.size() - pos_; }
  uint8_t u8() {
    uint8_t v = 0;
    raw(&v, 1);
    return v;
  }
  uint32_t u32() {
    uint32_t v = 0;
    raw(&v, 4);
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    raw(&v, 8);
    return v;
  }
  int64_t i64() {
    int64_t v = 0;
    raw(&v, 8);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (!ok_ || n > left()) return fail_str();
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  /// A string viewed in place (valid while the input is).
  std::string_view view() {
    const uint64_t n = u64();
    if (!ok_ || n > left()) {
      ok_ = false;
      return {};
    }
    std::string_view v = in_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  /// A dtype the library can produce: a known kind and a size of 1, 2, 4 or 8.
  DType dtype() {
    DType d;
    const uint8_t kind = u8(), size = u8(), big = u8();
    if (kind > static_cast<uint8_t>(DType::Kind::kFloat) || (size != 1 && size != 2 && size != 4 && size != 8) ||
        big > 1) {
      ok_ = false;
      return d;
    }
    d.kind = static_cast<DType::Kind>(kind);
    d.size = size;
    d.big_endian = big != 0;
    return d;
  }
  /// A shape of at most 32 dimensions, each -1 or more.
  Shape shape() {
    Shape s;
    const uint64_t n = u64();
    if (!ok_ || n > 32) {
      ok_ = false;
      return s;
    }
    for (uint64_t i = 0; i < n && ok_; ++i) {
      const int64_t d = i64();
      if (d < -1) ok_ = false;
      s.push_back(d);
    }
    return s;
  }
  /// A vector of u64 whose count the bytes left can hold.
  std::vector<uint64_t> u64s() {
    std::vector<uint64_t> v;
    const uint64_t n = u64();
    if (!ok_ || n > left() / 8) {
      ok_ = false;
      return v;
    }
    v.resize(n);
    for (auto& x : v) x = u64();
    return v;
  }
  /// Fails the reader (a value out of range).
  void fail() { ok_ = false; }

 private:
  void raw(void* p, size_t n) {
    if (!ok_ || n > left()) {
      ok_ = false;
      return;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  std::string fail_str() {
    ok_ = false;
    return {};
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace dlfeed::detail
