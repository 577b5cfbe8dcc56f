// SPDX-License-Identifier: Apache-2.0
// A source of bytes named by URL (s3://bucket/key): what an optional
// component (dlfeed::s3) provides so that a dataset in an object store reads
// wherever a path goes. libdlfeed knows only this interface; the HTTP client,
// its credentials and its retries live in the component.
//
//   dlfeed::s3::install();                       // registers the "s3" scheme
//   opts.paths = {"s3://bucket/imagenet/train"};  // a prefix read as a folder
//
// A URL's objects are listed once (list()), indexed through ranged reads of
// their headers (read()), and the loader's reads of samples go to the
// store's own backend (make_backend()): the same ReadRequests the files'
// engines take, answered with ranged GETs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::inline DLFEED_ABI {

/// One object of a store: its URL, size and version tag (S3's ETag).
struct DLFEED_EXPORT ObjectInfo {
  std::string url;
  uint64_t size = 0;
  std::string etag;
};

/// A node-local folder keeping the bytes fetched from a store, so that later
/// epochs and runs read them from local disk (LoaderOptions::object_cache).
struct DLFEED_EXPORT ObjectCacheOptions {
  /// The folder ("": no cache). Made if missing; shared by runs and by the
  /// processes of a node (pieces are written whole, then renamed).
  std::string dir;
  /// Most bytes kept in it (0: no bound; a bound without a `dir` is
  /// refused). Once full, what is not in it is fetched as asked and not
  /// kept: under a shuffled order every sample is used once an epoch, so
  /// what is kept stays, and the bytes kept are bytes not fetched again,
  /// each epoch. Under an order that uses samples again
  /// within an epoch, a piece fetched is kept in place of the one used last
  /// in the loader's known order, when it is used before it
  /// (ObjectStore::plan_uses).
  uint64_t max_bytes = 0;
};

/// The size of the pieces an ObjectCacheOptions cache keeps objects in.
inline constexpr uint64_t kObjectCachePiece = uint64_t{1} << 20;

/// When a loader uses each piece (kObjectCachePiece bytes) of the objects it
/// reads, over one epoch of its known order: what lets a bounded cache keep
/// the pieces used soonest (Belady's choice) rather than the ones kept
/// first, for orders that use samples again within an epoch. A use is a
/// step, `step(epoch, batch)`; ReadRequest::use_at is the step a read is
/// for. Built by add() then finish(); const after.
class DLFEED_EXPORT ObjectUses {
 public:
  /// No use at all.
  static constexpr uint64_t kNever = ~uint64_t{0};
  static constexpr uint64_t step(uint64_t epoch, uint64_t batch) {
    return (epoch << 32) | (batch < 0xffffffffu ? batch : 0xffffffffu);
  }

  /// The uses of `urls` (an object's index in it is its number in add())
  /// in epoch `epoch`, of `batches` batches in all.
  ObjectUses(std::vector<std::string> urls, uint64_t epoch, uint64_t batches);
  /// Bytes [offset, offset + length) of object `object` are read for
  /// batch `batch` of the epoch.
  void add(uint32_t object, uint64_t offset, uint64_t length, uint64_t batch);
  /// Sorts the uses; call once, after the last add().
  void finish();

  uint64_t epoch() const { return epoch_; }
  /// Whether `url` is one of the objects.
  bool reads(absl::string_view url) const { return index_.find(url) != index_.end(); }
  /// The first step at or after `from` at which piece `piece` of `url` is
  /// used. A piece whose uses this epoch are all before `from` is taken to
  /// be used next where it was first used this epoch, one epoch on (a step
  /// past the epoch's last batch): the next epoch's order is another, but
  /// uses it too. kNever: a piece the epoch never uses.
  uint64_t next_use(absl::string_view url, uint64_t piece, uint64_t from) const;
  /// The uses kept (pieces times batches).
  size_t size() const { return uses_.size(); }

 private:
  uint64_t epoch_, batches_;
  std::map<std::string, uint32_t, std::less<>> index_;
  // (object << 32 | piece, batch), sorted after finish().
  std::vector<std::pair<uint64_t, uint32_t>> uses_;
};

/// A store of objects addressed by URLs of one scheme. Thread-safe.
class DLFEED_EXPORT ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  /// The URL scheme it answers ("s3").
  virtual std::string scheme() const = 0;
  /// The objects whose URL starts with `prefix`, sorted by URL. Their sizes
  /// and tags are remembered: a head() of one of them asks no server.
  virtual absl::StatusOr<std::vector<ObjectInfo>> list(const std::string& prefix) = 0;
  /// One object; NotFound when there is none of that name. What a list()
  /// or head() of it learnt is given again without asking the server.
  virtual absl::StatusOr<ObjectInfo> head(const std::string& url) = 0;
  /// One object as the server has it now (asked, never remembered), and
  /// remembered for head(), as list() remembers what it lists: how a new
  /// listing names one object. The default: head().
  virtual absl::StatusOr<ObjectInfo> head_now(const std::string& url) { return head(url); }
  /// Bytes [offset, offset + out.size()) of an object into `out`; returns
  /// the bytes placed, fewer only at the object's end.
  virtual absl::StatusOr<size_t> read(const std::string& url, uint64_t offset, std::span<std::byte> out) = 0;
  /// The same of the version `object` (as head() or list() gave it): never
  /// another version's bytes, whatever a later listing learnt (S3: If-Match
  /// its ETag). The default reads the URL.
  virtual absl::StatusOr<size_t> read(const ObjectInfo& object, uint64_t offset, std::span<std::byte> out) {
    return read(object.url, offset, out);
  }
  /// A backend reading the objects a FileTable names (its paths are URLs of
  /// this scheme), for the loader's engines.
  virtual absl::StatusOr<std::unique_ptr<IoBackend>> make_backend(std::shared_ptr<FileTable> files,
                                                                  IoOptions options) = 0;
  /// From now on, reads (read(), and the backends made from now on) go
  /// through this cache (an empty dir: none). A Loader sets it when it is
  /// made, from LoaderOptions::object_cache; a backend keeps the cache it
  /// was made with.
  virtual absl::Status use_cache(const ObjectCacheOptions& cache) = 0;
  /// From now on, the bounded cache `cache` (the folder and bound a loader
  /// gave use_cache()) keeps and lets go of pieces by their next use in
  /// `uses` (the loader's epoch, held weakly: once the loader lets it go, or
  /// another loader's replace it, by what it keeps first, as without; null:
  /// none). The default ignores it.
  virtual void plan_uses(const ObjectCacheOptions& cache, const std::shared_ptr<const ObjectUses>& uses) {
    (void)cache;
    (void)uses;
  }
};

/// Makes `store` the one for its scheme (replacing an earlier one).
DLFEED_EXPORT void register_object_store(std::shared_ptr<ObjectStore> store);
/// Whether `path` is a URL ("scheme://...", the scheme letters, digits, +-.).
DLFEED_EXPORT bool is_object_url(absl::string_view path);
/// The store for `url`'s scheme; FailedPrecondition naming the URL when
/// none is registered (dlfeed built without it, or install() not called).
DLFEED_EXPORT absl::StatusOr<std::shared_ptr<ObjectStore>> object_store_for(absl::string_view url);

}  // namespace dlfeed
