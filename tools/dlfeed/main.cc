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

std::string g_flag_file;

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
  if (it == registry().end()) {
    std::fprintf(stderr, "dlfeed: unknown command '%s'\n\n%s", argv[1], dlfeed::cli::overview().c_str());
    return 2;
  }
  const std::string name = argv[1];
  dlfeed::cli::g_flag_file = it->second.flag_file;
  absl::FlagsUsageConfig config;
  // --help lists the flags of this command's file only.
  // A command's flags may also live in helper files named after it
  // (tools/dlfeed/run_scale.cc for run).
  config.contains_help_flags = [](absl::string_view file) {
    const absl::string_view own = dlfeed::cli::g_flag_file;
    const absl::string_view stem = own.substr(0, own.size() - (absl::EndsWith(own, ".cc") ? 3 : 0));
    return absl::EndsWith(own, file) || absl::EndsWith(file, own) ||
           absl::StrContains(file, "tools/dlfeed/common") ||
           (!stem.empty() && absl::StrContains(file, absl::StrCat(stem.substr(stem.rfind('/') + 1), "_")) &&
            absl::StrContains(file, "tools/dlfeed/"));
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
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t end = std::min(a.find('='), a.size());
      for (size_t j = 2; j < end; ++j) {
        if (a[j] == '-') a[j] = '_';
      }
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
