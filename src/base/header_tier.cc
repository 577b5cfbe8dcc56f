// SPDX-License-Identifier: Apache-2.0
// The header tier compiled once into libdlfeed (DLFEED_COMPILED_LIB, set for
// libdlfeed's objects and for every target that links dlfeed::dlfeed): each
// *-inl.h holds the bodies behind its header's declarations, here non-inline
// and exported. With dlfeed::headers alone the headers include these files
// themselves and the bodies are inline (dlfeed/detail/inline.h).
#ifndef DLFEED_COMPILED_LIB
#error "src/base/header_tier.cc is compiled with DLFEED_COMPILED_LIB (CMakeLists.txt)"
#endif

#include "dlfeed/counters/snapshot-inl.h"
#include "dlfeed/detail/error-inl.h"
#include "dlfeed/dtype-inl.h"
#include "dlfeed/format/deflate-inl.h"
#include "dlfeed/format/example-inl.h"
#include "dlfeed/format/npy-inl.h"
#include "dlfeed/format/tfrecord_framing-inl.h"
#include "dlfeed/format/zip-inl.h"
#include "dlfeed/order/order-inl.h"
#include "dlfeed/order/strategies-inl.h"
#include "dlfeed/sample-inl.h"
