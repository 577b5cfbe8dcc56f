// SPDX-License-Identifier: Apache-2.0
// Ways for ranks to fetch each step's samples from the ranks that hold them,
// for the same plan, side by side (docs/distributed.md, "The job cache"):
// - gets: one-sided MPI_Get from each holder's window (MPI_Win_allocate; on
//   one machine Open MPI serves it from shared memory);
// - loads: memcpy from the holders' shares of one MPI shared-memory window
//   (MPI_Win_allocate_shared), what the job cache does between the ranks of
//   a node;
// - gets_created: MPI_Get from a window made over that shared memory
//   (MPI_Win_create), as ranks of other nodes read a node's shares; printed
//   only where MPI can make it (Open MPI: with a single-copy mechanism);
// - alltoallv: a planned all-to-all (each holder packs what every rank needs
//   from it, MPI_Alltoallv, each rank unpacks into its batch).
// Every rank knows the plan (a global shuffle from one seed), so none
// exchanges counts.
//
// Each rank holds samples id % world == rank, each `bytes` long, its first 8
// bytes the id (checked on arrival). A step's global batch is world x batch
// ids of a permutation; rank r takes the r-th slice. Per step, the slowest
// rank's time (MPI_MAX); medians over the steps. Prints one JSON line per
// sample size and mode.
//
//   mpirun -np 4 build/bench/peer_exchange --bytes 4096,147456,1048576 --batch 32 --steps 200
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

struct Args {
  std::vector<uint64_t> bytes{4096, 147456, 1048576};
  int batch = 32;
  int steps = 200;
  int per_rank = 1024;  // samples each rank holds (the plan draws from world x per_rank)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--bytes") {
      a.bytes.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t end = std::min(v.find(',', at), v.size());
        a.bytes.push_back(std::stoull(v.substr(at, end - at)));
        at = end + 1;
      }
    } else if (k == "--batch") {
      a.batch = std::stoi(v);
    } else if (k == "--steps") {
      a.steps = std::stoi(v);
    } else if (k == "--samples-per-rank") {
      a.per_rank = std::stoi(v);
    }
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs `steps` steps of one mode; returns each step's slowest rank's seconds.
template <typename Step>
std::vector<double> timed(int steps, Step&& step) {
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    step(s);
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    out.push_back(worst);
  }
  return out;
}

// One sample size: this rank's window (slot k = sample k * world + rank), the
// plan, the batch it fills, and the two ways to fill it.
struct Round {
  const Args& a;
  int rank, world;
  uint64_t bytes, total, per_step;
  MPI_Win win = MPI_WIN_NULL;
  std::byte* mine = nullptr;
  MPI_Comm node = MPI_COMM_NULL;  // every rank here: one machine
  MPI_Win shared = MPI_WIN_NULL, created = MPI_WIN_NULL;
  std::vector<std::byte*> share_of;  // per rank: its share of `shared`
  std::vector<uint64_t> order;
  std::vector<std::byte> out;
  std::vector<int> scount, sdispl, rcount, rdispl;  // the all-to-all's, made once
  long bad = 0;

