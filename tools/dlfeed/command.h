// Subcommands of the dlfeed command line register themselves here.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dlfeed::cli {

/// One subcommand: its name, one-line summary, and its entry point, called
/// with the positional arguments left after flag parsing (argv[0] excluded).
struct Command {
  std::string summary;
  int (*run)(const std::vector<std::string>& args) = nullptr;
  /// The source file whose flags belong to this command (for --help).
  std::string flag_file;
  /// Other tools/dlfeed files whose flags this command uses (for --help).
  std::vector<std::string> extra_flag_files;
};

std::map<std::string, Command>& registry();

/// Whether flag `name` (underscores) was given on the command line, with any
/// value (a preset yields to a flag given explicitly, even at its default).
bool flag_given(const std::string& name);

/// Registers a command at static-initialisation time.
struct Registrar {
  Registrar(const char* name, const char* summary, int (*run)(const std::vector<std::string>&),
            const char* file) {
    Command& c = registry()[name];  // may already hold extra_flag_files
    c.summary = summary;
    c.run = run;
    c.flag_file = file;
  }
};

/// Lists another file's flags in a command's --help (static-initialisation time).
struct FlagFileRegistrar {
  FlagFileRegistrar(const char* name, const char* file) { registry()[name].extra_flag_files.push_back(file); }
};

}  // namespace dlfeed::cli

/// DLFEED_COMMAND(generate, "write a synthetic dataset", run_generate);
#define DLFEED_COMMAND(name, summary, fn) \
  static ::dlfeed::cli::Registrar dlfeed_cmd_##name(#name, summary, fn, __FILE__)

/// DLFEED_COMMAND_USES_FLAGS_OF_THIS_FILE(run); in a file whose flags `run` also takes.
#define DLFEED_COMMAND_USES_FLAGS_OF_THIS_FILE(name) \
  static ::dlfeed::cli::FlagFileRegistrar dlfeed_flags_##name(#name, __FILE__)
