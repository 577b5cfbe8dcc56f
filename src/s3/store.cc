// SPDX-License-Identifier: Apache-2.0
// The s3:// store: listings, heads and ranged reads for indexing, and the
// backend the loader's engines read samples with.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/object_store.h"
#include "dlfeed/s3/s3.h"
#include "s3/cache.h"
#include "s3/client.h"
#include "s3/config.h"

namespace dlfeed::inline DLFEED_ABI::s3 {

namespace detail {
namespace {

std::string url_of(const Location& loc) { return absl::StrCat("s3://", loc.bucket, "/", loc.key); }

// A key of a listing asked with encoding-type=url: %XX escapes and '+' for a
// space, as AWS's SDKs decode it (control characters cannot travel in XML).
std::string url_decoded(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    uint32_t v = 0;
    if (s[i] == '%' && i + 2 < s.size() && absl::ascii_isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        absl::ascii_isxdigit(static_cast<unsigned char>(s[i + 2])) && absl::SimpleHexAtoi(s.substr(i + 1, 2), &v)) {
      out.push_back(static_cast<char>(v));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

// Pages in a row that give no key and say there is more: a server that would
// list for ever is an error, not a wait.
constexpr uint64_t kMaxEmptyPages = 1000;

// Times a listing page cut short is asked for before it is an error.
constexpr int kListPageAttempts = 3;

// Why a ListObjectsV2 page with `entries` <Contents> was cut short, or ""
// when it is whole: the document ends with its root's end tag, and its
// KeyCount (where given) is not more than the entries it holds (fewer is
// left alone: servers have sent KeyCount 0 with objects listed).
std::string listing_page_cut(absl::string_view body, size_t entries) {
  if (!absl::EndsWith(absl::StripTrailingAsciiWhitespace(body), "</ListBucketResult>")) {
    return absl::StrCat("ends (", body.size(), " bytes) before </ListBucketResult>");
  }
  const std::vector<std::string> count = xml_values(body, "KeyCount");
  uint64_t n = 0;
  if (!count.empty() && absl::SimpleAtoi(count[0], &n) && n > entries) {
    return absl::StrCat("says KeyCount ", count[0], " but holds ", entries, " entries");
  }
  return "";
}

// The connections of a loader: DLFEED_S3_CONNECTIONS (read at each loader,
// so a process may set it between them), else the options'.
absl::StatusOr<uint32_t> connections_of(const Options& o) {
  uint32_t n = o.connections;
  if (const char* v = std::getenv("DLFEED_S3_CONNECTIONS"); v != nullptr && *v != '\0') {
    if (!absl::SimpleAtoi(v, &n) || n < 1 || n > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("s3: DLFEED_S3_CONNECTIONS is the connections of a loader, 1 to 256, not '", v, "'"));
    }
  }
  return std::clamp(n, 1u, 256u);
}

// Bytes [offset, offset + dest.size()) of `info`'s object: from the cache
// when it holds them, else by a ranged GET, of the whole pieces around
// them (kept) while the cache has room.
absl::Status fetch(Connection& conn, Config& c, const Options& o, PieceCache* cache, const ObjectInfo& info,
                   const Location& loc, uint64_t offset, std::span<std::byte> dest, std::vector<std::byte>& scratch,
                   const std::atomic<bool>* cancel = nullptr, uint64_t use_at = ObjectUses::kNever) {
  Counters& n = counters();
  // Without an ETag nothing tells a rewritten object of the same size from
  // the one whose pieces are kept: such objects are never cached.
  if (info.etag.empty()) cache = nullptr;
  if (cache != nullptr && cache->read(info, offset, dest, use_at)) {
    n.cache_hits.fetch_add(1, std::memory_order_relaxed);
    n.cache_bytes.fetch_add(dest.size(), std::memory_order_relaxed);
    return absl::OkStatus();
  }
  Request q;
  q.loc = loc;
  q.ranged = true;
  q.if_match = info.etag;     // bytes of the version indexed, or an error
  q.object_size = info.size;  // without an ETag, at least the size it was indexed with
  if (cache != nullptr && offset + dest.size() <= info.size) {
    constexpr uint64_t kPiece = PieceCache::kPiece;
    const uint64_t first = offset / kPiece * kPiece;
    const uint64_t end = std::min<uint64_t>(info.size, (offset + dest.size() + kPiece - 1) / kPiece * kPiece);
    // A piece is let go for another only for a read of nearly all (7/8) of
    // the pieces it fetches: pieces fetched whole for smaller reads, to take
    // the place of others, cost their bytes each time (a cache turning over
    // every batch fetched 50 times the set for 1,000-byte samples, and more
    // than no cache for reads of half a piece).
    const uint64_t at = dest.size() * 8 >= (end - first) * 7 ? use_at : ObjectUses::kNever;
    if (cache->wants(info, first, end, at)) {  // keep() takes those it wants
      scratch.resize(end - first);
      q.offset = first;
      q.length = end - first;
      q.dest = std::span<std::byte>(scratch);
      DLFEED_RETURN_IF_ERROR(perform(conn, c, o, q, cancel).status());
      std::memcpy(dest.data(), scratch.data() + (offset - first), dest.size());
      cache->keep(info, first, scratch, at);
      return absl::OkStatus();
    }
  }
  q.offset = offset;
  q.length = dest.size();
  q.dest = dest;
  return perform(conn, c, o, q, cancel).status();
}

class Store;

// Reads the FileTable's objects with `connections` threads, each a kept-alive
// connection doing one ranged GET at a time.
class Backend final : public IoBackend {
 public:
  Backend(std::shared_ptr<FileTable> files, Options o, Config c, std::shared_ptr<Store> store,
          std::shared_ptr<PieceCache> cache, uint32_t n)
      : files_(std::move(files)),
        o_(std::move(o)),
        c_(std::move(c)),
        store_(std::move(store)),
        cache_(std::move(cache)) {
    for (uint32_t i = 0; i < n; ++i) cancels_.push_back(std::make_unique<std::atomic<bool>>(false));
    try {
      for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this, i] { work(*cancels_[i]); });
    } catch (const std::system_error& e) {  // the system gives no more threads: an error, not an abort
      const size_t got = threads_.size();
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      wake_.notify_all();
      for (std::thread& t : threads_) t.join();
      threads_.clear();
      start_error_ = absl::StrCat("s3: the system gave ", got, " of the ", n, " threads of the loader's connections (",
                                  e.what(), "): fewer DLFEED_S3_CONNECTIONS, or a higher process limit (ulimit -u)");
    }
    if (cache_) cache_->add_user(1);  // last: a constructor that throws is never destroyed
  }
  const std::string& start_error() const { return start_error_; }
  ~Backend() override {
    if (cache_) cache_->add_user(-1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queue_.clear();
      for (auto& c : cancels_) c->store(true, std::memory_order_relaxed);  // requests in flight end soon
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // The requests in flight now end at their next chance (a transfer's
  // progress, a retry's wait, the pacer's), those queued at once, each as a
  // cancelled completion: an epoch given up, or a loader closing, does not
  // wait for a slow or refusing server. Requests submitted later run.
  void cancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& c : cancels_) c->store(true, std::memory_order_relaxed);
      for (const ReadRequest& r : queue_) {
        ReadCompletion c;
        c.user_data = r.user_data;
        c.status = absl::CancelledError("s3: the reader is closing");
        done_.push_back(std::move(c));
      }
      queue_.clear();
    }
    done_cv_.notify_all();
  }

