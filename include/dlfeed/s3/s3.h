// SPDX-License-Identifier: Apache-2.0
// dlfeed::s3: datasets in S3-compatible object storage, s3://bucket/prefix
// wherever a path goes. An optional component (built when libcurl is
// found); libdlfeed itself never speaks HTTP.
//
//   dlfeed::s3::install();   // once per process: the dlfeed command and the
//                            // Python package do it themselves
//   dlfeed::LoaderOptions o;
//   o.paths = {"s3://bucket/dlio/train"};   // a prefix reads as a folder
//
// Credentials and endpoint come as AWS's tools take them, read at each
// listing and each loader's start (so a change of the environment between
// two loaders is seen): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN; AWS_REGION or AWS_DEFAULT_REGION; AWS_ENDPOINT_URL_S3
// or AWS_ENDPOINT_URL; else the profile AWS_PROFILE (default "default") of
// AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and AWS_CONFIG_FILE
// (~/.aws/config). Requests are signed (SigV4, by libcurl). Secrets never
// appear in messages.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::s3 {

/// How requests are made; the defaults suit a server on the same network.
struct DLFEED_EXPORT Options {
  /// "path" (ENDPOINT/bucket/key), "virtual" (bucket.HOST/key), or "auto":
  /// virtual for AWS's own endpoints, path for any other (MinIO, SeaweedFS,
  /// Ceph). DLFEED_S3_ADDRESSING overrides it.
  std::string addressing = "auto";
  /// Requests in flight per loader engine (one connection each, kept
  /// alive). DLFEED_S3_CONNECTIONS overrides it. 32 beat 8 and 16 for
  /// 147 KiB and 16 MiB samples (bench/object_store.py).
  uint32_t connections = 32;
  /// Tries per request: a 500, 502, 503 (SlowDown), 504, a reset or refused
  /// connection, a timeout or a body shorter than asked is tried again after
  /// an exponential backoff with jitter (backoff_ms, doubling, at most
  /// backoff_max_ms). Anything else (403, 404, ...) fails at once.
  uint32_t max_attempts = 8;
  uint32_t backoff_ms = 25;
  uint32_t backoff_max_ms = 4000;
  /// Per request: connecting, and the whole request (a GET's: this plus a
  /// second for each KiB it asks, at most 10 minutes, so that a slow link
  /// is not a failure).
  uint32_t connect_timeout_ms = 5000;
  uint32_t request_timeout_ms = 60000;
  /// A request that receives under 1 KiB a second over this long (rounded
  /// up to seconds) is given up, as a server that stopped answering or
  /// trickles; a request that timed out (this, or request_timeout_ms) is
  /// tried at most 3 times, so a frozen server is an error in under a
  /// minute, not minutes.
  /// DLFEED_S3_STALL_TIMEOUT_MS overrides it.
  uint32_t stall_timeout_ms = 10000;
  /// Most requests started per second by this process (0: no bound), tries
  /// included. DLFEED_S3_MAX_REQUESTS_PER_SECOND overrides it (how the
  /// dlfeed command and the Python package set it). A server's SlowDown
  /// also pauses every request of the process for the backoff, whatever
  /// this is.
  double max_requests_per_second = 0;
};

/// What the process's requests did (monotonic since the process started).
struct DLFEED_EXPORT Stats {
  uint64_t requests = 0;         // requests sent (each try counts)
  uint64_t gets = 0;             // ranged GETs that delivered their bytes
  uint64_t lists = 0;            // ListObjectsV2 pages
  uint64_t heads = 0;            // HEADs
  uint64_t bytes = 0;            // bytes of object data delivered
  uint64_t retries = 0;          // tries after the first, all causes:
  uint64_t retry_throttled = 0;  // 503 / SlowDown
  uint64_t retry_server = 0;     // 500, 502, 504
  uint64_t retry_network = 0;    // refused, reset, timed out
  uint64_t retry_short = 0;      // a body shorter (or longer) than asked
  /// Credentials read again after the server refused the ones a request was
  /// signed with (an expired session token, an unknown key), and the
  /// request tried again with the new ones (not counted in `retries`).
  uint64_t credentials_reread = 0;
  uint64_t failures = 0;       // requests that failed for good
  uint64_t request_ns = 0;     // time in requests, summed over them
  uint64_t cache_hits = 0;     // reads served by the object cache (ObjectCacheOptions)
  uint64_t cache_bytes = 0;    // ... their bytes
  uint64_t cache_kept = 0;     // bytes fetched and kept in it
  uint64_t cache_damaged = 0;  // pieces found damaged (length or CRC), removed and fetched again
  uint64_t cache_let_go = 0;   // pieces removed for one used sooner in the known order (cache_limit)
  /// Folders of an object's earlier versions (found in the cache's folder;
  /// the object was rewritten since) removed when the new version was read.
  uint64_t cache_old_versions = 0;
};

/// Registers the s3:// store with libdlfeed (replacing an earlier one).
DLFEED_EXPORT absl::Status install(Options options = {});
/// The process's request counters.
DLFEED_EXPORT Stats stats();
/// stats() as a JSON object (for a run's summary).
DLFEED_EXPORT std::string stats_json(const Stats& s);

}  // namespace dlfeed::s3
