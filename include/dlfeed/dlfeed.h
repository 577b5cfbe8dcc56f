// SPDX-License-Identifier: Apache-2.0
// Everything a trainer uses from dlfeed, in one include:
//
//   #include "dlfeed/dlfeed.h"
//
// Not here: dlfeed/mpi/mpi.h (the dlfeed::mpi component, which needs MPI's
// headers), dlfeed/s3/s3.h (the dlfeed::s3 component, linked on its own),
// dlfeed/detail/ (internals shared with dlfeed's own tools and
// tests). The dataset writers and raw-read measurements behind the dlfeed
// command line are private (src/dev/, src/dev/raw_read.h).
// tests/umbrella_check.cmake keeps this list complete.
#pragma once

#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/counters/snapshot.h"
#include "dlfeed/dtype.h"
#include "dlfeed/error.h"
#include "dlfeed/format/deflate.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/format.h"
#include "dlfeed/format/indexed_binary.h"
#include "dlfeed/format/npy.h"
#include "dlfeed/format/tfrecord.h"
#include "dlfeed/format/tfrecord_framing.h"
#include "dlfeed/format/zip.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/io/object_store.h"
#include "dlfeed/loader.h"
#include "dlfeed/loader_state.h"
#include "dlfeed/order/order.h"
#include "dlfeed/order/quality.h"
#include "dlfeed/order/random.h"
#include "dlfeed/plan/plan.h"
#include "dlfeed/plan/policy.h"
#include "dlfeed/sample.h"
#include "dlfeed/staging/staging.h"