  absl::Status submit(std::span<const ReadRequest> requests) override {
    const size_t n_files = files_->size();
    for (const ReadRequest& r : requests) {
      if (r.file >= n_files) return absl::InvalidArgumentError(absl::StrCat("s3: unknown file id ", r.file));
      if (r.offset + r.length < r.offset) return absl::InvalidArgumentError("s3: a read past 2^64");
      if (r.piece_count == 0) {
        if (r.length > 0 && r.dest == nullptr) return absl::InvalidArgumentError("s3: a read with no destination");
        continue;
      }
      uint64_t sum = 0;
      for (uint32_t k = 0; k < r.piece_count; ++k) {
        if (r.pieces == nullptr || (r.pieces[k].length > 0 && r.pieces[k].dest == nullptr)) {
          return absl::InvalidArgumentError("s3: a scattered read's piece has no destination");
        }
        sum += r.pieces[k].length;
      }
      if (r.piece_count > kMaxReadPieces || sum != r.length || (r.checksum && r.checksum_piece >= r.piece_count)) {
        return absl::InvalidArgumentError(
            absl::StrCat("s3: a scattered read of ", r.length, " bytes whose ", r.piece_count, " pieces hold ", sum));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const ReadRequest& r : requests) queue_.push_back(r);
      in_flight_ += requests.size();
      stats_.requests += requests.size();
    }
    wake_.notify_all();
    return absl::OkStatus();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto enough = [&] { return done_.size() >= min_completions || done_.size() >= in_flight_; };
    if (timeout == std::chrono::nanoseconds::max()) {
      done_cv_.wait(lock, enough);
    } else if (timeout.count() > 0) {
      done_cv_.wait_for(lock, timeout, enough);
    }
    const size_t n = done_.size();
    for (ReadCompletion& c : done_) out.push_back(std::move(c));
    done_.clear();
    in_flight_ -= n;
    stats_.completions += n;
    return n;
  }

