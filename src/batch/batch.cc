#include "dlfeed/batch/batch.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <mutex>

namespace dlfeed {
namespace {
constexpr size_t kMapAtLeast = 256 * 1024;
constexpr std::align_val_t kAlignment{64};
}  // namespace

void* allocate_buffer(size_t bytes) {
  if (bytes >= kMapAtLeast) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
  }
  return ::operator new(bytes, kAlignment);
}

void free_buffer(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes >= kMapAtLeast) {
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
};

std::shared_ptr<BufferPool::State> BufferPool::make_state() { return std::make_shared<State>(); }

ByteBuffer BufferPool::take(size_t size) {
  if (size == 0) return ByteBuffer();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // Best fit: the smallest cached buffer that is big enough, and not more
    // than twice as big: the loader's memory budget counts the bytes asked
    // for, so handing out a much larger buffer would hide resident memory
    // from it (a 4 MiB buffer serving a 1 KiB request).
    auto best = state_->free.end();
    for (auto it = state_->free.begin(); it != state_->free.end(); ++it) {
      if (it->capacity() >= size && it->capacity() / 2 <= size &&
          (best == state_->free.end() || it->capacity() < best->capacity())) {
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
  }
  ByteBuffer b;
  b.resize(size);
  return b;
}

void BufferPool::give(ByteBuffer&& buffer) {
  if (buffer.capacity() == 0) return;
  std::lock_guard<std::mutex> lock(state_->mu);
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
    std::sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
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
