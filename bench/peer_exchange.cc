// SPDX-License-Identifier: Apache-2.0
// Two ways for ranks to fetch each step's samples from the ranks that hold
// them, for the same plan, side by side (docs/distributed.md, "The job
// cache"): one-sided MPI_Get from each holder's window (what the job cache
// does), against a planned all-to-all (each holder packs what every rank needs
// from it, MPI_Alltoallv, each rank unpacks into its batch). Every rank knows
// the plan (a global shuffle from one seed), so neither exchanges counts.
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
    MPI_Barrier(MPI_COMM_WORLD);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(42));  // the same on every rank
  }
  ~Round() {
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
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

  void gets(int step) {
    const std::vector<uint64_t> ids = ids_of(step, rank);
    for (int i = 0; i < a.batch; ++i) {
      const int holder = static_cast<int>(ids[i] % world);
      const auto slot = static_cast<MPI_Aint>((ids[i] / world) * bytes);
      if (holder == rank) {
        std::memcpy(out.data() + i * bytes, mine + slot, bytes);
      } else {
        MPI_Get(out.data() + i * bytes, static_cast<int>(bytes), MPI_BYTE, holder, slot, static_cast<int>(bytes),
                MPI_BYTE, win);
      }
    }
    MPI_Win_flush_all(win);
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
    const std::vector<double> gets = timed(a.steps, [&](int step) { round.gets(step); });
    std::vector<std::byte> send(bytes * round.per_step), recv(bytes * a.batch);
    const std::vector<double> all = timed(a.steps, [&](int step) { round.alltoallv(step, send, recv); });
    if (rank == 0) {
      report("gets", gets, world, bytes, a);
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
