// A 1-D halo exchange with the C++ wrapper: each rank swaps its edge cells with both
// neighbours (tags say which edge), the same with a one-sided window, then with the
// persistent exchange (built once, one call a step); then the ranks agree on a global
// maximum.
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<commux install> && cmake --build build
//   COMMUX_BOOTSTRAP=127.0.0.1:29601 COMMUX_SIZE=3 COMMUX_RANK=<r> build/neighbours  (each r)
#include <commux/commux.hpp>

#include <cstdio>
#include <vector>

int main() try {
  commux::Comm comm = commux::Comm::fromEnvironment();
  const int rank = comm.rank(), size = comm.size();
  const int left = (rank + size - 1) % size, right = (rank + 1) % size;
  std::vector<double> cells(100, rank);  // cells[0] and cells[99] are the halo
  enum { kToLeft = 1, kToRight = 2 };
  {
    commux::Group group;  // posts all four, then waits for them together
    comm.send(&cells[1], 1, left, kToLeft);
    comm.send(&cells[98], 1, right, kToRight);
    comm.recv(&cells[99], 1, right, kToLeft);
    comm.recv(&cells[0], 1, left, kToRight);
    group.end();
  }
  if (cells[0] != left || cells[99] != right) {
    std::fprintf(stderr, "rank %d: halo %g %g\n", rank, cells[0], cells[99]);
    return 1;
  }
  // The same swap one-sided: each rank puts its edge cell into its right neighbour's
  // window and signals; the wait returns once the cell is there.
  std::vector<double> inbox(1, -1.0);
  {
    commux::Window window(comm, inbox.data(), sizeof(double));
    window.putSignal(&cells[98], sizeof(double), right, 0);
    window.waitSignal(left);
    window.free();
  }
  if (inbox[0] != left) {
    std::fprintf(stderr, "rank %d: window got %g\n", rank, inbox[0]);
    return 1;
  }
  // The persistent exchange: a periodic 1-D grid of `size` ranks, one ghost cell each side.
  {
    cells[0] = cells[99] = -1.0;
    commux::Exchange halo = commux::Exchange::halo<double>(comm, {size}, {1}, false,
                                                           {cells.data()}, {100}, {1}, 10);
    for (int step = 0; step < 3; ++step) halo.exchange();  // each step: start(), wait()
  }
  if (cells[0] != left || cells[99] != right) {
    std::fprintf(stderr, "rank %d: exchange halo %g %g\n", rank, cells[0], cells[99]);
    return 1;
  }
  std::vector<double> top{static_cast<double>(rank)};
  comm.allReduce(top, commux::ReduceOp::Max);
  comm.finalize();  // nobody leaves while a peer still needs it
  std::printf("rank %d of %d: halo from %d and %d, max rank %g\n", rank, size, left, right, top[0]);
  return top[0] == size - 1 ? 0 : 1;
} catch (const commux::Error& e) {
  std::fprintf(stderr, "commux error %d: %s\n", static_cast<int>(e.code()), e.what());
  return 1;
}