  size_t in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }
  std::string name() const override { return "s3"; }
  IoStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  // One connection's thread; `cancel` is its request's (set by cancel(),
  // cleared when it takes the next request: both under mu_).
  void work(std::atomic<bool>& cancel) {
    Connection conn;
    Config c = c_;  // this connection's: new credentials replace it when the server refuses these (perform)
    std::vector<std::byte> scratch, fetched;
    for (;;) {
      ReadRequest r;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        r = queue_.front();
        queue_.pop_front();
        cancel.store(false, std::memory_order_relaxed);
      }
      ReadCompletion done = read(conn, c, r, scratch, fetched, cancel);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (done.status.ok()) {
          stats_.bytes += done.bytes;
          stats_.device_bytes += done.bytes;
        } else if (!absl::IsCancelled(done.status)) {  // a cancelled read is no I/O error
          ++stats_.errors;
        }
        ++stats_.reads;
        done_.push_back(std::move(done));
      }
      done_cv_.notify_all();
    }
  }

  ReadCompletion read(Connection& conn, Config& config, const ReadRequest& r, std::vector<std::byte>& scratch,
                      std::vector<std::byte>& fetched, const std::atomic<bool>& cancel) {
    ReadCompletion c;
    c.user_data = r.user_data;
    if (r.length == 0) return c;
    const std::string url = files_->path(r.file);
    absl::StatusOr<Location> loc = parse_url(url);
    if (!loc.ok()) {
      c.status = loc.status();
      return c;
    }
    std::span<std::byte> dest(r.dest, r.length);
    if (r.piece_count > 0) {
      scratch.resize(r.length);
      dest = std::span<std::byte>(scratch);
    }
    absl::StatusOr<ObjectInfo> info = object_info(r.file, url, cancel);
    if (!info.ok()) {
      c.status = info.status();
      return c;
    }
    if (absl::Status st =
            fetch(conn, config, o_, cache_.get(), *info, *loc, r.offset, dest, fetched, &cancel, r.use_at);
        !st.ok()) {
      c.status = st;
      return c;
    }
    c.bytes = r.length;
    uint64_t at = 0;
    for (uint32_t k = 0; k < r.piece_count; ++k) {
      std::memcpy(r.pieces[k].dest, scratch.data() + at, r.pieces[k].length);
      if (r.checksum && k == r.checksum_piece) {
        c.crc32c = dlfeed::detail::crc32c(r.pieces[k].dest, r.pieces[k].length);
        c.has_crc32c = true;
      }
      at += r.pieces[k].length;
    }
    if (r.checksum && r.piece_count == 0) {
      c.crc32c = dlfeed::detail::crc32c(r.dest, r.length);
      c.has_crc32c = true;
    }
    return c;
  }

  // What the store says of file `id` (its listing remembered, else a HEAD),
  // checked once against the version the loader indexed (the FileTable's
  // identity: size and ETag hash) and kept: a later listing in this process
  // (another loader) never changes the version this backend asks for.
  absl::StatusOr<ObjectInfo> object_info(uint32_t id, const std::string& url, const std::atomic<bool>& cancel);

  std::shared_ptr<FileTable> files_;
  const Options o_;
  const Config c_;
  const std::shared_ptr<Store> store_;
  const std::shared_ptr<PieceCache> cache_;
  mutable std::mutex mu_;
  std::condition_variable wake_, done_cv_;
  std::deque<ReadRequest> queue_;
  std::vector<ReadCompletion> done_;
  size_t in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::unique_ptr<std::atomic<bool>>> cancels_;  // one per thread: its request's
  IoStats stats_;
  absl::flat_hash_map<uint32_t, ObjectInfo> infos_;  // by file id, checked (under mu_)
  std::vector<std::thread> threads_;
  std::string start_error_;  // why the connections' threads could not all start
};

