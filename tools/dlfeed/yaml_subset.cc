// SPDX-License-Identifier: Apache-2.0
// `dlfeed dlio`'s YAML subset: block and flow collections, plain and
// quoted scalars, errors as "FILE:LINE: ..." (see yaml_subset.h).
#include "yaml_subset.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlfeed::cli::dlio {
namespace {

absl::Status error_at(const std::string& origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

/// One non-blank line: its indentation and its content, comment removed.
struct Line {
  size_t indent = 0;
  std::string content;
  int number = 0;
};

bool is_space(char c) { return c == ' ' || c == '\t'; }

/// The content of a raw line up to an unquoted comment, right-trimmed. A
/// quote opens a string only where a token starts (after a space, ':', ',',
/// '[' or '{'), so an apostrophe inside a plain word stays a character.
absl::StatusOr<std::string> strip_comment(absl::string_view s, const std::string& origin) {
  char quote = 0;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    const bool token_start = i == 0 || is_space(s[i - 1]) || s[i - 1] == ':' || s[i - 1] == ',' || s[i - 1] == '[' ||
                             s[i - 1] == '{' || s[i - 1] == '-';
    if (quote) {
      if (quote == '"' && c == '\\') {
        ++i;
      } else if (c == quote) {
        if (quote == '\'' && i + 1 < s.size() && s[i + 1] == '\'') {
          ++i;  // '' inside a single-quoted scalar
        } else {
          quote = 0;
        }
      }
    } else if ((c == '"' || c == '\'') && token_start) {
      quote = c;
    } else if (c == '#' && (i == 0 || is_space(s[i - 1]))) {
      break;
    }
  }
  if (quote)
    return error_at(origin,
                    absl::StrCat("a ", quote == '"' ? "double" : "single", "-quoted string is not closed on its line"));
  return std::string(absl::StripTrailingAsciiWhitespace(s.substr(0, i)));
}

/// Reads a quoted scalar starting at s[*pos] (a quote); leaves *pos after it.
absl::StatusOr<std::string> read_quoted(absl::string_view s, size_t* pos, const std::string& origin) {
  const char q = s[*pos];
  std::string out;
  size_t i = *pos + 1;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (q == '\'' && c == '\'') {
      if (i + 1 < s.size() && s[i + 1] == '\'') {
        out += '\'';
        ++i;
        continue;
      }
      break;
    }
    if (q == '"' && c == '"') break;
    if (q == '"' && c == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case '\\': out += '\\'; break;
        case '"': out += '"'; break;
        case '/': out += '/'; break;
        default:
          return error_at(origin,
                          absl::StrCat("unsupported escape \\", std::string(1, e), " in a double-quoted string"));
      }
      continue;
    }
    out += c;
  }
  if (i >= s.size()) return error_at(origin, "a quoted string is not closed");
  *pos = i + 1;
  return out;
}

absl::Status check_plain(absl::string_view v, const std::string& origin) {
  if (v.empty()) return absl::OkStatus();
  const char c = v.front();
  if (c == '&' || c == '*') return error_at(origin, absl::StrCat("anchors and aliases are not supported: '", v, "'"));
  if (c == '!') return error_at(origin, absl::StrCat("tags are not supported: '", v, "'"));
  if (c == '|' || c == '>') {
    return error_at(origin, absl::StrCat("block scalars ('", std::string(1, c),
                                         "') are not supported; write the value on one line"));
  }
  if (c == '@' || c == '`' || c == '%')
    return error_at(origin, absl::StrCat("a value may not start with '", std::string(1, c), "'"));
  if (absl::StrContains(v, ": ")) {
    return error_at(origin, absl::StrCat("found a second ': ' in the value '", v, "'; quote the value"));
  }
  return absl::OkStatus();
}

/// Flow collections and scalars inside them: [a, [b, c], {k: v}], 'q'.
class FlowParser {
 public:
  FlowParser(absl::string_view s, std::string origin) : s_(s), origin_(std::move(origin)) {}

