// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/mpi/mpi.h"

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "mpi_error.h"

namespace dlfeed::inline DLFEED_ABI::mpi {
namespace {

#define DLFEED_MPI_CALL(call) DLFEED_MPI_CALL_AS("MPI", call)

uint64_t allreduce(uint64_t v, MPI_Op op, MPI_Comm comm) {
  uint64_t out = v;
  // MPI_ERRORS_ARE_FATAL (the default) aborts the job on failure.
  MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, op, comm);
  return out;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS",
                        "MV2_COMM_WORLD_SIZE", "HYDRA_CONTROL_FD"}) {
    const char* e = std::getenv(v);
    if (e != nullptr && *e != '\0') return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Job>> Job::init(MPI_Comm comm) {
  std::unique_ptr<Job> job(new Job());
  int initialized = 0;
  DLFEED_MPI_CALL(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    DLFEED_MPI_CALL(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    job->finalize_ = true;
  }
  if (comm == MPI_COMM_NULL) comm = MPI_COMM_WORLD;
  DLFEED_MPI_CALL(MPI_Comm_dup(comm, &job->comm_));
  DLFEED_MPI_CALL(MPI_Comm_rank(job->comm_, &job->rank_));
  DLFEED_MPI_CALL(MPI_Comm_size(job->comm_, &job->size_));
  return job;
}

Job::~Job() {
  if (std::uncaught_exceptions() > 0) {
    // Another rank may be blocked in a collective this rank will never join.
    MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, 1);
    return;
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_ && !finalized) MPI_Finalize();
}

void Job::configure(LoaderOptions& options) const {
  options.order.rank = static_cast<uint32_t>(rank_);
  options.order.world_size = static_cast<uint32_t>(size_);
  options.trace.pid = rank_;
  options.trace.process_name = absl::StrCat("dlfeed rank ", rank_);
}

absl::Status Job::barrier() const {
  DLFEED_MPI_CALL(MPI_Barrier(comm_));
  return absl::OkStatus();
}

absl::Status Job::step_barrier(counters::Counters& c) const {
  const uint64_t t0 = c.now();
  c.region_begin(counters::Region::kBarrier, t0);
  const int rc = MPI_Barrier(comm_);
  c.region_end(counters::Region::kBarrier, t0, c.now(), 0);
  if (rc != MPI_SUCCESS) return mpi_error("MPI", "MPI_Barrier", rc);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Job::gather(const std::string& mine, int root) const {
  if (mine.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("MPI gather: ", mine.size(), " bytes, at most 2^31-1"));
  }
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(rank_ == root ? size_ : 0);
  DLFEED_MPI_CALL(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, comm_));
  std::vector<int> displs(sizes.size());
  int64_t total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    displs[r] = static_cast<int>(total);
    total += sizes[r];
  }
  if (total > INT32_MAX) {
    return absl::ResourceExhaustedError(absl::StrCat("MPI gather: ", total, " bytes in all, at most 2^31-1"));
  }
  std::string all(static_cast<size_t>(total), '\0');
  DLFEED_MPI_CALL(
      MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE, root, comm_));
  std::vector<std::string> out;
  for (size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(static_cast<size_t>(displs[r]), sizes[r]));
  return out;
}

namespace {

// The paths a rank names, as one string all ranks compare: each made
// absolute and normal (ranks may name them relative to the same folder),
// URLs as given; a length before each.
std::string paths_key(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) {
    std::string norm = p;
    if (p.find("://") == std::string::npos) {
      std::error_code ec;
      const std::filesystem::path abs = std::filesystem::absolute(p, ec);
      if (!ec) norm = abs.lexically_normal().string();
      while (norm.size() > 1 && norm.back() == '/') norm.pop_back();  // "ds/" is "ds"
    }
    absl::StrAppend(&out, norm.size(), ":", norm);
  }
  return out;
}

// The paths a paths_key holds, for a message.
std::string paths_in(absl::string_view key) {
  std::vector<std::string> out;
  while (!key.empty()) {
    const size_t colon = key.find(':');
    size_t n = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(key.substr(0, colon), &n) || n > key.size() - colon - 1)
      break;
    out.emplace_back(key.substr(colon + 1, n));
    key.remove_prefix(colon + 1 + n);
  }
  return absl::StrJoin(out, ", ");
}

}  // namespace

void Job::share_index(LoaderOptions& options, int root) const {
  options.advanced.index_opener = [this, root](const std::vector<std::string>& paths,
                                               const FormatOptions& format) -> absl::StatusOr<SampleIndex> {
    absl::StatusOr<SampleIndex> got = take_shared_index(paths, format, root);
    // Every rank learns whether every rank took the index, so a rank that
    // failed alone (it names other paths; the message did not decode) fails
    // the job's create on every rank: a caller that catches the error and
    // goes on finds its peers at the same point, not waiting in a
    // collective it will not join.
    const uint64_t failed = allreduce(got.ok() ? UINT64_MAX : static_cast<uint64_t>(rank_), MPI_MIN, comm_);
    if (!got.ok() || failed == UINT64_MAX) return got;
    return absl::FailedPreconditionError(absl::StrCat("rank ", failed,
                                                      " could not take the job's shared index (its own error says "
                                                      "why); every rank's loader create fails with it"));
  };
}

