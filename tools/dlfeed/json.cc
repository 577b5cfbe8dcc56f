// SPDX-License-Identifier: Apache-2.0
#include "json.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"

namespace dlfeed::cli {

const char* json_type_name(Json::Type t) {
  switch (t) {
    case Json::Type::kNull: return "null";
    case Json::Type::kBool: return "a boolean";
    case Json::Type::kNumber: return "a number";
    case Json::Type::kString: return "a string";
    case Json::Type::kArray: return "an array";
    case Json::Type::kObject: return "an object";
  }
  return "?";
}

const Json* Json::find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  auto it = object_.find(std::string(key));
  return it == object_.end() ? nullptr : &it->second;
}

/// Recursive descent over the text; depth-limited so hostile input cannot
/// overflow the stack.
class JsonParser {
 public:
  JsonParser(absl::string_view text, absl::string_view path) : s_(text), path_(path) {}

  absl::StatusOr<Json> document() {
    Json v;
    DLFEED_RETURN_IF_ERROR(value(v, 0));
    skip_ws();
    if (i_ != s_.size()) return error("the end of the document");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status error(absl::string_view expected) const {
    const std::string found =
        i_ >= s_.size() ? std::string("the end of the file") : absl::StrCat("'", s_.substr(i_, 12), "'");
    return format_error(path_, i_, absl::StrCat(expected, " (JSON)"), found);
  }

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  bool literal(absl::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  absl::Status value(Json& v, int depth) {
    skip_ws();
    if (depth > kMaxDepth) return error("at most 64 nested arrays/objects");
    v.offset_ = i_;
    if (i_ >= s_.size()) return error("a value");
    const char c = s_[i_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v.type_ = Json::Type::kString;
      return string(v.string_);
    }
    if (literal("true")) {
      v.type_ = Json::Type::kBool;
      v.bool_ = true;
      return absl::OkStatus();
    }
    if (literal("false")) {
      v.type_ = Json::Type::kBool;
      return absl::OkStatus();
    }
    if (literal("null")) return absl::OkStatus();
    if (c == '-' || (c >= '0' && c <= '9')) return number(v);
    return error("a value (object, array, string, number, true, false or null)");
  }

  absl::Status number(Json& v) {
    const size_t start = i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > d;
    };
    if (s_[i_] == '-') ++i_;
    if (!digits()) return error("digits of a number");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) return error("digits after the decimal point");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return error("digits of an exponent");
    }
    const std::string text(s_.substr(start, i_ - start));
    errno = 0;
    v.number_ = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && !std::isfinite(v.number_)) {
      i_ = start;
      return error("a number within the range of a double");
    }
    v.type_ = Json::Type::kNumber;
    return absl::OkStatus();
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  absl::Status hex4(uint32_t* cp) {
    if (i_ + 4 > s_.size()) return error("4 hex digits after \\u");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_ + k];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return error("4 hex digits after \\u");
    }
    i_ += 4;
    *cp = v;
    return absl::OkStatus();
  }

  absl::Status string(std::string& out) {
    ++i_;  // the opening quote
    while (true) {
      if (i_ >= s_.size()) return error("a closing '\"'");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) return error("no raw control characters in a string");
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) return error("an escape after '\\'");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          DLFEED_RETURN_IF_ERROR(hex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            uint32_t lo = 0;
            DLFEED_RETURN_IF_ERROR(hex4(&lo));
            if (lo < 0xDC00 || lo >= 0xE000) return error("a low surrogate after a high one");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: --i_; return error("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    }
  }

  absl::Status array(Json& v, int depth) {
    v.type_ = Json::Type::kArray;
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      Json item;
      DLFEED_RETURN_IF_ERROR(value(item, depth + 1));
      v.array_.push_back(std::move(item));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return absl::OkStatus();
      }
      return error("',' or ']' in an array");
    }
  }

  absl::Status object(Json& v, int depth) {
    v.type_ = Json::Type::kObject;
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') return error("a member name in quotes");
      std::string key;
      DLFEED_RETURN_IF_ERROR(string(key));
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') return error("':' after a member name");
      ++i_;
      Json item;
      DLFEED_RETURN_IF_ERROR(value(item, depth + 1));
      v.object_[key] = std::move(item);
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return absl::OkStatus();
      }
      return error("',' or '}' in an object");
    }
  }

  absl::string_view s_;
  absl::string_view path_;
  size_t i_ = 0;
};

absl::StatusOr<Json> Json::parse(absl::string_view text, absl::string_view path) {
  return JsonParser(text, path).document();
}

absl::StatusOr<const Json*> json_member(const Json& obj, absl::string_view key, Json::Type t, absl::string_view path,
                                        absl::string_view where) {
  if (obj.type() != Json::Type::kObject) {
    return format_error(path, obj.offset(), absl::StrCat(where, " to be an object"), json_type_name(obj.type()));
  }
  const Json* m = obj.find(key);
  if (m == nullptr) {
    return format_error(path, obj.offset(),
                        absl::StrCat(where, " to have a member \"", key, "\" (", json_type_name(t), ")"), "none");
  }
  if (m->type() != t) {
    return format_error(path, m->offset(), absl::StrCat(where, ".", key, " to be ", json_type_name(t)),
                        json_type_name(m->type()));
  }
  return m;
}

absl::StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path, "open", errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(path, "read", errno);
  return ss.str();
}

absl::Status write_text_file(const std::string& given, absl::string_view text) {
  // A report's path that is a symbolic link is kept: what it points at is
  // written (whole, by gen::write_file). A device, a pipe or a socket
  // (/dev/stdout, >(jq .), /dev/full) is written through, as a shell's `>`
  // does: renaming a file over it would replace it.
  std::string path = given;
  std::error_code ec;
  if (std::filesystem::is_symlink(given, ec)) {
    const std::filesystem::path to = std::filesystem::weakly_canonical(given, ec);
    if (!ec) path = to.string();
  }
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return io_error(path, "open for writing", errno);
    const size_t n = std::fwrite(text.data(), 1, text.size(), f);
    const int err = errno;
    if (std::fclose(f) != 0 || n != text.size()) return io_error(path, n, "write", err != 0 ? err : errno);
    return absl::OkStatus();
  }
  return gen::write_file(path, text);
}

}  // namespace dlfeed::cli