  absl::StatusOr<YamlNode> parse_all() {
    auto v = value();
    if (!v.ok()) return v.status();
    skip();
    if (i_ != s_.size()) return error_at(origin_, absl::StrCat("unexpected '", s_.substr(i_), "' after the value"));
    return v;
  }

 private:
  void skip() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }
  absl::StatusOr<YamlNode> value() {
    skip();
    YamlNode n;
    n.origin = origin_;
    if (i_ >= s_.size()) return error_at(origin_, "expected a value, found the end of the line");
    const char c = s_[i_];
    if (c == '[' || c == '{') {
      const bool is_map = c == '{';
      const char close = is_map ? '}' : ']';
      n.kind = is_map ? YamlNode::Kind::kMap : YamlNode::Kind::kList;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == close) {
        ++i_;
        return n;
      }
      while (true) {
        if (is_map) {
          auto k = scalar(true);
          if (!k.ok()) return k.status();
          skip();
          if (i_ >= s_.size() || s_[i_] != ':') return error_at(origin_, "expected ':' after a key in a flow mapping");
          ++i_;
          auto v = value();
          if (!v.ok()) return v.status();
          for (const auto& [key, _] : n.map) {
            if (key == k->scalar) return error_at(origin_, absl::StrCat("duplicate key '", key, "' in a flow mapping"));
          }
          n.map.emplace_back(k->scalar, *std::move(v));
        } else {
          auto v = value();
          if (!v.ok()) return v.status();
          n.list.push_back(*std::move(v));
        }
        skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == close) {
          ++i_;
          return n;
        }
        return error_at(
            origin_, absl::StrCat("expected ',' or '", std::string(1, close), "' in a flow ",
                                  is_map ? "mapping" : "sequence", ", found ",
                                  i_ < s_.size() ? absl::StrCat("'", s_.substr(i_, 1), "'") : "the end of the line"));
      }
    }
    return scalar(false);
  }
  absl::StatusOr<YamlNode> scalar(bool key) {
    skip();
    YamlNode n;
    n.origin = origin_;
    n.kind = YamlNode::Kind::kScalar;
    if (i_ < s_.size() && (s_[i_] == '"' || s_[i_] == '\'')) {
      auto q = read_quoted(s_, &i_, origin_);
      if (!q.ok()) return q.status();
      n.scalar = *std::move(q);
      n.quoted = true;
      return n;
    }
    const size_t b = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != ']' && s_[i_] != '}' && s_[i_] != '[' && s_[i_] != '{' &&
           !(key && s_[i_] == ':')) {
      ++i_;
    }
    n.scalar = std::string(absl::StripAsciiWhitespace(s_.substr(b, i_ - b)));
    if (n.scalar.empty()) return error_at(origin_, "expected a value in a flow collection");
    if (auto st = check_plain(n.scalar, origin_); !st.ok()) return st;
    return n;
  }

  absl::string_view s_;
  std::string origin_;
  size_t i_ = 0;
};

}  // namespace

/// A value written after "key: " or "- ", or an override's value.
absl::StatusOr<YamlNode> parse_yaml_value(absl::string_view v, const std::string& origin) {
  v = absl::StripAsciiWhitespace(v);
  if (!v.empty() && (v.front() == '[' || v.front() == '{' || v.front() == '"' || v.front() == '\'')) {
    return FlowParser(v, origin).parse_all();
  }
  if (auto st = check_plain(v, origin); !st.ok()) return st;
  YamlNode n;
  n.origin = origin;
  n.kind = YamlNode::Kind::kScalar;
  n.scalar = std::string(v);
  return n;
}

namespace {

/// Where "key: rest" splits: the first ':' outside quotes followed by a
/// space or the end; npos when there is none.
size_t key_colon(absl::string_view s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if ((c == '"' || c == '\'') && i == 0) {
      quote = c;
    } else if (c == '[' || c == '{') {
      return std::string::npos;  // a flow collection, not a key
    } else if (c == ':' && (i + 1 == s.size() || s[i + 1] == ' ')) {
      return i;
    }
  }
  return std::string::npos;
}

