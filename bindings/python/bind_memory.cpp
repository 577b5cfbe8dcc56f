// SPDX-License-Identifier: Apache-2.0
// Page-locked batch buffers for the Python GPU path: a BufferAllocator that
// maps each pool buffer as libdlfeed does, then registers it with the CUDA
// runtime (cudaHostRegister) through function pointers Python found in the
// runtime PyTorch loaded, and unregisters it before it is unmapped. The pool
// reuses its buffers, so each is registered once; libdlfeed never links
// CUDA, and no Python (nor the GIL) runs on the loader's threads.
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "common.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/loader.h"

namespace dlfeed::python {
namespace {

using RegisterFn = int (*)(void*, size_t, unsigned int);  // cudaHostRegister
using UnregisterFn = int (*)(void*);                      // cudaHostUnregister

/// What the registering allocator did, for Python to show (and tests to check).
struct PinStats {
  std::atomic<uint64_t> registered{0}, registered_bytes{0}, failures{0}, unregistered{0};
  std::atomic<int> last_error{0};
};

/// The allocator and its stats, as Python holds them.
struct PinnedAllocator {
  std::shared_ptr<const BufferAllocator> allocator;
  std::shared_ptr<PinStats> stats;
};

PinnedAllocator make_pinned(uintptr_t register_fn, uintptr_t unregister_fn, uint64_t min_bytes, unsigned flags) {
  if (register_fn == 0 || unregister_fn == 0) throw py::value_error("page_locked_allocator: null function address");
  auto reg = reinterpret_cast<RegisterFn>(register_fn);
  auto unreg = reinterpret_cast<UnregisterFn>(unregister_fn);
  auto stats = std::make_shared<PinStats>();
  struct Live {
    std::mutex mu;
    std::unordered_set<void*> pinned;
  };
  auto live = std::make_shared<Live>();
  auto a = std::make_shared<BufferAllocator>();
  // Only buffers of whole pages of their own are registered (allocate_buffer
  // maps those from 256 KiB up): a registration covers whole pages, and two
  // small buffers sharing a page could not both be registered.
  const uint64_t floor = std::max<uint64_t>(min_bytes, 256 * 1024);
  a->allocate = [reg, stats, live, floor, flags](size_t bytes) {
    void* p = allocate_buffer(bytes);
    if (bytes < floor) return p;
    const int rc = reg(p, bytes, flags);
    if (rc != 0) {
      stats->failures.fetch_add(1, std::memory_order_relaxed);
      stats->last_error.store(rc, std::memory_order_relaxed);
      return p;  // still correct memory, copied as pageable
    }
    stats->registered.fetch_add(1, std::memory_order_relaxed);
    stats->registered_bytes.fetch_add(bytes, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(live->mu);
    live->pinned.insert(p);
    return p;
  };
  a->free = [unreg, stats, live](void* p, size_t bytes) {
    bool pinned = false;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      pinned = live->pinned.erase(p) > 0;
    }
    if (pinned) {
      (void)unreg(p);  // before the pages go back: never a registration of unmapped memory
      stats->unregistered.fetch_add(1, std::memory_order_relaxed);
    }
    free_buffer(p, bytes);
  };
  return {std::move(a), std::move(stats)};
}

}  // namespace

void bind_memory(py::module_& m) {
  py::class_<PinnedAllocator>(m, "PinnedAllocator",
                              "Batch buffers registered page-locked once each (private: use pin_memory=True).")
      .def_property_readonly("registered", [](const PinnedAllocator& a) { return a.stats->registered.load(); })
      .def_property_readonly("registered_bytes",
                             [](const PinnedAllocator& a) { return a.stats->registered_bytes.load(); })
      .def_property_readonly("failures", [](const PinnedAllocator& a) { return a.stats->failures.load(); })
      .def_property_readonly("last_error", [](const PinnedAllocator& a) { return a.stats->last_error.load(); })
      .def_property_readonly("unregistered", [](const PinnedAllocator& a) { return a.stats->unregistered.load(); });
  m.def("page_locked_allocator", &make_pinned, py::arg("register_fn"), py::arg("unregister_fn"),
        py::arg("min_bytes") = 256 * 1024, py::arg("flags") = 1,
        "An allocator for the batch pool that registers each buffer of at least min_bytes with "
        "register_fn(ptr, bytes, flags) -> int (cudaHostRegister's address; flags 1: portable) and "
        "unregisters it with unregister_fn(ptr) (cudaHostUnregister's) before freeing it.");
  // LoaderOptions.buffer_allocator: set from a PinnedAllocator (None: dlfeed's own pages).
  auto options = py::reinterpret_borrow<py::class_<LoaderOptions>>(m.attr("LoaderOptions"));
  options.def_property(
      "buffer_allocator", [](const LoaderOptions& o) { return static_cast<bool>(o.buffer_allocator); },
      [](LoaderOptions& o, const std::optional<PinnedAllocator>& a) {
        o.buffer_allocator = a ? a->allocator : nullptr;
      },
      "Set a PinnedAllocator (_dlfeed.page_locked_allocator) or None; reads back whether one is set.");
}

}  // namespace dlfeed::python
