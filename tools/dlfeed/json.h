// SPDX-License-Identifier: Apache-2.0
// A small JSON reader and the writing helpers for the command line's own files
// (calibrations, workload manifests). Errors name the file and the byte
// offset, and say what was expected there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/json.h"

namespace dlfeed::cli {

/// A parsed JSON value; remembers where it began in the text, so a checker
/// can say "PATH: at offset N: expected ..." about a value that parsed but
/// is wrong.
class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  /// Parses one JSON document (RFC 8259; \u escapes to UTF-8). `path` names
  /// the source in errors.
  static absl::StatusOr<Json> parse(absl::string_view text, absl::string_view path);

  Type type() const { return type_; }
  uint64_t offset() const { return offset_; }
  bool boolean() const { return bool_; }
  double number() const { return number_; }
  const std::string& string() const { return string_; }
  const std::vector<Json>& array() const { return array_; }
  const std::map<std::string, Json>& object() const { return object_; }
  /// An object's member, or nullptr (also when this is not an object).
  const Json* find(absl::string_view key) const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  uint64_t offset_ = 0;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::map<std::string, Json> object_;
};

/// "kind of value" for errors: "a number", "an object", ...
const char* json_type_name(Json::Type t);

/// Writing: the library's (dlfeed/detail/json.h), so the command line's
/// files spell strings and numbers as the counters' exports do.
using detail::json_number;
using detail::json_quote;

/// Member `key` of `obj` checked to be of type `t`; otherwise an error
/// "PATH: at offset N: expected KEY to be T, found ..." (or "... has no KEY").
absl::StatusOr<const Json*> json_member(const Json& obj, absl::string_view key, Json::Type t, absl::string_view path,
                                        absl::string_view where);

/// Reads a whole file (errors name it).
absl::StatusOr<std::string> read_text_file(const std::string& path);
/// Writes a whole file through a temporary name and a rename.
absl::Status write_text_file(const std::string& path, absl::string_view text);

}  // namespace dlfeed::cli
