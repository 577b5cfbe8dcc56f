#include "dlfeed/batch/batch.h"

#include <algorithm>
#include <mutex>

namespace dlfeed {

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
  uint64_t allocations = 0;
  uint64_t reuses = 0;
};

std::shared_ptr<BufferPool::State> BufferPool::make_state() { return std::make_shared<State>(); }

ByteBuffer BufferPool::take(size_t size) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // Best fit: the smallest cached buffer that is big enough.
    auto best = state_->free.end();
    for (auto it = state_->free.begin(); it != state_->free.end(); ++it) {
      if (it->capacity() >= size && (best == state_->free.end() || it->capacity() < best->capacity())) best = it;
    }
    if (best != state_->free.end()) {
      ByteBuffer b = std::move(*best);
      state_->free.erase(best);
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
    *smallest = std::move(buffer);
    return;
  }
  state_->free.push_back(std::move(buffer));
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
