// SPDX-License-Identifier: Apache-2.0
// A batch as the consumer sees it: sample ids and, per field, the decoded
// samples. Equal-shape samples are one contiguous [B, ...] buffer; ragged
// samples are the same buffer with per-sample offsets and shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

/// Memory for batch buffers: 64-byte aligned; from 256 KiB up, whole pages
/// mapped for the buffer and unmapped when it is freed, so the resident
/// memory follows the loader's memory budget instead of malloc's caches.
DLFEED_EXPORT void* allocate_buffer(size_t bytes);
DLFEED_EXPORT void free_buffer(void* p, size_t bytes) noexcept;

/// A user's memory for the batch pool's buffers (LoaderOptions::buffer_allocator),
/// e.g. cudaHostAlloc/cudaFreeHost, or allocate_buffer then cudaHostRegister:
/// page-locked batches without dlfeed linking CUDA. The pool reuses its
/// buffers, so each is allocated (and pinned) once. allocate(bytes) returns
/// 64-byte aligned memory or throws (std::bad_alloc); free(p, bytes) gets the
/// same bytes back. Both may run on any loader thread, and after the loader
/// is gone (a batch may outlive it), so they must stay valid as long as the
/// object does (the buffers hold it by a shared_ptr).
struct DLFEED_EXPORT BufferAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* p, size_t bytes)> free;
};

/// An allocator for batch buffers: 64-byte aligned (what TensorFlow and
/// SIMD code want from a zero-copy tensor), and resize() leaves new bytes
/// uninitialised, since reads or decode overwrite them anyway. `source`:
/// the user's BufferAllocator (null: allocate_buffer); it moves with the
/// buffer, so a buffer is always freed by what allocated it.
template <typename T>
struct DefaultInitAllocator {
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  DefaultInitAllocator() noexcept = default;
  explicit DefaultInitAllocator(std::shared_ptr<const BufferAllocator> s) noexcept : source(std::move(s)) {}
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>& o) noexcept : source(o.source) {}
  T* allocate(size_t n) {
    if (source) {
      void* p = source->allocate(n * sizeof(T));
      if (p == nullptr) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
    return static_cast<T*>(allocate_buffer(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (source) {
      source->free(p, n * sizeof(T));
    } else {
      free_buffer(p, n * sizeof(T));
    }
  }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const DefaultInitAllocator<U>& o) const noexcept {
    return source == o.source;
  }
  std::shared_ptr<const BufferAllocator> source;
};

/// A byte buffer that grows without zero-filling.
using ByteBuffer = std::vector<std::byte, DefaultInitAllocator<std::byte>>;

/// One field of a batch (e.g. "x" or "labels"): the samples' bytes, in order.
struct DLFEED_EXPORT BatchField {
  std::string name;
  DType dtype;
  /// [B, ...] when every sample has the same shape; empty when ragged.
  Shape shape;
  /// All samples' bytes back to back, in batch order.
  std::span<const std::byte> bytes;
  /// Ragged batches: sample i is bytes[offsets[i], offsets[i+1]) with
  /// sample_shapes[i]. Uniform batches have these too (offsets regular).
  std::vector<uint64_t> offsets;
  std::vector<Shape> sample_shapes;

  bool ragged() const { return shape.empty(); }
  size_t size() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  /// Sample i's bytes.
  std::span<const std::byte> sample(size_t i) const { return bytes.subspan(offsets[i], offsets[i + 1] - offsets[i]); }
  /// Typed view of all elements (T must match dtype's size).
  template <typename T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
};

/// One batch: its place in the epoch, its sample ids and its fields. Batches
/// are handed out as shared_ptr<const Batch>; the memory returns to the
/// loader's pool (and its memory budget) when the last reference goes.
/// Move-only: the fields' spans point into `storage`, so a copy would point
/// into the original's buffers; a move keeps them valid (the buffers move).
struct DLFEED_EXPORT Batch {
  Batch() = default;
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&&) noexcept = default;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch() = default;

  uint64_t epoch = 0;
  uint64_t index = 0;     // batch number within the epoch (for this rank)
  uint64_t position = 0;  // rank order position of the first sample
  std::vector<uint64_t> sample_ids;
  std::vector<BatchField> fields;

  size_t size() const { return sample_ids.size(); }
  /// The field called `name`, or nullptr.
  const BatchField* field(const std::string& name) const;
  /// Bytes of all fields.
  uint64_t nbytes() const;

  // Owned storage behind the fields' spans (from the pool).
  std::vector<ByteBuffer> storage;
};

/// Recycles byte buffers so the hot path does not allocate per batch or per
/// sample once warm. Thread-safe.
class DLFEED_EXPORT BufferPool {
 public:
  explicit BufferPool(size_t max_cached = 64) : max_cached_(max_cached) {}
  /// Buffers allocated from now on come from `allocator` (null: allocate_buffer);
  /// cached ones made by another are freed, so every buffer handed out is the new kind's.
  void set_allocator(std::shared_ptr<const BufferAllocator> allocator);
  /// A buffer of exactly `size` bytes (contents unspecified), reusing a
  /// cached one whose capacity is at least `size` and at most twice it when
  /// there is one; size 0 gives an empty buffer and takes nothing.
  ByteBuffer take(size_t size);
  /// Gives a buffer back for reuse.
  void give(ByteBuffer&& buffer);
  /// Bytes held by cached (free) buffers.
  uint64_t cached_bytes() const;
  /// Frees cached buffers, largest first, until at most `max_bytes` stay.
  void trim_to(uint64_t max_bytes);
  uint64_t allocations() const;  // buffers that had to be allocated or grown
  uint64_t reuses() const;

 private:
  struct State;
  size_t max_cached_;
  std::shared_ptr<State> state_ = make_state();
  static std::shared_ptr<State> make_state();
};

}  // namespace dlfeed
