// Subcommands of the dlfeed command line register themselves here.
#pragma once

#include <map>
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
};

std::map<std::string, Command>& registry();

/// Registers a command at static-initialisation time.
struct Registrar {
  Registrar(const char* name, const char* summary, int (*run)(const std::vector<std::string>&),
            const char* file) {
    registry()[name] = Command{summary, run, file};
  }
};

}  // namespace dlfeed::cli

/// DLFEED_COMMAND(generate, "write a synthetic dataset", run_generate);
#define DLFEED_COMMAND(name, summary, fn) \
  static ::dlfeed::cli::Registrar dlfeed_cmd_##name(#name, summary, fn, __FILE__)