bool is_item(absl::string_view s) { return s == "-" || absl::StartsWith(s, "- "); }

class BlockParser {
 public:
  BlockParser(std::vector<Line> lines, std::string file) : lines_(std::move(lines)), file_(std::move(file)) {}

  absl::StatusOr<YamlNode> parse() {
    if (lines_.empty()) {
      YamlNode n;
      n.kind = YamlNode::Kind::kMap;
      n.origin = absl::StrCat(file_, ":1");
      return n;
    }
    auto root = block(0, lines_[0].indent);
    if (!root.ok()) return root.status();
    if (i_ < lines_.size()) {
      return error_at(at(lines_[i_]), absl::StrCat("unexpected indentation (", lines_[i_].indent,
                                                   " spaces where the enclosing block has fewer)"));
    }
    if (root->kind != YamlNode::Kind::kMap) {
      return error_at(absl::StrCat(file_, ":", lines_[0].number),
                      "a workload config must be a mapping (key: value lines)");
    }
    return root;
  }

 private:
  std::string at(const Line& l) const { return absl::StrCat(file_, ":", l.number); }

  absl::StatusOr<YamlNode> block(size_t, size_t indent) {
    return is_item(lines_[i_].content) ? sequence(indent) : mapping(indent);
  }

  /// The value of "key:" with nothing after it: the deeper block that
  /// follows (a sequence may sit at the key's own indentation), or null.
  absl::StatusOr<YamlNode> nested(size_t indent, const std::string& origin) {
    if (i_ < lines_.size() && lines_[i_].indent > indent) return block(i_, lines_[i_].indent);
    if (i_ < lines_.size() && lines_[i_].indent == indent && is_item(lines_[i_].content)) return sequence(indent);
    YamlNode n;
    n.origin = origin;
    return n;
  }

  absl::StatusOr<YamlNode> mapping(size_t indent) {
    YamlNode n;
    n.kind = YamlNode::Kind::kMap;
    n.origin = at(lines_[i_]);
    while (i_ < lines_.size() && lines_[i_].indent == indent) {
      const Line& l = lines_[i_];
      const std::string origin = at(l);
      if (is_item(l.content)) return error_at(origin, "a sequence item ('- ') where a 'key: value' line was expected");
      const size_t colon = key_colon(l.content);
      if (colon == std::string::npos) {
        return error_at(origin, absl::StrCat("expected 'key: value', found '", l.content, "'"));
      }
      std::string key(absl::StripTrailingAsciiWhitespace(absl::string_view(l.content).substr(0, colon)));
      if (!key.empty() && (key.front() == '"' || key.front() == '\'')) {
        size_t p = 0;
        auto q = read_quoted(key, &p, origin);
        if (!q.ok()) return q.status();
        if (p != key.size()) return error_at(origin, absl::StrCat("unexpected text after the quoted key ", key));
        key = *std::move(q);
      } else if (key.empty()) {
        return error_at(origin, "a ':' with no key before it");
      } else if (key.front() == '?' || key.front() == '&' || key.front() == '*' || key.front() == '!') {
        return error_at(origin, absl::StrCat("unsupported key syntax '", key, "'"));
      }
      if (n.find(key)) return error_at(origin, absl::StrCat("duplicate key '", key, "'"));
      const std::string rest(absl::StripLeadingAsciiWhitespace(absl::string_view(l.content).substr(colon + 1)));
      ++i_;
      absl::StatusOr<YamlNode> v = rest.empty() ? nested(indent, origin) : parse_yaml_value(rest, origin);
      if (!v.ok()) return v.status();
      n.map.emplace_back(std::move(key), *std::move(v));
    }
    if (i_ < lines_.size() && lines_[i_].indent > indent) {
      return error_at(at(lines_[i_]), absl::StrCat("unexpected indentation (", lines_[i_].indent,
                                                   " spaces; the keys above have ", indent, ")"));
    }
    return n;
  }

