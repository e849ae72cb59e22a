// The cost of kvad train's gradient allreduce alone (docs/scale-out.md): an in-place MPI_Allreduce
// SUM of N floats, as the trainer does once a step, timed on whatever ranks and network mpirun
// gives it, without the training around it. For each N: the median of 30 calls after 5 warm-up
// calls, the bytes summed per second (4N / time) and the bus bandwidth a ring allreduce needs for it
// (2 (P-1)/P x 4N / time: what each rank's link carries).
//   mpicc -O2 bench/train/allreduce.c -o /tmp/allreduce
//   mpirun -np 2 /tmp/allreduce 819072 3243776 262144          # the sizes of docs/scale-out.md
//   mpirun -np 4 --hostfile hosts --mca btl_tcp_if_include eth0 /tmp/allreduce 3243776
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2 && rank == 0) fprintf(stderr, "usage: mpirun -np P %s FLOATS...\n", argv[0]);
  enum { kWarm = 5, kRuns = 30 };
  for (int a = 1; a < argc; a++) {
    long n = atol(argv[a]);
    float* v = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) v[i] = (float)(rank + 1) * 1e-3f;
    double t[kRuns];
    for (int r = 0; r < kWarm + kRuns; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (r >= kWarm) t[r - kWarm] = MPI_Wtime() - t0;
    }
    qsort(t, kRuns, sizeof t[0], cmp);
    double med = t[kRuns / 2], bytes = 4.0 * (double)n;
    if (rank == 0)
      printf("ranks %d  floats %ld  bytes %.2f MB  median %.3f ms  (min %.3f, max %.3f)  %.2f GB/s summed, bus %.2f GB/s\n",
             size, n, bytes / 1e6, med * 1e3, t[0] * 1e3, t[kRuns - 1] * 1e3, bytes / med / 1e9,
             2.0 * (size - 1) / size * bytes / med / 1e9);
    free(v);
  }
  MPI_Finalize();
  return 0;
}
