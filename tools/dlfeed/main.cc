// The dlfeed command line: `dlfeed <command> [flags] [args]`.
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "dlfeed/error.h"

namespace dlfeed::cli {

std::map<std::string, Command>& registry() {
  static std::map<std::string, Command> commands;
  return commands;
}

namespace {
std::set<std::string> g_given_flags;
}  // namespace

bool flag_given(const std::string& name) {
  return g_given_flags.count(name) > 0;
}

namespace {

std::string g_flag_file;
std::vector<std::string> g_extra_flag_files;

std::string overview() {
  std::string s = "dlfeed: a data loader for deep-learning training.\n\nUsage: dlfeed <command> [flags] [args]\n\nCommands:\n";
  for (const auto& [name, c] : registry()) s += absl::StrCat("  ", name, std::string(12 - std::min<size_t>(11, name.size()), ' '), c.summary, "\n");
  s += "\nRun `dlfeed <command> --help` for a command's flags.\n";
  return s;
}

// Abseil's own --help handling exits with status 1 (asking for help counts as
// not running the program); `dlfeed CMD --help` is a successful request, so
// the usage flags are answered here, from the public flag registry, and exit 0.

/// The usage flag among the command's arguments (before "--"), or "": --help,
/// -h, --helpshort, --helpfull, --helppackage; --help=S, --helpmatch=S and
/// --helpon=S list the flags whose name contains S.
std::string usage_request(int argc, char** argv, std::string* match) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help" || a == "-help") return "help";
    for (const char* f : {"--helpshort", "--helpfull", "--helppackage"}) {
      if (a == f) return a.substr(2);
    }
    for (const char* f : {"--help=", "--helpmatch=", "--helpon="}) {
      if (absl::StartsWith(a, f)) {
        *match = a.substr(std::strlen(f));
        std::replace(match->begin(), match->end(), '-', '_');  // flags are registered with underscores
        return "match";
      }
    }
  }
  return "";
}

/// "  --compute-ms (help, wrapped); default: 0;" lines, sorted by name.
std::string flags_help(const std::vector<const absl::CommandLineFlag*>& flags) {
  std::vector<std::pair<std::string, const absl::CommandLineFlag*>> named;
  for (const absl::CommandLineFlag* f : flags) {
    std::string name(f->Name());
    std::replace(name.begin(), name.end(), '_', '-');  // both spellings parse; the docs use dashes
    named.emplace_back(std::move(name), f);
  }
  std::sort(named.begin(), named.end());
  std::string out;
  for (const auto& [name, f] : named) {
    const std::string def = f->IsOfType<std::string>() ? absl::StrCat("\"", f->DefaultValue(), "\"") : f->DefaultValue();
    const std::string text = absl::StrCat("--", name, " (", f->Help(), "); default: ", def, ";");
    // Wrapped at 80 columns, continuation lines indented further.
    std::string line = "    ";
    bool line_empty = true;
    for (absl::string_view word : absl::StrSplit(text, ' ')) {
      if (!line_empty && line.size() + 1 + word.size() > 80) {
        out += line + "\n";
        line = "      ";
        line_empty = true;
      }
      if (!line_empty) line += ' ';
      absl::StrAppend(&line, word);
      line_empty = false;
    }
    out += line + "\n";
  }
  return out;
}

