// SPDX-License-Identifier: Apache-2.0
// Element types, described the way numpy describes them ("<f4", "|u1").
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

/// An element type: kind, byte size and byte order, as stored in the file.
struct DLFEED_EXPORT DType {
  enum class Kind : uint8_t { kBool, kInt, kUInt, kFloat };
  Kind kind = Kind::kUInt;
  uint8_t size = 1;         // bytes per element
  bool big_endian = false;  // meaningful only when size > 1

  /// numpy's descriptor: "|b1", "<i4", ">f8", "|u1".
  std::string str() const;
  /// A readable name: "bool", "int32", "float64", with ">" for big endian.
  std::string name() const;
  bool operator==(const DType&) const = default;

  /// Parses a numpy descriptor ("<f4", "|u1", "b1", "=i8") or a plain name
  /// ("float32", "uint8"). Object, string, structured and complex types are
  /// refused with a message that says so.
  static absl::StatusOr<DType> parse(absl::string_view text);

  static DType boolean() { return {Kind::kBool, 1, false}; }
  static DType u8() { return {Kind::kUInt, 1, false}; }
  static DType i64() { return {Kind::kInt, 8, false}; }
  static DType f32() { return {Kind::kFloat, 4, false}; }
};

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/dtype-inl.h"
#endif