  Round(const Args& args, int r, int w, uint64_t b)
      : a(args),
        rank(r),
        world(w),
        bytes(b),
        total(static_cast<uint64_t>(w) * args.per_rank),
        per_step(static_cast<uint64_t>(w) * args.batch),
        order(total),
        out(b * args.batch),
        scount(w),
        sdispl(w),
        rcount(w),
        rdispl(w) {
    void* base = nullptr;
    MPI_Win_allocate(static_cast<MPI_Aint>(bytes * a.per_rank), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    mine = static_cast<std::byte*>(base);
    for (int k = 0; k < a.per_rank; ++k) {
      const uint64_t id = static_cast<uint64_t>(k) * world + rank;
      std::memset(mine + k * bytes, static_cast<int>(id & 0xff), bytes);
      std::memcpy(mine + k * bytes, &id, sizeof id);
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    share();
    MPI_Barrier(MPI_COMM_WORLD);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(42));  // the same on every rank
  }
  ~Round() {
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    if (created != MPI_WIN_NULL) {
      MPI_Win_unlock_all(created);
      MPI_Win_free(&created);
    }
    MPI_Win_free(&shared);
    MPI_Comm_free(&node);
  }

  // The same samples in a shared-memory window, every rank's share mapped
  // here, and a window made over it where MPI can.
  void share() {
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Info info = MPI_INFO_NULL;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    const auto len = static_cast<MPI_Aint>(bytes * a.per_rank);
    MPI_Win_allocate_shared(len, 1, info, node, &base, &shared);
    MPI_Info_free(&info);
    std::memcpy(base, mine, static_cast<size_t>(len));
    share_of.assign(world, nullptr);
    for (int r = 0; r < world; ++r) {
      MPI_Aint size = 0;
      int unit = 0;
      void* at = nullptr;
      MPI_Win_shared_query(shared, r, &size, &unit, &at);
      share_of[r] = static_cast<std::byte*>(at);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int ok = MPI_Win_create(base, len, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &created) == MPI_SUCCESS ? 1 : 0;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all == 1) {
      MPI_Win_lock_all(MPI_MODE_NOCHECK, created);
    } else {
      created = MPI_WIN_NULL;
    }
  }

  // Rank r's samples in `step`.
  std::vector<uint64_t> ids_of(int step, int r) const {
    const uint64_t at = (static_cast<uint64_t>(step) * per_step) % (total - per_step + 1) + r * a.batch;
    return std::vector<uint64_t>(order.begin() + at, order.begin() + at + a.batch);
  }

  void check(const std::vector<uint64_t>& ids) {
    for (int i = 0; i < a.batch; ++i) {
      uint64_t got = 0;
      std::memcpy(&got, out.data() + i * bytes, sizeof got);
      bad += got != ids[i];
    }
  }

  void gets(int step, MPI_Win w) {
    const std::vector<uint64_t> ids = ids_of(step, rank);
    for (int i = 0; i < a.batch; ++i) {
      const int holder = static_cast<int>(ids[i] % world);
      const auto slot = static_cast<MPI_Aint>((ids[i] / world) * bytes);
      if (holder == rank) {
        std::memcpy(out.data() + i * bytes, mine + slot, bytes);
      } else {
        MPI_Get(out.data() + i * bytes, static_cast<int>(bytes), MPI_BYTE, holder, slot, static_cast<int>(bytes),
                MPI_BYTE, w);
      }
    }
    MPI_Win_flush_all(w);
    check(ids);
  }

  void loads(int step) {
    const std::vector<uint64_t> ids = ids_of(step, rank);
    for (int i = 0; i < a.batch; ++i) {
      const std::byte* from = share_of[ids[i] % world] + (ids[i] / world) * bytes;
      std::memcpy(out.data() + i * bytes, from, bytes);
    }
    check(ids);
  }

  void alltoallv(int step, std::vector<std::byte>& send, std::vector<std::byte>& recv) {
    // What every rank needs from this one, in rank order (known from the plan: no count exchange).
    size_t used = 0;
    for (int r = 0; r < world; ++r) {
      sdispl[r] = static_cast<int>(used);
      for (const uint64_t id : ids_of(step, r)) {
        if (static_cast<int>(id % world) != rank) continue;
        std::memcpy(send.data() + used, mine + (id / world) * bytes, bytes);
        used += bytes;
      }
      scount[r] = static_cast<int>(used) - sdispl[r];
    }
    const std::vector<uint64_t> ids = ids_of(step, rank);
    std::vector<int> from(a.batch);
    std::fill(rcount.begin(), rcount.end(), 0);
    for (int i = 0; i < a.batch; ++i) rcount[from[i] = static_cast<int>(ids[i] % world)] += static_cast<int>(bytes);
    for (int r = 0, at = 0; r < world; ++r) {
      rdispl[r] = at;
      at += rcount[r];
    }
    MPI_Alltoallv(send.data(), scount.data(), sdispl.data(), MPI_BYTE, recv.data(), rcount.data(), rdispl.data(),
                  MPI_BYTE, MPI_COMM_WORLD);
    std::vector<int> next(rdispl);  // each source's samples arrive in the order of the batch
    for (int i = 0; i < a.batch; ++i) {
      std::memcpy(out.data() + i * bytes, recv.data() + next[from[i]], bytes);
      next[from[i]] += static_cast<int>(bytes);
    }
    check(ids);
  }
};

void report(const char* mode, const std::vector<double>& t, int world, uint64_t bytes, const Args& a) {
  const double m = median(t);
  std::printf(
      "{\"mode\": \"%s\", \"ranks\": %d, \"bytes\": %llu, \"batch\": %d, \"steps\": %d, \"median_step_ms\": "
      "%.4f, \"gb_per_s_per_rank\": %.3f}\n",
      mode, world, static_cast<unsigned long long>(bytes), a.batch, a.steps, m * 1e3,
      m > 0 ? static_cast<double>(bytes) * a.batch / m / 1e9 : 0.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Args a = parse(argc, argv);
  long bad = 0;
  for (const uint64_t bytes : a.bytes) {
    Round round(a, rank, world, bytes);
    const std::vector<double> gets = timed(a.steps, [&](int step) { round.gets(step, round.win); });
    const std::vector<double> loads = timed(a.steps, [&](int step) { round.loads(step); });
    std::vector<double> created;
    if (round.created != MPI_WIN_NULL) {
      created = timed(a.steps, [&](int step) { round.gets(step, round.created); });
    }
    std::vector<std::byte> send(bytes * round.per_step), recv(bytes * a.batch);
    const std::vector<double> all = timed(a.steps, [&](int step) { round.alltoallv(step, send, recv); });
    if (rank == 0) {
      report("gets", gets, world, bytes, a);
      report("loads", loads, world, bytes, a);
      if (!created.empty()) report("gets_created", created, world, bytes, a);
      report("alltoallv", all, world, bytes, a);
    }
    bad += round.bad;
  }
  long bad_all = 0;
  MPI_Reduce(&bad, &bad_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0 && bad_all != 0) std::fprintf(stderr, "peer_exchange: %ld samples arrived wrong\n", bad_all);
  MPI_Finalize();
  return bad_all == 0 ? 0 : 1;
}
