// SPDX-License-Identifier: Apache-2.0
// The dlfeed command line: `dlfeed <command> [flags] [args]`.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

#if DLFEED_WITH_S3
#include "dlfeed/s3/s3.h"
#endif
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

bool flag_given(const std::string& name) { return g_given_flags.count(name) > 0; }

namespace {

constexpr int kUsageError = 2;  // a missing or unknown command, flag or argument

std::string overview() {
  std::string s =
      "dlfeed: a data loader for deep-learning training.\n\nUsage: dlfeed <command> [flags] [args]\n\nCommands:\n";
  for (const auto& [name, c] : registry())
    s += absl::StrCat("  ", name, std::string(12 - std::min<size_t>(11, name.size()), ' '), c.summary, "\n");
  s += "\nRun `dlfeed <command> --help` for a command's flags.\n";
  return s;
}

/// The flags a command reads, each once, in the order its groups list them.
std::vector<FlagGroup> command_flags(const Command& c) {
  std::vector<FlagGroup> groups = c.flags ? c.flags() : std::vector<FlagGroup>{};
  std::set<const absl::CommandLineFlag*> seen;
  for (FlagGroup& g : groups) {
    std::erase_if(g.flags, [&](const absl::CommandLineFlag* f) { return !seen.insert(f).second; });
  }
  std::erase_if(groups, [](const FlagGroup& g) { return g.flags.empty(); });
  return groups;
}

/// --name as the help and the docs spell it (registered with underscores; both parse).
std::string dashed(absl::string_view name) {
  std::string s(name);
  std::replace(s.begin(), s.end(), '_', '-');
  return absl::StrCat("--", s);
}

// Abseil's own --help handling exits with status 1 (asking for help counts as
// not running the program) and lists flags under the source files that define
// them; `dlfeed CMD --help` is a successful request for that command's flags,
// so the usage flags are answered here from the command's flag list, exit 0.

/// The usage flag among the command's arguments (before "--"), or "": --help,
/// -h, and Abseil's --helpshort, --helpfull, --helppackage (the same list
/// here); --help=S, --helpmatch=S and --helpon=S list the flags whose name contains S.
std::string usage_request(int argc, char** argv, std::string* match) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help" || a == "-help") return "help";
    for (const char* f : {"--helpshort", "--helpfull", "--helppackage"}) {
      if (a == f) return "help";
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

/// "    --compute-ms (help, wrapped); default: 0;" lines, sorted by name.
std::string flags_help(const std::vector<const absl::CommandLineFlag*>& flags) {
  std::vector<std::pair<std::string, const absl::CommandLineFlag*>> named;
  named.reserve(flags.size());
  for (const absl::CommandLineFlag* f : flags) named.emplace_back(dashed(f->Name()), f);
  std::sort(named.begin(), named.end());
  std::string out;
  for (const auto& [name, f] : named) {
    const std::string def =
        f->IsOfType<std::string>() ? absl::StrCat("\"", f->DefaultValue(), "\"") : f->DefaultValue();
    const std::string text = absl::StrCat(name, " (", f->Help(), "); default: ", def, ";");
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

std::string usage_line(const std::string& name, const Command& c) {
  return absl::StrCat("Usage: dlfeed ", name, " [flags]", c.args.empty() ? "" : " ", c.args, "\n");
}

/// Prints the command's usage and the flags it reads to stdout.
void print_usage(const std::string& name, const Command& c, const std::string& mode, const std::string& match) {
  std::string s = absl::StrCat("dlfeed ", name, ": ", c.summary, "\n\n", usage_line(name, c));
  bool any = false;
  for (FlagGroup& g : command_flags(c)) {
    if (mode == "match") {
      std::erase_if(g.flags, [&](const absl::CommandLineFlag* f) { return !absl::StrContains(f->Name(), match); });
    }
    if (g.flags.empty()) continue;
    any = true;
    absl::StrAppend(&s, "\n  ", g.title.empty() ? absl::StrCat("Flags of ", name) : g.title, ":\n",
                    flags_help(g.flags));
  }
  if (mode == "match" && !any) absl::StrAppend(&s, "\nNo flag of ", name, " matches '", match, "'.\n");
  if (mode != "match" && !any) absl::StrAppend(&s, "\n", name, " takes no flags.\n");
  if (any) absl::StrAppend(&s, "\nFlags may be spelled with dashes or underscores (--compute-ms, --compute_ms).\n");
  std::fputs(s.c_str(), stdout);
}

/// Thrown for a command line the command cannot take (exit 2).
struct UsageError {
  std::string message;
};

/// The commands other than `name` that read flag `f`, for the message about a
/// flag given to the wrong command.
std::vector<std::string> commands_reading(const absl::CommandLineFlag* f, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& [other, c] : registry()) {
    if (other == name) continue;
    for (const FlagGroup& g : command_flags(c)) {
      if (std::find(g.flags.begin(), g.flags.end(), f) != g.flags.end()) {
        out.push_back(other);
        break;
      }
    }
  }
  return out;
}

/// Sets the command's flags from argv[2..] as Abseil would parse them
/// (--name=value, --name value, -name, --name / --noname for booleans,
/// dashes or underscores, "--" ends the flags) and returns the positional
/// arguments. Only the command's own flags are accepted: Abseil would take
/// any flag linked into the binary (another command's, --flagfile) and
/// exit 1 on a bad one.
std::vector<std::string> parse_flags(const std::string& name, const Command& c, int argc, char** argv) {
  std::map<std::string, const absl::CommandLineFlag*> mine;
  for (const FlagGroup& g : command_flags(c)) {
    for (const absl::CommandLineFlag* f : g.flags) mine[std::string(f->Name())] = f;
  }
  const std::string see_help = absl::StrCat("see `dlfeed ", name, " --help`");
  std::vector<std::string> positional;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      positional.insert(positional.end(), argv + i + 1, argv + argc);
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
      continue;
    }
    const size_t dashes = a[1] == '-' ? 2 : 1;
    const size_t eq = a.find('=');
    std::string flag = a.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
    std::replace(flag.begin(), flag.end(), '-', '_');
    std::optional<std::string> value;
    if (eq != std::string::npos) value = a.substr(eq + 1);
    auto it = mine.find(flag);
    bool negated = false;
    if (it == mine.end() && absl::StartsWith(flag, "no")) {
      auto positive = mine.find(flag.substr(2));
      if (positive != mine.end() && positive->second->IsOfType<bool>()) {
        it = positive;
        negated = true;
      }
    }
    if (it == mine.end()) {
      std::string whose;
      const absl::CommandLineFlag* known = absl::FindCommandLineFlag(flag);
      if (known == nullptr && absl::StartsWith(flag, "no")) known = absl::FindCommandLineFlag(flag.substr(2));
      if (known != nullptr) {
        const std::vector<std::string> others = commands_reading(known, name);
        if (!others.empty()) whose = absl::StrCat(" (a flag of ", absl::StrJoin(others, ", "), ", not of ", name, ")");
      }
      throw UsageError{absl::StrCat("unknown flag ", dashed(flag), whose, "; ", see_help)};
    }
    const absl::CommandLineFlag* f = it->second;
    if (negated) {
      if (value) throw UsageError{absl::StrCat(a, ": --no", it->first, " takes no value; ", see_help)};
      value = "false";
    } else if (!value) {
      if (f->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        throw UsageError{absl::StrCat(dashed(flag), " needs a value; ", see_help)};
      }
    }
    std::string error;
    absl::CommandLineFlag* settable = absl::FindCommandLineFlag(f->Name());  // the handle is const
    if (settable == nullptr || !settable->ParseFrom(*value, &error)) {
      throw UsageError{absl::StrCat(dashed(it->first), ": ", error, "; ", see_help)};
    }
    g_given_flags.insert(it->first);
  }
  return positional;
}

}  // namespace
}  // namespace dlfeed::cli