absl::StatusOr<SampleIndex> Job::take_shared_index(const std::vector<std::string>& paths, const FormatOptions& format,
                                                   int root) const {
  // The root's index as bytes, or its error: a status code byte, the length
  // of the root's paths_key and the key, then the encoded index or the
  // message.
  absl::StatusOr<SampleIndex> mine = absl::UnknownError("not the root");
  std::string msg;
  if (rank_ == root) {
    mine = open_dataset(paths, format);
    msg.push_back(static_cast<char>(mine.status().code()));
    const std::string key = paths_key(paths);
    absl::StrAppend(&msg, key.size(), ";", key);
    msg += mine.ok() ? encode_index(*mine, format) : std::string(mine.status().message());
  }
  auto got = broadcast(msg, root);
  if (!got.ok()) return got.status();
  if (rank_ == root) return mine;
  if (got->empty()) return absl::DataLossError("MPI share_index: an empty message from the root");
  const auto code = static_cast<absl::StatusCode>(static_cast<unsigned char>((*got)[0]));
  const size_t semi = got->find(';', 1);
  uint64_t key_size = 0;
  if (semi == std::string::npos || !absl::SimpleAtoi(absl::string_view(*got).substr(1, semi - 1), &key_size) ||
      key_size > got->size() - semi - 1) {
    return absl::DataLossError("MPI share_index: a message from the root without its paths");
  }
  // Every rank reads the dataset the root indexed: a rank that names another
  // would otherwise read the root's files as if they were its own.
  const absl::string_view roots = absl::string_view(*got).substr(semi + 1, key_size);
  if (roots != paths_key(paths)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, " names the dataset ", absl::StrJoin(paths, ", "),
                                                   ", but rank ", root, " (indexing for the job) names ",
                                                   paths_in(roots),
                                                   ": every rank of a job that shares one index reads the same paths"));
  }
  const std::string rest = got->substr(semi + 1 + key_size);
  if (code != absl::StatusCode::kOk) {
    return absl::Status(code, absl::StrCat("rank ", root, " (indexing for the job): ", rest));
  }
  return decode_index(rest, format);
}

absl::StatusOr<std::string> Job::broadcast(const std::string& bytes, int root) const {
  uint64_t n = bytes.size();
  DLFEED_MPI_CALL(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_));
  if (n > static_cast<uint64_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("MPI broadcast: ", n, " bytes, at most 2^31-1"));
  }
  std::string out = rank_ == root ? bytes : std::string(n, '\0');
  DLFEED_MPI_CALL(MPI_Bcast(out.data(), static_cast<int>(n), MPI_BYTE, root, comm_));
  return out;
}

namespace {
// Settings as one string: each name and value as <length>:<bytes>.
std::string encode_settings(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string out;
  for (const auto& [name, value] : settings) absl::StrAppend(&out, name.size(), ":", name, value.size(), ":", value);
  return out;
}

std::vector<std::pair<std::string, std::string>> decode_settings(absl::string_view rest) {
  auto take = [&rest]() {
    const size_t colon = rest.find(':');
    size_t n = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, colon), &n) ||
        n > rest.size() - colon - 1) {
      rest = {};
      return std::string();
    }
    std::string out(rest.substr(colon + 1, n));
    rest.remove_prefix(colon + 1 + n);
    return out;
  };
  std::vector<std::pair<std::string, std::string>> out;
  while (!rest.empty()) {
    std::string name = take();
    out.emplace_back(std::move(name), take());
  }
  return out;
}
}  // namespace

absl::Status Job::agree(const std::vector<std::pair<std::string, std::string>>& settings,
                        absl::string_view advice) const {
  DLFEED_ASSIGN_OR_RETURN(const std::vector<std::string> all, gather(encode_settings(settings)));
  std::string verdict;
  for (size_t r = 1; r < all.size() && verdict.empty(); ++r) {
    if (all[r] == all[0]) continue;
    // Rank 0's settings are these: this is rank 0 (gather's root).
    const std::vector<std::pair<std::string, std::string>> theirs = decode_settings(all[r]);
    verdict = absl::StrCat("rank ", r, " runs with other settings than rank 0");
    for (size_t i = 0; i < settings.size(); ++i) {
      const std::string* their =
          i < theirs.size() && theirs[i].first == settings[i].first ? &theirs[i].second : nullptr;
      if (their != nullptr && *their == settings[i].second) continue;
      verdict = absl::StrCat(settings[i].first, " is '", settings[i].second, "' on rank 0 but ",
                             their != nullptr ? absl::StrCat("'", *their, "'") : "another setting", " on rank ", r);
      break;
    }
    absl::StrAppend(&verdict, ": ", advice);
  }
  DLFEED_ASSIGN_OR_RETURN(verdict, broadcast(verdict));
  if (!verdict.empty()) return absl::InvalidArgumentError(verdict);
  return absl::OkStatus();
}

absl::StatusOr<counters::Snapshot> Job::reduce(const counters::Snapshot& mine, int root) const {
  auto all = gather(mine.serialize(), root);
  if (!all.ok()) return all.status();
  if (rank_ != root) return mine;
  std::vector<counters::Snapshot> ranks;
  for (size_t r = 0; r < all->size(); ++r) {
    auto s = counters::Snapshot::deserialize((*all)[r]);
    if (!s.ok())
      return absl::DataLossError(absl::StrCat("MPI reduce: rank ", r, "'s snapshot: ", s.status().message()));
    ranks.push_back(*std::move(s));
  }
  return counters::merge_ranks(ranks);
}

uint64_t Job::sum(uint64_t v) const { return allreduce(v, MPI_SUM, comm_); }
uint64_t Job::min(uint64_t v) const { return allreduce(v, MPI_MIN, comm_); }
uint64_t Job::max(uint64_t v) const { return allreduce(v, MPI_MAX, comm_); }

}  // namespace dlfeed::mpi
