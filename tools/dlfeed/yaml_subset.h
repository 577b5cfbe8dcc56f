// SPDX-License-Identifier: Apache-2.0
// The subset of YAML that the DLIO benchmark's workload configs are written
// in (and Hydra override values), parsed with errors that name the file and
// line. Used by `dlfeed dlio` (dlio_config.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlfeed::cli::dlio {

/// One YAML value: a scalar (text as written, quotes removed), a mapping
/// (keys in file order), a sequence, or null (`key:` with nothing under it).
/// Remembers where it was written, for errors.
struct YamlNode {
  enum class Kind { kNull, kScalar, kMap, kList };
  Kind kind = Kind::kNull;
  std::string scalar;
  bool quoted = false;  // a quoted scalar is always a string
  std::vector<std::pair<std::string, YamlNode>> map;
  std::vector<YamlNode> list;
  std::string origin;  // "FILE:LINE", or "override 'ARG'"

  const YamlNode* find(absl::string_view key) const;
  YamlNode* find(absl::string_view key);
  /// The value as YAML would print it (for messages and the resolved config).
  std::string text() const;
};

/// Parses the subset of YAML that workload configs use: block mappings
/// nested by indentation (spaces, any consistent width), block sequences
/// (`- item`), flow sequences (`[1, 2]`) and flow mappings of scalars,
/// plain, 'single' and "double" quoted scalars, `#` comments, a leading
/// `---`. Anything else (tabs in indentation, anchors and aliases, block
/// scalars `|` `>`, tags, multi-document files, duplicate keys) is an error
/// "FILE:LINE: what was found, what was expected".
absl::StatusOr<YamlNode> parse_yaml(absl::string_view text, const std::string& file);

/// One value as written after "key: " or "- " (or an override's value): a
/// flow collection, a quoted scalar or a plain scalar; `origin` goes into
/// the node and into any error.
absl::StatusOr<YamlNode> parse_yaml_value(absl::string_view v, const std::string& origin);

}  // namespace dlfeed::cli::dlio
