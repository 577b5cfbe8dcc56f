// SPDX-License-Identifier: Apache-2.0
// First touch of fresh anonymous memory: 512 MiB split over N threads, each
// mapping its part and writing one byte a page; HUGE=1 asks for huge pages
// (MADV_HUGEPAGE, as dlfeed's large buffers do). Prints GB/s.
//   gcc -O2 -pthread first_touch.c -o first_touch && ./first_touch 2
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static size_t per;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void* touch(void* unused) {
  (void)unused;
  char* p = mmap(0, per, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (getenv("HUGE")) madvise(p, per, MADV_HUGEPAGE);
  for (size_t i = 0; i < per; i += 4096) p[i] = 1;
  return p;
}

int main(int argc, char** argv) {
  const int t = argc > 1 ? atoi(argv[1]) : 1;
  const size_t n = 512ul << 20;
  pthread_t th[64];
  per = n / t;
  const double t0 = now();
  for (int i = 0; i < t; i++) pthread_create(&th[i], 0, touch, 0);
  for (int i = 0; i < t; i++) pthread_join(th[i], 0);
  printf("%d threads%s: %.2f GB/s\n", t, getenv("HUGE") ? ", huge pages" : "", n / (now() - t0) / 1e9);
  return 0;
}
