// SPDX-License-Identifier: Apache-2.0
// An S3 server's own limit for a list of ranged GETs, as a plain C client
// gets it: one thread, libcurl's multi interface, N transfers in flight on
// N kept-alive connections, each request signed with SigV4 (libcurl's
// CURLOPT_AWS_SIGV4, as dlfeed::s3 signs), each body copied into a buffer of
// its own touched beforehand. No dlfeed code, no decode.
// bench/object_store.py compiles it (gcc -O2 ... -lcurl) and sets dlfeed
// against it.
//
//   s3_ranged_get [--parallel N] PLAN
//
// PLAN: one request a line, "URL OFFSET LENGTH" (path-style URLs). The
// credentials and region come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
// and AWS_REGION. Prints one JSON line: requests, bytes, seconds, errors, and
// the CPU seconds and minor page faults of the transfers.
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
  char* url;
  uint64_t offset, length;
} Request;

typedef struct {
  CURL* easy;
  struct curl_slist* headers;
  char* buf;
  uint64_t cap, got;
  size_t req;
} Slot;

static size_t on_body(char* data, size_t size, size_t n, void* user) {
  Slot* s = (Slot*)user;
  size_t len = size * n;
  if (s->got + len > s->cap) return 0;  // longer than asked: an error
  memcpy(s->buf + s->got, data, len);
  s->got += len;
  return len;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_s(const struct rusage* r) {
  return (double)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) + (r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1e6;
}

static const char* env_or_die(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) {
    fprintf(stderr, "s3_ranged_get: %s is not set\n", name);
    exit(2);
  }
  return v;
}

static void start(Slot* s, const Request* r, size_t index, CURLM* multi, const char* sigv4, const char* user,
                  const char* pass) {
  char range[96];
  curl_easy_reset(s->easy);
  curl_slist_free_all(s->headers);
  snprintf(range, sizeof range, "Range: bytes=%llu-%llu", (unsigned long long)r->offset,
           (unsigned long long)(r->offset + r->length - 1));
  s->headers = curl_slist_append(NULL,
                                 "x-amz-content-sha256: "
                                 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  s->headers = curl_slist_append(s->headers, range);
  s->got = 0;
  s->req = index;
  curl_easy_setopt(s->easy, CURLOPT_URL, r->url);
  curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(s->easy, CURLOPT_AWS_SIGV4, sigv4);
  curl_easy_setopt(s->easy, CURLOPT_USERNAME, user);
  curl_easy_setopt(s->easy, CURLOPT_PASSWORD, pass);
  curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
  curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
  curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
  curl_multi_add_handle(multi, s->easy);
}

int main(int argc, char** argv) {
  long parallel = 16;
  const char* plan = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--parallel") && i + 1 < argc) {
      parallel = atol(argv[++i]);
    } else {
      plan = argv[i];
    }
  }
  if (!plan || parallel < 1) {
    fprintf(stderr, "usage: s3_ranged_get [--parallel N] PLAN\n");
    return 2;
  }
  FILE* f = fopen(plan, "r");
  if (!f) {
    perror(plan);
    return 2;
  }
  size_t n = 0, cap = 1024;
  Request* reqs = malloc(cap * sizeof *reqs);
  uint64_t most = 0;
  char url[4096];
  unsigned long long off, len;
  while (fscanf(f, "%4095s %llu %llu", url, &off, &len) == 3) {
    if (n == cap) reqs = realloc(reqs, (cap *= 2) * sizeof *reqs);
    reqs[n].url = strdup(url);
    reqs[n].offset = off;
    reqs[n].length = len;
    if (len > most) most = len;
    ++n;
  }
  fclose(f);

  const char* user = env_or_die("AWS_ACCESS_KEY_ID");
  const char* pass = env_or_die("AWS_SECRET_ACCESS_KEY");
  char sigv4[128];
  snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", env_or_die("AWS_REGION"));

  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM* multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, parallel);
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, parallel);
  Slot* slots = calloc((size_t)parallel, sizeof *slots);
  for (long i = 0; i < parallel; ++i) {
    slots[i].easy = curl_easy_init();
    slots[i].cap = most;
    slots[i].buf = malloc(most ? most : 1);
    memset(slots[i].buf, 1, most);  // touched beforehand
  }

  size_t next = 0, done = 0, errors = 0;
  uint64_t bytes = 0;
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  const double t0 = now_s();
  for (long i = 0; i < parallel && next < n; ++i, ++next) start(&slots[i], &reqs[next], next, multi, sigv4, user, pass);
  while (done < n) {
    int running = 0, numfds = 0, left = 0;
    curl_multi_perform(multi, &running);
    CURLMsg* m;
    while ((m = curl_multi_info_read(multi, &left))) {
      if (m->msg != CURLMSG_DONE) continue;
      Slot* s;
      long code = 0;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char**)&s);
      curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
      if (m->data.result != CURLE_OK || code != 206 || s->got != reqs[s->req].length) {
        if (errors++ < 5) {
          fprintf(stderr, "s3_ranged_get: %s bytes %llu+%llu: %s, HTTP %ld, %llu bytes\n", reqs[s->req].url,
                  (unsigned long long)reqs[s->req].offset, (unsigned long long)reqs[s->req].length,
                  curl_easy_strerror(m->data.result), code, (unsigned long long)s->got);
        }
      } else {
        bytes += s->got;
      }
      ++done;
      curl_multi_remove_handle(multi, m->easy_handle);
      if (next < n) {
        start(s, &reqs[next], next, multi, sigv4, user, pass);
        ++next;
      }
    }
    if (done < n) curl_multi_poll(multi, NULL, 0, 1000, &numfds);
  }
  const double secs = now_s() - t0;
  getrusage(RUSAGE_SELF, &ru1);
  printf(
      "{\"requests\": %zu, \"bytes\": %llu, \"seconds\": %.6f, \"errors\": %zu, \"parallel\": %ld, "
      "\"epoch_cpu_s\": %.3f, \"epoch_minflt\": %ld}\n",
      n, (unsigned long long)bytes, secs, errors, parallel, cpu_s(&ru1) - cpu_s(&ru0), ru1.ru_minflt - ru0.ru_minflt);
  for (long i = 0; i < parallel; ++i) {
    curl_easy_cleanup(slots[i].easy);
    curl_slist_free_all(slots[i].headers);
    free(slots[i].buf);
  }
  curl_multi_cleanup(multi);
  curl_global_cleanup();
  return errors ? 1 : 0;
}
