// SPDX-License-Identifier: Apache-2.0
// The header tier's two modes (dlfeed::headers; docs/architecture.md "Header tier").
//
// The parts of dlfeed that need no heavy dependency (the sample order, dtype,
// the NPY header parser, TFRecord framing, the tf.train.Example parser, the
// zip directory reader, the error builders) have their bodies in *-inl.h
// headers beside their declarations:
//   * header-only (dlfeed::headers alone, DLFEED_COMPILED_LIB undefined): each
//     declaring header includes its -inl.h and the bodies are `inline`;
//   * compiled (libdlfeed, and every target linking dlfeed::dlfeed, which
//     carries DLFEED_COMPILED_LIB): the -inl.h files are compiled once, in
//     src/base/header_tier.cc, as ordinary exported functions, and headers only declare.
// One program should use one mode: the definitions are the same tokens either
// way (one source), so a mixed program gets identical code, but the inline and
// the compiled copies are then two definitions of one function (an ODR
// violation the toolchain tolerates, not one to rely on). Mutable state (the
// order strategy registry) is never in the header tier: it stays in libdlfeed.
#pragma once

// DLFEED_DETAIL_BEGIN/END enclose an -inl.h's private helpers: in the one
// compiled TU an anonymous namespace (internal linkage, so the optimizer sees
// every caller, as when the bodies were in src/*.cc: measured in
// docs/performance.md, "The header tier"); inline in a header, nothing.
#if defined(DLFEED_COMPILED_LIB)
#define DLFEED_INLINE
#define DLFEED_DETAIL_BEGIN namespace {
#define DLFEED_DETAIL_END }
#else
#define DLFEED_HEADER_ONLY 1
#define DLFEED_INLINE inline
#define DLFEED_DETAIL_BEGIN
#define DLFEED_DETAIL_END
#endif
