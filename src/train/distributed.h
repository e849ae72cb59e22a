// Data-parallel training over MPI: `mpirun -np N kvad train ...` runs N copies of the trainer (on
// one machine or several) that draw the same global batch, each run forward and backward on its
// own contiguous share of the batch's rows, and sum their gradients with one allreduce a step, so
// every rank applies the same AdamW update to the same weights (docs/scale-out.md). Rank 0 alone
// prints and writes checkpoints.
//
// This header is the whole interface; distributed.cpp is the only file that includes mpi.h, and
// built without MPI (no libopenmpi-dev) it is a single-rank stub that refuses an mpirun launch of
// more than one rank. A plain `kvad train` never touches MPI: it is started only when the
// environment says mpirun (OMPI_COMM_WORLD_SIZE) or another PMIx launcher (PMIX_RANK) started us.
#pragma once
#include <cstdint>
#include <string>

namespace kvad::train {

// This process's place in the job: rank `rank` of `size`, `local_size` of them on this machine.
class World {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }
  bool root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }

  // Sums v[0, n) over the ranks, in place (MPI_Allreduce): every rank ends with the same values.
  // A no-op on one rank.
  void sum(float* v, int64_t n) const;
  void sum(double* v, int64_t n) const;
  // Whether every rank passed the same value (one allreduce of 16 bytes).
  bool agree(uint64_t v) const;

 private:
  friend void join_world();
  int rank_ = 0, size_ = 1, local_size_ = 1;
};

// The job this process belongs to: one rank of one until join_world() joined an mpirun job.
const World& world();

// Under a launcher with more than one rank: starts MPI (MPI_Init) and learns this process's rank;
// otherwise nothing. Throws when launched with several ranks by a kvad built without MPI.
void join_world();
// Ends MPI (a barrier, then MPI_Finalize) when join_world started it.
void leave_world();
// Prints "kvad: error: MESSAGE (rank R of N)" and ends every rank of the job (MPI_Abort), so an
// error on one rank does not leave the others waiting for it in an allreduce.
[[noreturn]] void abort_world(const std::string& message);

}  // namespace kvad::train
