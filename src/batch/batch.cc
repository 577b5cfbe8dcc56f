// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/batch/batch.h"

#include "batch/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

namespace dlfeed::inline DLFEED_ABI {
namespace {
constexpr size_t kMapAtLeast = 256 * 1024;
// Buffers this big are mapped in whole 2 MiB huge pages where the kernel
// allows (transparent huge pages in "madvise" or "always" mode).
constexpr size_t kHugeAtLeast = 4 << 20;
constexpr size_t kHuge = 2 << 20;
constexpr std::align_val_t kAlignment{64};

// Whether the kernel gives MADV_HUGEPAGE mappings huge pages on a fault:
// transparent huge pages "always" or "madvise", not "never" (read once).
bool huge_pages_on() {
  static const bool on = [] {
    std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == nullptr) return false;
    char line[128] = {};
    const bool got = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    return got && std::strstr(line, "[never]") == nullptr;
  }();
  return on;
}
}  // namespace

namespace detail {
size_t huge_length(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

// A 128 MiB batch buffer is then 64 page faults, not 32,768, and copies into
// it miss the TLB far less. With huge pages it is not populated here: its
// few faults are taken by whatever first writes it (the reads that fill it,
// a decode or copy), while other reads are in flight. Populating first held
// the look-ahead thread, and with it every read of the batch, for as long as
// this VM took to back the fresh memory (6-224 ms for 46 MB). Without huge
// pages a batch buffer is populated: thousands of small faults cost more one
// by one.
void* map_huge(size_t bytes, bool populate) {
  const size_t length = huge_length(bytes);
  void* raw = ::mmap(nullptr, length + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + length + kHuge;
  char* const p = static_cast<char*>(raw) + (aligned - start);
  if (end > aligned + length) ::munmap(p + length, end - (aligned + length));
  const bool advised = ::madvise(p, length, MADV_HUGEPAGE) == 0;  // refused: small pages, still correct
  if ((advised && huge_pages_on()) || !populate) return p;
#ifdef MADV_POPULATE_WRITE
  if (::madvise(p, length, MADV_POPULATE_WRITE) == 0) return p;
#endif
  for (size_t i = 0; i < length; i += 4096) static_cast<volatile char*>(p)[i] = 0;
  return p;
}

void unmap_huge(void* p, size_t bytes) noexcept {
  if (p != nullptr) ::munmap(p, huge_length(bytes));
}
}  // namespace detail

void* allocate_buffer(size_t bytes) {
  if (bytes >= kHugeAtLeast) return detail::map_huge(bytes, /*populate=*/true);
  if (bytes >= kMapAtLeast) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
  }
  return ::operator new(bytes, kAlignment);
}

void free_buffer(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes >= kHugeAtLeast) {
    detail::unmap_huge(p, bytes);
  } else if (bytes >= kMapAtLeast) {
    ::munmap(p, bytes);
  } else {
    ::operator delete(p, kAlignment);
  }
}

const BatchField* Batch::field(const std::string& name) const {
  for (const BatchField& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

uint64_t Batch::nbytes() const {
  uint64_t n = 0;
  for (const BatchField& f : fields) n += f.bytes.size();
  return n;
}

struct BufferPool::State {
  std::mutex mu;
  std::vector<ByteBuffer> free;
  uint64_t cached = 0;  // sum of free buffers' capacities
  uint64_t allocations = 0;
  uint64_t reuses = 0;
  std::shared_ptr<const BufferAllocator> allocator;
};

std::shared_ptr<BufferPool::State> BufferPool::make_state() { return std::make_shared<State>(); }

ByteBuffer BufferPool::take(size_t size) {
  if (size == 0) return ByteBuffer();
  std::shared_ptr<const BufferAllocator> allocator;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // Best fit: the smallest cached buffer that is big enough, and not more
    // than twice as big: the loader's memory budget counts the bytes asked
    // for, so handing out a much larger buffer would hide resident memory
    // from it (a 4 MiB buffer serving a 1 KiB request).
    // Among equals the most recently given back: its bytes are the likeliest
    // to be in the CPU's caches still, so the reads into it miss less.
    auto best = state_->free.end();
    for (auto it = state_->free.begin(); it != state_->free.end(); ++it) {
      if (it->capacity() >= size && it->capacity() / 2 <= size &&
          (best == state_->free.end() || it->capacity() <= best->capacity())) {
        best = it;
      }
    }
    if (best != state_->free.end()) {
      ByteBuffer b = std::move(*best);
      state_->free.erase(best);
      state_->cached -= b.capacity();
      ++state_->reuses;
      b.resize(size);  // within capacity: no allocation
      return b;
    }
    ++state_->allocations;
    allocator = state_->allocator;
  }
  ByteBuffer b{DefaultInitAllocator<std::byte>(std::move(allocator))};
  b.resize(size);
  return b;
}

void BufferPool::set_allocator(std::shared_ptr<const BufferAllocator> allocator) {
  std::vector<ByteBuffer> drop;  // freed outside the lock
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->allocator = std::move(allocator);
  drop.swap(state_->free);
  state_->cached = 0;
}

void BufferPool::give(ByteBuffer&& buffer) {
  if (buffer.capacity() == 0) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  // A buffer of another allocator (made before set_allocator) is not kept.
  if (buffer.get_allocator().source != state_->allocator) return;
  if (state_->free.size() >= max_cached_) {
    // Drop the smallest to keep the big ones.
    auto smallest = std::min_element(state_->free.begin(), state_->free.end(),
                                     [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
    if (smallest->capacity() >= buffer.capacity()) return;
    state_->cached += buffer.capacity() - smallest->capacity();
    *smallest = std::move(buffer);
    return;
  }
  state_->cached += buffer.capacity();
  state_->free.push_back(std::move(buffer));
}

uint64_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->cached;
}

void BufferPool::trim_to(uint64_t max_bytes) {
  std::vector<ByteBuffer> drop;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto& f = state_->free;
    if (state_->cached <= max_bytes) return;
    // Stable: equal buffers keep the order they were given back in (take() prefers the latest).
    std::stable_sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
    while (state_->cached > max_bytes && !f.empty()) {
      state_->cached -= f.back().capacity();
      drop.push_back(std::move(f.back()));
      f.pop_back();
    }
  }
}

uint64_t BufferPool::allocations() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->allocations;
}

uint64_t BufferPool::reuses() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reuses;
}

}  // namespace dlfeed
