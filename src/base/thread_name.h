// SPDX-License-Identifier: Apache-2.0
// Private: names dlfeed's own threads ("dlfeed-..."), so tools (top -H, gdb,
// perf) and the tests can tell them from the application's and oneTBB's.
#pragma once

#include <errno.h>
#include <pthread.h>

#include <cstring>
#include <string>
#include <thread>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Names `t` (from the thread that started it, so the name is set before
/// anyone can look); `name` is at most 15 characters.
inline void name_thread(std::thread& t, const char* name) { pthread_setname_np(t.native_handle(), name); }

/// While it lives, a thread of dlfeed's ("dlfeed-...") goes by the
/// process's name. A thread inherits its creator's name, and oneTBB starts
/// a worker from whichever thread asks it for work; its workers are the
/// process's and outlive every loader, so a call that may start one (a task
/// queued in an arena, say) is made under this guard.
class ProcessNamed {
 public:
  ProcessNamed() {
    thread_local char own[16] = {};  // this thread's name, once it is dlfeed's (a thread stays so)
    if (own[0] == 0) {
      char name[16] = {};
      if (pthread_getname_np(pthread_self(), name, sizeof name) != 0 || std::strncmp(name, "dlfeed", 6) != 0) return;
      std::memcpy(own, name, sizeof name);
    }
    if (pthread_setname_np(pthread_self(), process_name()) == 0) own_ = own;
  }
  ~ProcessNamed() {
    if (own_ != nullptr) pthread_setname_np(pthread_self(), own_);
  }
  ProcessNamed(const ProcessNamed&) = delete;
  ProcessNamed& operator=(const ProcessNamed&) = delete;

 private:
  static const char* process_name() {
    static const std::string name = std::string(program_invocation_short_name).substr(0, 15);
    return name.c_str();
  }
  const char* own_ = nullptr;  // renamed: the name to restore
};

}  // namespace dlfeed::detail