/// Prints the command's usage and flags to stdout (--helpfull: every dlfeed flag).
void print_usage(const std::string& name, const Command& c, const std::string& mode, const std::string& match) {
  auto same = [](absl::string_view a, absl::string_view b) { return absl::EndsWith(a, b) || absl::EndsWith(b, a); };
  std::vector<const absl::CommandLineFlag*> own, shared, other;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    const std::string file = flag->Filename();
    if (!absl::StrContains(file, "tools/dlfeed/")) continue;  // Abseil's own (--flagfile, ...)
    if (mode == "match" && !absl::StrContains(flag_name, match)) continue;
    const bool mine = same(file, c.flag_file) ||
                      std::any_of(c.extra_flag_files.begin(), c.extra_flag_files.end(),
                                  [&](const std::string& f) { return same(file, f); });
    if (mine) {
      own.push_back(flag);
    } else if (absl::StrContains(file, "tools/dlfeed/common")) {
      shared.push_back(flag);
    } else {
      other.push_back(flag);
    }
  }
  std::string s = absl::StrCat("dlfeed ", name, ": ", c.summary, "\n\nUsage: dlfeed ", name, " [flags] [args]\n");
  if (!own.empty()) absl::StrAppend(&s, "\n  Flags of ", name, ":\n", flags_help(own));
  if (!shared.empty()) absl::StrAppend(&s, "\n  Shared flags (some commands use only some):\n", flags_help(shared));
  if (mode == "helpfull" && !other.empty()) absl::StrAppend(&s, "\n  Flags of other commands:\n", flags_help(other));
  if (mode == "match" && own.empty() && shared.empty()) absl::StrAppend(&s, "\nNo flag of ", name, " matches '", match, "'.\n");
  absl::StrAppend(&s, "\nFlags may be spelled with dashes or underscores (--compute-ms, --compute_ms).\n");
  std::fputs(s.c_str(), stdout);
}

}  // namespace
}  // namespace dlfeed::cli

int main(int argc, char** argv) {
  using dlfeed::cli::registry;
  // `dlfeed help CMD` is `dlfeed CMD --help`.
  std::vector<char*> help_of;
  if (argc == 3 && std::strcmp(argv[1], "help") == 0 && registry().count(argv[2])) {
    static char flag[] = "--help";
    help_of = {argv[0], argv[2], flag};
    argc = 3;
    argv = help_of.data();
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(dlfeed::cli::overview().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto it = registry().find(argv[1]);
  if (it == registry().end() || it->second.run == nullptr) {
    std::fprintf(stderr, "dlfeed: unknown command '%s'\n\n%s", argv[1], dlfeed::cli::overview().c_str());
    return 2;
  }
  const std::string name = argv[1];
  std::string match;
  if (const std::string mode = dlfeed::cli::usage_request(argc, argv, &match); !mode.empty()) {
    dlfeed::cli::print_usage(name, it->second, mode, match);
    return 0;
  }
  dlfeed::cli::g_flag_file = it->second.flag_file;
  dlfeed::cli::g_extra_flag_files = it->second.extra_flag_files;
  absl::FlagsUsageConfig config;
  // --help lists the flags of this command's file only.
  config.contains_help_flags = [](absl::string_view file) {
    auto same = [&](const std::string& f) { return absl::EndsWith(f, file) || absl::EndsWith(file, f); };
    return same(dlfeed::cli::g_flag_file) || absl::StrContains(file, "tools/dlfeed/common") ||
           std::any_of(dlfeed::cli::g_extra_flag_files.begin(), dlfeed::cli::g_extra_flag_files.end(), same);
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.normalize_filename = [](absl::string_view f) { return std::string(f); };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(absl::StrCat("dlfeed ", name, ": ", it->second.summary,
                                            "\n\nUsage: dlfeed ", name, " [flags] [args]"));
  // Parse the command's flags with the command name standing in as argv[0].
  // Flags may be spelled with dashes (--dump-sample) or underscores (--dump_sample).
  std::vector<std::string> spelled;
  spelled.reserve(argc);
  bool positional_only = false;  // after "--"
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") positional_only = true;
    if (!positional_only && a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t end = std::min(a.find('='), a.size());
      for (size_t j = 2; j < end; ++j) {
        if (a[j] == '-') a[j] = '_';
      }
      const std::string flag = a.substr(2, end - 2);
      dlfeed::cli::g_given_flags.insert(flag);
      if (flag.size() > 2 && flag.compare(0, 2, "no") == 0) dlfeed::cli::g_given_flags.insert(flag.substr(2));
    }
    spelled.push_back(std::move(a));
  }
  std::vector<char*> args;
  for (auto& a : spelled) args.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  std::vector<std::string> rest(positional.begin() + 1, positional.end());
  try {
    return it->second.run(rest);
  } catch (const dlfeed::Error& e) {
    std::fprintf(stderr, "dlfeed %s: error: %s\n", name.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlfeed %s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}
