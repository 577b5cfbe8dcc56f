// The dlfeed command line: `dlfeed <command> [flags] [args]`.
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace dlfeed::cli

int main(int argc, char** argv) {
  using dlfeed::cli::registry;
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
