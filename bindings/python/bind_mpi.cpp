// SPDX-License-Identifier: Apache-2.0
// The job cache for Python under mpirun (dlfeed::mpi::JobCache), when the
// module is built with MPI (in-tree builds, or pip install . -C
// cmake.define.DLFEED_MPI=ON; the wheel has no MPI). One mpi::Job per
// communicator (MPI_COMM_WORLD, or an mpi4py communicator given by its
// Fortran handle), made by the first loader over it; the caches' windows are
// freed together at exit (_mpi_shutdown, registered with atexit by
// dlfeed.Loader), when every rank frees them, not when a loader is collected,
// which happens at a different time on each rank.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common.h"
#if DLFEED_WITH_MPI
#include "dlfeed/mpi/job_cache.h"
#endif

namespace dlfeed::python {

#if DLFEED_WITH_MPI
namespace {

struct MpiState {
  // In the order made: the first may have started MPI, and ends it, so it is
  // freed last.
  std::vector<std::unique_ptr<mpi::Job>> jobs;
  pid_t pid = 0;
  std::vector<std::shared_ptr<mpi::JobCache>> caches;
};

MpiState& mpi_state() {
  static MpiState* s = new MpiState();  // outlives the interpreter's teardown; _mpi_shutdown empties it
  return *s;
}

// Collective: the settings that decide a loader's collectives (its create's,
// one per field, the job cache's, the epochs') compared across the job's
// ranks; a rank that differs is an error on every rank, not ranks waiting in
// different collectives (a rank with another number of fields hung in create).
void agree(const mpi::Job& job, const char* what, const LoaderOptions& o, const std::string& extra,
           const absl::Status& local) {
  std::vector<std::string> fields;  // quoted: ["a, b"] is not ["a", "b"]
  for (const std::string& f : o.fields) fields.push_back(absl::StrCat("\"", absl::CEscape(f), "\""));
  std::vector<std::pair<std::string, std::string>> settings = {
      // A rank's own error (its world_size=) fails every rank here, not that
      // rank alone while the others wait for it; named first.
      {"this rank's error", local.ok() ? "none" : std::string(local.message())},
      {"the loader", absl::StrCat(what, extra)},
      {"fields", absl::StrCat("[", absl::StrJoin(fields, ", "), "]")},
      {"batch_size", absl::StrCat(o.batch_size)},
      {"order", describe_order(o.order, indices_fingerprint(o.order.params.indices.get()))},
      {"drop_last_batch", absl::StrCat(o.drop_last_batch)}};
  check(job.agree(settings, "every rank of the job makes the same loaders, in the same order"));
}

// The process's mpi::Job over communicator `comm` (a Fortran handle, -1:
// MPI_COMM_WORLD), started on first use (`what`: the keyword, for errors);
// `o` then takes the job's rank and world size, and rank 0 lists and
// indexes the files for the job (a collective in the loader's create).
mpi::Job& job_for(LoaderOptions& o, const char* what, int comm, const std::string& extra = "") {
  MpiState& s = mpi_state();
  if (!s.jobs.empty() && s.pid != ::getpid()) {
    check(absl::FailedPreconditionError(
        absl::StrCat(what,
                     ": MPI was started in another process (this is a child of fork(), e.g. a DataLoader "
                     "worker): make the loader in the process mpirun started (num_workers=0)")));
  }
  int up = 0;
  MPI_Initialized(&up);
  mpi::Job* job = nullptr;
  if (up != 0) {
    // A job over the same ranks in the same order (MPI_Comm_compare), not the same handle: a
    // communicator freed and split again may get the handle of another group.
    const MPI_Comm want = comm >= 0 ? MPI_Comm_f2c(comm) : MPI_COMM_WORLD;
    for (auto& j : s.jobs) {
      int same = MPI_UNEQUAL;
      MPI_Comm_compare(j->comm(), want, &same);
      if (same == MPI_IDENT || same == MPI_CONGRUENT) job = j.get();
    }
  }
  if (job == nullptr) {
    if (up == 0 && comm >= 0) {
      check(absl::FailedPreconditionError(
          absl::StrCat(what, ": mpi_comm= names a communicator, but MPI is not initialized in this process")));
    }
    if (up == 0 && !mpi::launched_by_mpi()) {
      check(absl::FailedPreconditionError(
          absl::StrCat(what,
                       ": the loader's ranks are an MPI job's: start the script with mpirun or srun (this "
                       "process was not started by an MPI launcher)")));
    }
    s.jobs.push_back(value_or_throw(mpi::Job::init(comm >= 0 ? MPI_Comm_f2c(comm) : MPI_COMM_NULL)));
    s.pid = ::getpid();
    job = s.jobs.back().get();
  }
  const auto size = static_cast<uint32_t>(job->size());
  absl::Status local;
  if (o.order.world_size != 1 && o.order.world_size != size) {
    local = absl::InvalidArgumentError(
        absl::StrCat(what, ": world_size=", o.order.world_size, " but the MPI job has ", size, " ranks"));
  }
  agree(*job, what, o, extra, local);
  check(local);
  job->configure(o);
  job->share_index(o);
  return *job;
}

}  // namespace
#endif

void bind_mpi(py::module_& m) {
#if DLFEED_WITH_MPI
  m.attr("has_mpi") = true;
  m.def(
      "_job_cache_attach",
      [](LoaderOptions& o, uint64_t bytes_per_node, int ranks_per_node, const std::string& folder, int comm) {
        MpiState& s = mpi_state();
        mpi::Job& job = job_for(o, "job_cache=", comm,
                                absl::StrCat(" ", bytes_per_node, " B per node, ranks_per_node ", ranks_per_node,
                                             folder.empty() ? "" : ", a folder"));
        mpi::JobCacheOptions co;
        co.bytes_per_node = bytes_per_node;
        co.ranks_per_node = ranks_per_node;
        co.folder = folder;
        std::shared_ptr<mpi::JobCache> cache = value_or_throw(mpi::JobCache::create(job, co));
        check(cache->attach(o));
        s.caches.push_back(cache);
        return s.caches.size() - 1;
      },
      py::arg("options"), py::arg("bytes_per_node"), py::arg("ranks_per_node"), py::arg("folder") = "",
      py::arg("comm") = -1,
      "Collective over `comm` (an mpi4py communicator's Fortran handle; -1: MPI_COMM_WORLD): makes a job cache "
      "(MPI_Init_thread with MPI_THREAD_MULTIPLE unless MPI is up), sets `options` to read through it (rank and "
      "world size from the communicator; its rank 0 indexes the files for the job); returns its number.");
  m.def(
      "_mpi_attach", [](LoaderOptions& o, int comm) { job_for(o, "mpi=True", comm); }, py::arg("options"),
      py::arg("comm") = -1,
      "Collective over `comm` (an mpi4py communicator's Fortran handle; -1: MPI_COMM_WORLD): `options` reads as "
      "a rank of the MPI job (MPI_Init_thread unless MPI is up): rank and world size from the communicator, and "
      "its rank 0 lists and indexes the files for the job, the others receive the index.");
  m.def(
      "_job_cache_stats",
      [](size_t id) {
        MpiState& s = mpi_state();
        if (id >= s.caches.size() || s.caches[id] == nullptr) check(absl::NotFoundError("job cache closed"));
        return py::dict(py::module_::import("json").attr("loads")(s.caches[id]->stats().to_json()));
      },
      py::arg("id"), "This rank's job cache counters (JobCacheStats).");
  m.def(
      "_mpi_abort",
      [](int code) {
        int up = 0, down = 0;
        MPI_Initialized(&up);
        MPI_Finalized(&down);
        if (up != 0 && down == 0) MPI_Abort(MPI_COMM_WORLD, code);
      },
      py::arg("code"),
      "MPI_Abort(MPI_COMM_WORLD, code) when MPI is up: ends every rank of the job (for a rank that dies of an "
      "uncaught exception, whose peers would wait in a collective for it).");
  m.def(
      "_mpi_shutdown",
      [] {
        MpiState& s = mpi_state();
        for (auto& c : s.caches) {
          if (c) c->close().IgnoreError();  // collective: every rank at exit
        }
        s.caches.clear();
        // The first job last: MPI_Finalize when it started MPI.
        while (!s.jobs.empty()) s.jobs.pop_back();
      },
      "Collective, at exit: frees the job caches' windows and ends MPI if dlfeed started it.");
#else
  m.attr("has_mpi") = false;
#endif
}

}  // namespace dlfeed::python