  absl::StatusOr<YamlNode> sequence(size_t indent) {
    YamlNode n;
    n.kind = YamlNode::Kind::kList;
    n.origin = at(lines_[i_]);
    while (i_ < lines_.size() && lines_[i_].indent == indent && is_item(lines_[i_].content)) {
      Line& l = lines_[i_];
      const std::string origin = at(l);
      const std::string rest(absl::StripLeadingAsciiWhitespace(absl::string_view(l.content).substr(1)));
      if (rest.empty()) {
        ++i_;
        auto v = nested(indent, origin);
        if (!v.ok()) return v.status();
        n.list.push_back(*std::move(v));
        continue;
      }
      if (key_colon(rest) != std::string::npos) {
        // "- key: value": a mapping whose keys line up with this one.
        l.indent = indent + (l.content.size() - rest.size());
        l.content = rest;
        auto v = mapping(l.indent);
        if (!v.ok()) return v.status();
        n.list.push_back(*std::move(v));
        continue;
      }
      ++i_;
      auto v = parse_yaml_value(rest, origin);
      if (!v.ok()) return v.status();
      n.list.push_back(*std::move(v));
    }
    if (i_ < lines_.size() && lines_[i_].indent > indent) {
      return error_at(at(lines_[i_]), "unexpected indentation after a sequence item");
    }
    return n;
  }

  std::vector<Line> lines_;
  std::string file_;
  size_t i_ = 0;
};

}  // namespace

// --- YamlNode ---------------------------------------------------------------

const YamlNode* YamlNode::find(absl::string_view key) const {
  for (const auto& [k, v] : map) {
    if (k == key) return &v;
  }
  return nullptr;
}

YamlNode* YamlNode::find(absl::string_view key) {
  for (auto& [k, v] : map) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string YamlNode::text() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kScalar: return quoted ? absl::StrCat("'", scalar, "'") : scalar;
    case Kind::kList:
      return absl::StrCat(
          "[", absl::StrJoin(list, ", ", [](std::string* o, const YamlNode& n) { o->append(n.text()); }), "]");
    case Kind::kMap:
      return absl::StrCat(
          "{",
          absl::StrJoin(map, ", ",
                        [](std::string* o, const auto& kv) { absl::StrAppend(o, kv.first, ": ", kv.second.text()); }),
          "}");
  }
  return "";
}

absl::StatusOr<YamlNode> parse_yaml(absl::string_view text, const std::string& file) {
  // A byte order mark (as Windows editors write) starts the stream, not its
  // first key, as for YAML's readers.
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
  std::vector<Line> lines;
  int number = 0;
  bool seen_content = false;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    const std::string origin = absl::StrCat(file, ":", number);
    size_t indent = 0;
    while (indent < raw.size() && (raw[indent] == ' ' || raw[indent] == '\t')) {
      if (raw[indent] == '\t') {
        // A tab after content starts is fine; in indentation YAML forbids it.
        auto rest = strip_comment(raw.substr(indent), origin);
        if (rest.ok() && rest->empty()) break;
        return error_at(origin, "a tab in the indentation (YAML indents with spaces)");
      }
      ++indent;
    }
    auto content = strip_comment(raw.substr(std::min(indent, raw.size())), origin);
    if (!content.ok()) return content.status();
    if (content->empty()) continue;
    if (indent == 0 && (*content == "---" || absl::StartsWith(*content, "--- "))) {
      if (seen_content) return error_at(origin, "a second document ('---'); give one workload per file");
      if (*content != "---") return error_at(origin, "content after '---' on its line is not supported");
      continue;
    }
    if (indent == 0 && *content == "...") return error_at(origin, "a document end ('...') is not supported");
    if (indent == 0 && (*content)[0] == '%') return error_at(origin, "YAML directives are not supported");
    seen_content = true;
    lines.push_back({indent, *std::move(content), number});
  }
  return BlockParser(std::move(lines), file).parse();
}

}  // namespace dlfeed::cli::dlio
