// SPDX-License-Identifier: Apache-2.0
// Subcommands of the dlfeed command line register themselves here.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"

namespace dlfeed::cli {

/// A titled group of flags in a command's --help ("" : the command's own).
struct FlagGroup {
  std::string title;
  std::vector<const absl::CommandLineFlag*> flags;
};

/// The flags `f...` (ABSL_FLAG objects) as one group.
template <class... T>
FlagGroup flag_group(std::string title, const absl::Flag<T>&... f) {
  return {std::move(title), {&absl::GetFlagReflectionHandle(f)...}};
}

/// One subcommand: its name, one-line summary, its positional arguments (for
/// the usage line), every flag it reads, and its entry point, called with the
/// positional arguments left after flag parsing (argv[0] excluded).
///
/// A command accepts exactly the flags its `flags` lists and --help shows
/// exactly those: a flag it reads must be listed (tests/python/cli/test_cli_help.py
/// checks the lists against the sources).
struct Command {
  std::string summary;
  std::string args;
  int (*run)(const std::vector<std::string>& args) = nullptr;
  std::vector<FlagGroup> (*flags)() = nullptr;
};

std::map<std::string, Command>& registry();

/// Whether flag `name` (underscores) was given on the command line, with any
/// value (a preset yields to a flag given explicitly, even at its default).
bool flag_given(const std::string& name);

/// Registers a command at static-initialisation time.
struct Registrar {
  Registrar(const char* name, const char* summary, const char* args, int (*run)(const std::vector<std::string>&),
            std::vector<FlagGroup> (*flags)()) {
    registry()[name] = Command{summary, args, run, flags};
  }
};

}  // namespace dlfeed::cli

/// DLFEED_COMMAND(inspect, "list a dataset's samples", "PATH...", run_inspect, inspect_flags);
/// where inspect_flags() returns the groups of flags run_inspect reads.
#define DLFEED_COMMAND(name, summary, args, fn, flags) \
  static ::dlfeed::cli::Registrar dlfeed_cmd_##name(#name, summary, args, fn, flags)