class Store final : public ObjectStore, public std::enable_shared_from_this<Store> {
 public:
  explicit Store(Options o) : o_(std::move(o)) { fork_guard(&mu_); }
  ~Store() override { fork_unguard(&mu_); }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  std::string scheme() const override { return "s3"; }

  absl::StatusOr<std::vector<ObjectInfo>> list(const std::string& prefix) override {
    DLFEED_ASSIGN_OR_RETURN(Location loc, parse_url(prefix));
    DLFEED_ASSIGN_OR_RETURN(Config c, current_config(o_));
    std::vector<ObjectInfo> out;
    std::string token;
    uint64_t pages = 0, empty_pages = 0;
    Lease conn(*this);
    do {
      Request r;
      r.loc = Location{loc.bucket, ""};
      r.listed = loc.key;
      r.query = absl::StrCat(token.empty() ? "" : absl::StrCat("continuation-token=", uri_encode(token, false), "&"),
                             "encoding-type=url&list-type=2&prefix=", uri_encode(loc.key, false));
      absl::StatusOr<Response> resp;
      std::vector<absl::string_view> items;
      std::string why_cut;
      // A page cut short (a body that ends before the document does, under a
      // length that matches it) would drop its last keys without a word:
      // asked again, then an error.
      for (int attempt = 1;; ++attempt) {
        resp = perform(*conn, c, o_, r);
        counters().lists.fetch_add(1, std::memory_order_relaxed);
        if (!resp.ok()) return annotate(resp.status(), prefix, c);
        items = xml_blocks(resp->body, "Contents");
        why_cut = listing_page_cut(resp->body, items.size());
        if (why_cut.empty()) break;
        if (attempt == kListPageAttempts) {
          return absl::DataLossError(absl::StrCat(prefix, ": listing page ", pages + 1, " ", why_cut, " (", attempt,
                                                  " tries): the listing would be incomplete"));
        }
        // A body shorter than the document: counted as perform() counts a short body.
        counters().retries.fetch_add(1, std::memory_order_relaxed);
        counters().retry_short.fetch_add(1, std::memory_order_relaxed);
      }
      const std::vector<std::string> encoding = xml_values(resp->body, "EncodingType");
      const bool url_encoded = !encoding.empty() && absl::AsciiStrToLower(encoding[0]) == "url";
      empty_pages = items.empty() ? empty_pages + 1 : 0;
      for (absl::string_view item : items) {
        std::vector<std::string> key = xml_values(item, "Key"), size = xml_values(item, "Size"),
                                 etag = xml_values(item, "ETag");
        ObjectInfo o;
        uint64_t n = 0;
        if (key.empty() || size.empty() || !absl::SimpleAtoi(size[0], &n)) {
          return absl::DataLossError(absl::StrCat(prefix, ": a listing entry without a key or size: ", item));
        }
        if (url_encoded) key[0] = url_decoded(key[0]);
        if (!key[0].empty() && key[0].back() == '/') continue;  // a folder marker
        o.url = url_of(Location{loc.bucket, key[0]});
        o.size = n;
        if (!etag.empty()) o.etag = etag[0];
        out.push_back(std::move(o));
      }
      std::vector<std::string> truncated = xml_values(resp->body, "IsTruncated");
      std::vector<std::string> next = xml_values(resp->body, "NextContinuationToken");
      const bool more = !truncated.empty() && truncated[0] == "true";
      if (more && (next.empty() || next[0] == token)) {
        return absl::DataLossError(absl::StrCat(prefix, ": listing page ", ++pages, " says IsTruncated but gives ",
                                                next.empty() ? "no NextContinuationToken" : "the same token again",
                                                ": the listing would be incomplete"));
      }
      ++pages;
      if (more && empty_pages >= kMaxEmptyPages) {
        return absl::DataLossError(absl::StrCat(prefix, ": ", empty_pages,
                                                " listing pages in a row give no key and say IsTruncated (", pages,
                                                " pages in all): the server's listing does not end"));
      }
      token = more ? next[0] : "";
    } while (!token.empty());
    std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.url < b.url; });
    // A key on two pages would be two files of the same bytes: samples read twice.
    for (size_t i = 1; i < out.size(); ++i) {
      if (out[i].url == out[i - 1].url) {
        return absl::DataLossError(absl::StrCat(prefix, ": the listing gives ", out[i].url,
                                                " twice (on two pages): a server's listing names each key once"));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const ObjectInfo& o : out) known_[o.url] = o;
    return out;
  }

  absl::StatusOr<ObjectInfo> head(const std::string& url) override { return head(url, nullptr); }

  absl::StatusOr<ObjectInfo> head_now(const std::string& url) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      known_.erase(url);
    }
    return head(url, nullptr);
  }

  // The same, ending soon once `cancel` is set (a backend's reads at close).
  absl::StatusOr<ObjectInfo> head(const std::string& url, const std::atomic<bool>* cancel) {
    std::shared_ptr<std::mutex> one;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = known_.find(url); it != known_.end()) return it->second;
      if (heading_pid_ != ::getpid()) {  // a child of fork(): the parent's HEADs in flight are not here
        heading_.clear();
        heading_pid_ = ::getpid();
      }
      std::shared_ptr<std::mutex>& slot = heading_[url];
      if (slot == nullptr) slot = std::make_shared<std::mutex>();
      one = slot;
    }
    // One HEAD per object at a time: the reads of a batch that all want it
    // (an MPI rank given the index, which holds no ETag) wait for the first.
    std::lock_guard<std::mutex> first(*one);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = known_.find(url); it != known_.end()) return it->second;
    }
    DLFEED_ASSIGN_OR_RETURN(Location loc, parse_url(url));
    if (loc.key.empty() || loc.key.back() == '/') {
      return absl::NotFoundError(absl::StrCat(url, ": names a prefix, not an object"));
    }
    DLFEED_ASSIGN_OR_RETURN(Config c, current_config(o_));
    Request r;
    r.method = Method::kHead;
    r.loc = loc;
    Lease conn(*this);
    absl::StatusOr<Response> resp = perform(*conn, c, o_, r, cancel);
    counters().heads.fetch_add(1, std::memory_order_relaxed);
    if (!resp.ok()) return annotate(resp.status(), url, c);
    ObjectInfo o{url, resp->content_length, resp->etag};
    std::lock_guard<std::mutex> lock(mu_);
    known_[url] = o;
    return o;
  }

  absl::StatusOr<size_t> read(const std::string& url, uint64_t offset, std::span<std::byte> out) override {
    if (out.empty()) return 0;
    DLFEED_ASSIGN_OR_RETURN(ObjectInfo info, head(url));
    return read(info, offset, out);
  }

  absl::StatusOr<size_t> read(const ObjectInfo& info, uint64_t offset, std::span<std::byte> out) override {
    const std::string& url = info.url;
    if (out.empty() || offset >= info.size) return 0;
    const uint64_t n = std::min<uint64_t>(out.size(), info.size - offset);
    DLFEED_ASSIGN_OR_RETURN(Config c, current_config(o_));
    DLFEED_ASSIGN_OR_RETURN(Location loc, parse_url(url));
    Lease conn(*this);
    std::vector<std::byte> scratch;
    absl::Status st = fetch(*conn, c, o_, cache().get(), info, loc, offset, out.first(static_cast<size_t>(n)), scratch);
    if (!st.ok()) return annotate(st, url, c);
    return static_cast<size_t>(n);
  }

  absl::Status use_cache(const ObjectCacheOptions& o) override {
    // Opened again for each loader, the same folder and bound too: it counts
    // what the folder holds now (a folder emptied by hand has room again);
    // but one another loader's backend reads through is shared: one count
    // under the bound a process.
    std::shared_ptr<PieceCache> cache;
    const std::vector<std::shared_ptr<PieceCache>> open = caches_open();
    for (const std::shared_ptr<PieceCache>& c : open) {
      if (!o.dir.empty() && c && c->dir() == o.dir && c->max_bytes() == o.max_bytes && c->users() > 0) {
        cache = c;
        break;
      }
    }
    if (!o.dir.empty() && !cache) {
      DLFEED_ASSIGN_OR_RETURN(cache, PieceCache::open(o));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (cache && std::find(open.begin(), open.end(), cache) == open.end()) {
      std::erase_if(opened_, [](const std::weak_ptr<PieceCache>& c) { return c.expired(); });
      opened_.push_back(cache);
    }
    cache_.swap(cache);
    return absl::OkStatus();  // the caches let go of here, after the lock (see caches_open)
  }

  // To the caches of that folder and bound, current or not: a loader's
  // backend keeps the cache it was made with, whatever a later loader uses.
  void plan_uses(const ObjectCacheOptions& o, const std::shared_ptr<const ObjectUses>& uses) override {
    for (const auto& c : caches_open()) {
      if (c && c->dir() == o.dir && c->max_bytes() == o.max_bytes) c->set_uses(uses);
    }
  }

  // The caches opened that are still used. The caller lets them go outside
  // mu_: one whose last user went meanwhile is destroyed then, and its
  // destructor takes fork_unguard's mutex.
  std::vector<std::shared_ptr<PieceCache>> caches_open() {
    std::vector<std::shared_ptr<PieceCache>> open;
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::weak_ptr<PieceCache>& w : opened_) open.push_back(w.lock());
    return open;
  }

  std::shared_ptr<PieceCache> cache() {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_;
  }

  absl::StatusOr<std::unique_ptr<IoBackend>> make_backend(std::shared_ptr<FileTable> files,
                                                          IoOptions /*options*/) override {
    DLFEED_ASSIGN_OR_RETURN(Config c, current_config(o_));
    DLFEED_ASSIGN_OR_RETURN(const uint32_t n, connections_of(o_));
    auto backend =
        std::unique_ptr<Backend>(new Backend(std::move(files), o_, std::move(c), shared_from_this(), cache(), n));
    if (!backend->start_error().empty()) return absl::ResourceExhaustedError(backend->start_error());
    return std::unique_ptr<IoBackend>(std::move(backend));
  }

 private:
  // A connection of the store's idle ones, given back when done.
  class Lease {
   public:
    explicit Lease(Store& s) : s_(s) {
      std::lock_guard<std::mutex> lock(s_.mu_);
      if (s_.pid_ != ::getpid()) {  // a child of fork(): the idle connections are the parent's
        for (auto& c : s_.idle_) c->abandon();
        s_.idle_.clear();
        s_.pid_ = ::getpid();
      }
      if (!s_.idle_.empty()) {
        c_ = std::move(s_.idle_.back());
        s_.idle_.pop_back();
      } else {
        c_ = std::make_unique<Connection>();
      }
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(s_.mu_);
      if (s_.idle_.size() < 8) s_.idle_.push_back(std::move(c_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Connection& operator*() { return *c_; }

   private:
    Store& s_;
    std::unique_ptr<Connection> c_;
  };

  // What to check when the server refuses or is not there: where the
  // credentials and the endpoint came from (never a secret).
  static absl::Status annotate(const absl::Status& st, const std::string& url, const Config& c) {
    std::string hint;
    if (absl::IsPermissionDenied(st)) {
      hint = absl::StrCat("; the credentials came from ", c.where, ", access key ...",
                          c.access_key.substr(c.access_key.size() > 4 ? c.access_key.size() - 4 : 0));
    } else if (absl::IsUnavailable(st)) {
      hint = absl::StrCat("; the endpoint is ", c.endpoint, " (AWS_ENDPOINT_URL)");
    } else if (st.message().find("NoSuchBucket") != absl::string_view::npos ||
               st.message().find("with no S3 error in the answer") != absl::string_view::npos) {
      hint = absl::StrCat("; at ", c.endpoint, " (AWS_ENDPOINT_URL)");
    }
    (void)url;
    return absl::Status(st.code(), absl::StrCat(st.message(), hint));
  }

  const Options o_;
  std::mutex mu_;
  std::shared_ptr<PieceCache> cache_;
  std::vector<std::weak_ptr<PieceCache>> opened_;  // every cache opened that is still used
  absl::flat_hash_map<std::string, ObjectInfo> known_;
  absl::flat_hash_map<std::string, std::shared_ptr<std::mutex>> heading_;  // one HEAD in flight per object
  pid_t heading_pid_ = ::getpid();
  std::vector<std::unique_ptr<Connection>> idle_;
  pid_t pid_ = ::getpid();
};

absl::StatusOr<ObjectInfo> Backend::object_info(uint32_t id, const std::string& url, const std::atomic<bool>& cancel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = infos_.find(id); it != infos_.end()) return it->second;
  }
  DLFEED_ASSIGN_OR_RETURN(ObjectInfo info, store_->head(url, &cancel));
  if (const std::optional<FileIdentity> indexed = files_->identity(id)) {
    DLFEED_RETURN_IF_ERROR(dlfeed::detail::check_object_version(url, *indexed, info));
  }
  std::lock_guard<std::mutex> lock(mu_);
  return infos_.emplace(id, std::move(info)).first->second;
}

}  // namespace
}  // namespace detail

