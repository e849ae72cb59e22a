// The MPI side of data-parallel training (distributed.h): the only file that includes mpi.h.
#include "train/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

#ifdef KVAD_HAVE_MPI
// The C API only: mpi.h would otherwise pull in the C++ bindings (removed in MPI-3), which need
// OpenMPI's libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kvad::train {

namespace {

World& the_world() {
  static World w;
  return w;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

#ifdef KVAD_HAVE_MPI
bool g_started = false;

// MPI's counts are int: a buffer past 2^31 elements goes in pieces.
constexpr int64_t kMaxCount = int64_t{1} << 30;

template <typename T>
void allreduce_sum(T* v, int64_t n, MPI_Datatype type) {
  for (int64_t i = 0; i < n; i += kMaxCount)
    MPI_Allreduce(MPI_IN_PLACE, v + i, (int)std::min(kMaxCount, n - i), type, MPI_SUM, MPI_COMM_WORLD);
}
#endif

}  // namespace

const World& world() { return the_world(); }

void join_world() {
  // mpirun (OpenMPI) says how many ranks it started; other PMIx launchers (srun --mpi=pmix,
  // prterun) say only which rank this is, and MPI tells the rest.
  const int env_size = env_int("OMPI_COMM_WORLD_SIZE", 0);
  const bool pmix = std::getenv("PMIX_RANK") != nullptr;
  if (env_size == 1 || (env_size == 0 && !pmix)) return;  // not launched as one of several ranks
#ifdef KVAD_HAVE_MPI
  if (g_started) return;
  int provided = 0;
  // Only the main thread calls MPI (the thread pool's workers never do): FUNNELED.
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  g_started = true;
  World& w = the_world();
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
  // The ranks that share this machine (and its cores and memory).
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank_, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &w.local_size_);
  MPI_Comm_free(&local);
#else
  const int rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", 0));
  if (env_size > 1 || rank > 0)
    fail("kvad train was started by {} as rank {} of {}, but this kvad was built without MPI, so its ranks "
         "cannot share gradients: install libopenmpi-dev (scripts/install-deps.sh), rebuild, and run again "
         "(or run kvad train without mpirun)",
         env_size > 1 ? "mpirun" : "an MPI launcher", rank,
         env_size > 1 ? std::to_string(env_size) : std::string("several"));
#endif
}

void leave_world() {
#ifdef KVAD_HAVE_MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!g_started || finalized) return;
  // No rank leaves before all are done: one that exits (130 after a stop) while rank 0 still writes
  // the last checkpoint would have mpirun end the job under it.
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
#endif
}

void abort_world(const std::string& message) {
  const World& w = world();
  std::fflush(stdout);
  std::fprintf(stderr, "kvad: error: %s (rank %d of %d)\n", message.c_str(), w.rank(), w.size());
  std::fflush(stderr);
#ifdef KVAD_HAVE_MPI
  if (g_started) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  _exit(1);
}

void World::sum(float* v, int64_t n) const {
#ifdef KVAD_HAVE_MPI
  if (size_ > 1) allreduce_sum(v, n, MPI_FLOAT);
#endif
}

void World::sum(double* v, int64_t n) const {
#ifdef KVAD_HAVE_MPI
  if (size_ > 1) allreduce_sum(v, n, MPI_DOUBLE);
#endif
}

bool World::agree(uint64_t v) const {
#ifdef KVAD_HAVE_MPI
  if (size_ > 1) {
    // The largest value and the largest complement (the complement of the smallest value).
    uint64_t m[2] = {v, ~v};
    MPI_Allreduce(MPI_IN_PLACE, m, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return m[0] == v && ~m[1] == v;
  }
#endif
  return true;
}

}  // namespace kvad::train
