// SPDX-License-Identifier: Apache-2.0
// Symbol visibility and the ABI version of dlfeed's public API.
//
// libdlfeed is compiled with hidden visibility: a shared libdlfeed exports
// only what the public headers mark DLFEED_EXPORT, so internals (the
// pipeline's stages, the I/O engine, the dataset writers) are not part of
// its ABI and cannot clash with a program's own symbols.
//
// Everything dlfeed declares lives in the inline namespace dlfeed::DLFEED_ABI.
// Code says dlfeed::Loader; the linker sees dlfeed::v0_1::Loader, so a
// program built against one ABI fails to link against another instead of
// misbehaving at run time. DLFEED_ABI follows the project's major and minor
// version (0.x releases may break the ABI). The version comes from the file
// VERSION at the top of the tree; CMakeLists.txt stops the configure when
// these lines do not match it (tests/python/packaging/test_version.py checks all four
// places agree).
#pragma once

#define DLFEED_VERSION_MAJOR 0
#define DLFEED_VERSION_MINOR 1
#define DLFEED_VERSION_PATCH 0
#define DLFEED_VERSION_STRING "0.1.0"
#define DLFEED_ABI v0_1

#if defined(__GNUC__) || defined(__clang__)
#define DLFEED_EXPORT __attribute__((visibility("default")))
#else
#define DLFEED_EXPORT
#endif
