// SPDX-License-Identifier: Apache-2.0
// Links against the installed dlfeed and indexes the file given on the command line.
// Includes the umbrella header, so every installed public header compiles here.
#include <cstdio>

#include "dlfeed/dlfeed.h"

int main(int argc, char** argv) {
  auto dt = dlfeed::DType::parse("<f4");
  if (!dt.ok() || dt->name() != "float32") return 1;
  if (argc > 1) {
    auto index = dlfeed::open_dataset({argv[1]}, {});
    if (!index.ok()) {
      std::fprintf(stderr, "%s\n", index.status().ToString().c_str());
      return 1;
    }
    std::printf("%llu samples\n", static_cast<unsigned long long>(index->size()));
  }
  std::printf("consumer ok\n");
  return 0;
}