absl::Status install(Options options) {
  if (options.max_attempts == 0) return absl::InvalidArgumentError("s3: max_attempts must be at least 1");
  if (options.addressing != "auto" && options.addressing != "path" && options.addressing != "virtual") {
    return absl::InvalidArgumentError(
        absl::StrCat("s3: addressing is auto, path or virtual, not '", options.addressing, "'"));
  }
  if (const char* v = std::getenv("DLFEED_S3_MAX_REQUESTS_PER_SECOND"); v != nullptr && *v != '\0') {
    double per_second = 0;
    if (!absl::SimpleAtod(v, &per_second) || !(per_second >= 0) || per_second > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat(
          "s3: DLFEED_S3_MAX_REQUESTS_PER_SECOND is a number of requests a second (0: no bound), not '", v, "'"));
    }
    options.max_requests_per_second = per_second;
  }
  if (const char* v = std::getenv("DLFEED_S3_STALL_TIMEOUT_MS"); v != nullptr && *v != '\0') {
    if (!absl::SimpleAtoi(v, &options.stall_timeout_ms) || options.stall_timeout_ms == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "s3: DLFEED_S3_STALL_TIMEOUT_MS is the milliseconds a request may receive nothing, not '", v, "'"));
    }
  }
  if (options.stall_timeout_ms == 0) return absl::InvalidArgumentError("s3: stall_timeout_ms must be at least 1");
  if (!(options.max_requests_per_second >= 0)) {
    return absl::InvalidArgumentError("s3: max_requests_per_second is at least 0 (0: no bound)");
  }
  detail::init_curl();
  register_object_store(std::make_shared<detail::Store>(std::move(options)));
  return absl::OkStatus();
}

