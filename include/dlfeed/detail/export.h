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
// version (0.x releases may break the ABI; CMakeLists.txt checks the match).
#pragma once

#define DLFEED_ABI v0_1

#if defined(__GNUC__) || defined(__clang__)
#define DLFEED_EXPORT __attribute__((visibility("default")))
#else
#define DLFEED_EXPORT
#endif