int main(int argc, char** argv) {
  using dlfeed::cli::kUsageError;
#if DLFEED_WITH_S3
  // s3:// URLs wherever a path goes.
  if (absl::Status st = dlfeed::s3::install(); !st.ok()) {
    std::fprintf(stderr, "dlfeed: %s\n", std::string(st.message()).c_str());
    return 1;
  }
#endif
  using dlfeed::cli::registry;
  // `dlfeed help CMD` is `dlfeed CMD --help`.
  std::vector<char*> help_of;
  if (argc == 3 && std::strcmp(argv[1], "help") == 0) {
    static char flag[] = "--help";
    help_of = {argv[0], argv[2], flag};
    argv = help_of.data();
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(dlfeed::cli::overview().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? kUsageError : 0;
  }
  auto it = registry().find(argv[1]);
  if (it == registry().end() || it->second.run == nullptr) {
    std::fprintf(stderr, "dlfeed: unknown command '%s'\n\n%s", argv[1], dlfeed::cli::overview().c_str());
    return kUsageError;
  }
  const std::string name = argv[1];
  const dlfeed::cli::Command& command = it->second;
  std::string match;
  if (const std::string mode = dlfeed::cli::usage_request(argc, argv, &match); !mode.empty()) {
    dlfeed::cli::print_usage(name, command, mode, match);
    return 0;
  }
  std::vector<std::string> args;
  try {
    args = dlfeed::cli::parse_flags(name, command, argc, argv);
  } catch (const dlfeed::cli::UsageError& e) {
    std::fprintf(stderr, "dlfeed %s: %s\n", name.c_str(), e.message.c_str());
    return kUsageError;
  }
  try {
    return command.run(args);
  } catch (const dlfeed::Error& e) {
    std::fprintf(stderr, "dlfeed %s: error: %s\n", name.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "dlfeed %s: error: out of memory (std::bad_alloc): a size given by a flag (--batch-size, "
                 "--trace-max-events, --memory-budget, --shape) may be larger than this machine holds\n",
                 name.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlfeed %s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}
