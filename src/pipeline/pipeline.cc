#include "pipeline/pipeline.h"

#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"

namespace dlfeed::pipeline {

#if defined(__SANITIZE_THREAD__)
std::mutex& tsan_handshake_mutex() {
  static std::mutex mu;
  return mu;
}
#endif

struct Pipeline::Arena {
  explicit Arena(uint32_t threads) : arena(static_cast<int>(threads)) {}
  tbb::task_arena arena;
};

Pipeline::Pipeline(uint32_t threads) : threads_(threads), arena_(std::make_unique<Arena>(threads)) {}

Pipeline::~Pipeline() = default;

void Pipeline::run(Lookahead& source, const Decoder& decoder, Collator& collator, const std::atomic<bool>& stop) {
  const size_t tokens = std::clamp<size_t>(threads_ * 2 + 8, 4, 64);
  try {
    tsan_handshake();
    arena_->arena.execute([&] {
      tbb::parallel_pipeline(
          tokens,
          tbb::make_filter<void, Work*>(tbb::filter_mode::serial_in_order,
                                        [&](tbb::flow_control& fc) -> Work* {
                                          tsan_handshake();
                                          Work* token = source.next();
                                          if (token == nullptr) fc.stop();
                                          tsan_handshake();
                                          return token;
                                        }) &
              tbb::make_filter<Work*, Work*>(tbb::filter_mode::parallel,
                                             [&](Work* w) {
                                               tsan_handshake();
                                               if (w) decoder.decode(*w);
                                               tsan_handshake();
                                               return w;
                                             }) &
              tbb::make_filter<Work*, void>(tbb::filter_mode::serial_in_order, [&](Work* w) {
                tsan_handshake();
                if (w) {
                  std::shared_ptr<Work> keep = std::move(w->self);
                  if (!stop) collator.collate(*w);
                }
                tsan_handshake();
              }));
    });
    tsan_handshake();
  } catch (const std::exception& e) {
    source.drop();
    collator.fail(absl::InternalError(absl::StrCat("loader pipeline: ", e.what())));
  }
  source.drop();
  collator.end();
}

}  // namespace dlfeed::pipeline