Stats stats() {
  const detail::Counters& c = detail::counters();
  Stats s;
  s.requests = c.requests.load();
  s.gets = c.gets.load();
  s.lists = c.lists.load();
  s.heads = c.heads.load();
  s.bytes = c.bytes.load();
  s.retries = c.retries.load();
  s.retry_throttled = c.retry_throttled.load();
  s.retry_server = c.retry_server.load();
  s.retry_network = c.retry_network.load();
  s.retry_short = c.retry_short.load();
  s.credentials_reread = c.credentials_reread.load();
  s.failures = c.failures.load();
  s.request_ns = c.request_ns.load();
  s.cache_hits = c.cache_hits.load();
  s.cache_bytes = c.cache_bytes.load();
  s.cache_kept = c.cache_kept.load();
  s.cache_damaged = c.cache_damaged.load();
  s.cache_let_go = c.cache_let_go.load();
  s.cache_old_versions = c.cache_old_versions.load();
  return s;
}

std::string stats_json(const Stats& s) {
  return absl::StrCat("{\"requests\": ", s.requests, ", \"gets\": ", s.gets, ", \"lists\": ", s.lists,
                      ", \"heads\": ", s.heads, ", \"bytes\": ", s.bytes, ", \"retries\": ", s.retries,
                      ", \"retry_throttled\": ", s.retry_throttled, ", \"retry_server\": ", s.retry_server,
                      ", \"retry_network\": ", s.retry_network, ", \"retry_short\": ", s.retry_short,
                      ", \"credentials_reread\": ", s.credentials_reread, ", \"failures\": ", s.failures,
                      ", \"request_seconds\": ", s.request_ns / 1e9, ", \"cache_hits\": ", s.cache_hits,
                      ", \"cache_bytes\": ", s.cache_bytes, ", \"cache_kept\": ", s.cache_kept,
                      ", \"cache_damaged\": ", s.cache_damaged, ", \"cache_let_go\": ", s.cache_let_go,
                      ", \"cache_old_versions\": ", s.cache_old_versions, "}");
}

}  // namespace dlfeed::s3
