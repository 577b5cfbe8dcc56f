// SPDX-License-Identifier: Apache-2.0
// dlfeed report [--out-dir DIR] FILE...: turns a counters summary (dlfeed run
// --summary-json) and/or a trace (dlfeed run --trace, Chrome or DFTracer
// format; told apart by content) into PNG pictures:
// breakdown.png (per epoch: I/O exposed, I/O hidden, decode, compute) and
// timeline.png (reads in flight, stalls, compute).
//
// Drawing is done by tools/dlfeed_report.py with matplotlib (axes, labels and
// legends for free, and the report is an offline step, far from the loader's
// hot path); this command finds that script and a Python to run it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "command.h"

ABSL_FLAG(std::string, out_dir, ".", "Folder for the PNG files");
ABSL_FLAG(std::string, python, "",
          "Python with matplotlib (default: $DLFEED_PYTHON, else the python beside this binary, else python3)");
ABSL_FLAG(std::string, script, "",
          "The drawing script (default: $DLFEED_REPORT_SCRIPT, else share/dlfeed/dlfeed_report.py beside bin/)");

namespace dlfeed::cli {
namespace {

namespace fs = std::filesystem;

// Where this binary is: <prefix>/bin/dlfeed installed (a wheel's or a
// venv's bin/ too), <build>/tools/dlfeed in a build tree.
fs::path self_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path();
}

// The drawing script sits at <prefix>/share/dlfeed/dlfeed_report.py: installed
// there, and copied to <build>/share/dlfeed/ by the build.
std::string find_script() {
  std::string s = absl::GetFlag(FLAGS_script);
  if (!s.empty()) return s;
  if (const char* e = std::getenv("DLFEED_REPORT_SCRIPT"); e && *e) return e;
  return (self_dir().parent_path() / "share" / "dlfeed" / "dlfeed_report.py").string();
}

// The Python to draw with: --python, $DLFEED_PYTHON, the python beside this
// binary (a venv's or a wheel's bin/), else python3 on PATH. Nothing from the
// build machine: the script says what to install when matplotlib is missing.
std::string find_python() {
  std::string s = absl::GetFlag(FLAGS_python);
  if (!s.empty()) return s;
  if (const char* e = std::getenv("DLFEED_PYTHON"); e && *e) return e;
  std::error_code ec;
  const fs::path beside = self_dir() / "python";
  if (!self_dir().empty() && fs::exists(beside, ec)) return beside.string();
  return "python3";
}

int run_report(const std::vector<std::string>& args) {
  std::string summary, trace;
  for (const std::string& a : args) {
    std::ifstream f(a, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "dlfeed report: error: %s: cannot open\n", a.c_str());
      return 1;
    }
    std::string head(512, '\0');
    f.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(f.gcount()));
    // A summary begins with its schema, laid out compact or pretty-printed (jq, json.tool).
    head.erase(std::remove_if(head.begin(), head.end(), [](char c) { return absl::ascii_isspace(c); }), head.end());
    // Another file with a schema of ours (a calibration, a state) is neither:
    // said as what it is, not as JSON the trace reader cannot parse.
    const std::string schema_key = "{\"schema\":\"";
    if (head.rfind(schema_key, 0) == 0 && head.rfind("{\"schema\":\"dlfeed.counters/", 0) != 0) {
      const std::string schema = head.substr(schema_key.size(), head.find('"', schema_key.size()) - schema_key.size());
      std::fprintf(stderr,
                   "dlfeed report: error: %s: a %s file, not a summary (dlfeed run --summary-json) or a trace "
                   "(dlfeed run --trace)%s\n",
                   a.c_str(), schema.c_str(),
                   schema.rfind("dlfeed.calibration/", 0) == 0
                       ? "; a calibration is read by `dlfeed run --calibration FILE`, which reports efficiency "
                         "against it"
                       : "");
      return 2;
    }
    std::string& slot = head.rfind("{\"schema\":\"dlfeed.counters/", 0) == 0 ? summary : trace;
    if (!slot.empty()) {
      std::fprintf(stderr, "dlfeed report: error: two %s files (%s, %s): give one of each at most\n",
                   &slot == &summary ? "summary" : "trace", slot.c_str(), a.c_str());
      return 2;
    }
    slot = a;
  }
  if (summary.empty() && trace.empty()) {
    std::fprintf(stderr,
                 "dlfeed report: give a summary (dlfeed run --summary-json) and/or a trace "
                 "(dlfeed run --trace) file, and --out-dir DIR\n");
    return 2;
  }
  const std::string python = find_python();
  const std::string script = find_script();
  std::vector<std::string> argv = {python, script, "--out", absl::GetFlag(FLAGS_out_dir)};
  if (!summary.empty()) argv.insert(argv.end(), {"--summary", summary});
  if (!trace.empty()) argv.insert(argv.end(), {"--trace", trace});
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("dlfeed report: fork");
    return 1;
  }
  if (pid == 0) {
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "dlfeed report: cannot run %s (set --python or DLFEED_PYTHON to a Python with matplotlib)\n",
                 cargv[0]);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) {
    std::perror("dlfeed report: waitpid");
    return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::fprintf(stderr, "dlfeed report: %s %s was killed\n", python.c_str(), script.c_str());
  return 1;
}

std::vector<FlagGroup> report_flags() { return {flag_group("", FLAGS_out_dir, FLAGS_python, FLAGS_script)}; }

}  // namespace

DLFEED_COMMAND(report, "draw a counters summary / trace as PNG (breakdown per epoch, timeline)",
               "SUMMARY.json and/or TRACE", run_report, report_flags);

}  // namespace dlfeed::cli
