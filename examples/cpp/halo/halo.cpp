// A 1-D halo exchange in C++ over commux: two fields (u, v) diffuse on a line split across
// the ranks; each step every rank trades one boundary value of each field with each
// neighbour (a message of two tensors, a tag per direction), then updates its points.
// At the end every rank checks its part against a serial solve of the whole line.
//
// Launch it like any torch.distributed job (it reads RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT), e.g.:
//   torchrun --standalone --nproc-per-node 3 --no-python ./halo [points-per-rank] [steps]
// COMMUX_GROUP=1 posts each step's window as one batch, COMMUX_COALESCE=1 sends each
// two-tensor message as one UCX message.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <commux/process_group_ucx.hpp>

namespace {

constexpr int kToLeft = 1;   // tag of messages travelling left
constexpr int kToRight = 2;  // tag of messages travelling right
constexpr double kAlpha = 0.25;

std::string env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

// One explicit diffusion step on `x` (interior points), with `left`/`right` as the values
// beyond either end (0 at the ends of the line).
at::Tensor diffuse(const at::Tensor& x, const at::Tensor& left, const at::Tensor& right) {
  const at::Tensor padded = at::cat({left, x, right});
  const auto n = x.size(0);
  return x + kAlpha * (padded.narrow(0, 0, n) - 2 * x + padded.narrow(0, 2, n));
}

// The two fields' initial values on global points [begin, begin + n).
std::vector<at::Tensor> initial(std::int64_t begin, std::int64_t n, std::int64_t total) {
  const at::Tensor i = at::arange(begin, begin + n, at::kDouble);
  return {at::sin(i * (3.14159265358979 / static_cast<double>(total))),
          (i.remainder(7) == 0).to(at::kDouble)};
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = std::stoi(env("RANK", "0"));
  const int size = std::stoi(env("WORLD_SIZE", "1"));
  const std::int64_t local = argc > 1 ? std::atoll(argv[1]) : 1000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::int64_t total = local * size;

  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(std::stoi(env("MASTER_PORT", "29500")));
  // torchrun serves the store itself (TORCHELASTIC_USE_AGENT_STORE); otherwise rank 0 does.
  opts.isServer = rank == 0 && env("TORCHELASTIC_USE_AGENT_STORE", "") != "True";
  opts.numWorkers = size;
  opts.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>(env("MASTER_ADDR", "127.0.0.1"), opts);
  auto pg = c10::make_intrusive<commux::ProcessGroupUCX>(store, rank, size);

  std::vector<at::Tensor> fields = initial(rank * local, local, total);
  const at::Tensor zero = at::zeros({1}, at::kDouble);
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    // Edges beyond the line stay 0; inner edges come from the neighbours.
    std::vector<at::Tensor> fromLeft{zero.clone(), zero.clone()};
    std::vector<at::Tensor> fromRight{zero.clone(), zero.clone()};
    std::vector<at::Tensor> toLeft{fields[0].narrow(0, 0, 1), fields[1].narrow(0, 0, 1)};
    std::vector<at::Tensor> toRight{fields[0].narrow(0, local - 1, 1), fields[1].narrow(0, local - 1, 1)};
    pg->startCoalescing();
    // Receives first, in the reverse order of the neighbours' sends: matching is by
    // (sender, tag), so the order of posting does not matter.
    if (rank + 1 < size) pg->recv(fromRight, rank + 1, kToLeft);
    if (rank > 0) pg->recv(fromLeft, rank - 1, kToRight);
    if (rank > 0) pg->send(toLeft, rank - 1, kToLeft);
    if (rank + 1 < size) pg->send(toRight, rank + 1, kToRight);
    pg->endCoalescing()->wait();
    for (int f = 0; f < 2; ++f) fields[f] = diffuse(fields[f], fromLeft[f], fromRight[f]);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The serial solve of the whole line, and this rank's part of it.
  std::vector<at::Tensor> serial = initial(0, total, total);
  for (int step = 0; step < steps; ++step) {
    for (int f = 0; f < 2; ++f) serial[f] = diffuse(serial[f], zero, zero);
  }
  double error = 0;
  for (int f = 0; f < 2; ++f) {
    error = std::max(error, (fields[f] - serial[f].narrow(0, rank * local, local)).abs().max().item<double>());
  }
  std::vector<at::Tensor> worst{at::full({1}, error, at::kDouble)};
  c10d::AllreduceOptions maxOpts;
  maxOpts.reduceOp = c10d::ReduceOp::MAX;
  pg->allreduce(worst, maxOpts)->wait();
  const double worstError = worst[0].item<double>();
  const bool ok = worstError < 1e-12;
  if (rank == 0) {
    std::printf("halo: %d ranks x %lld points, %d steps in %.3f s (%.1f us/step); max error vs serial %.3g: %s\n",
                size, static_cast<long long>(local), steps, seconds, seconds / steps * 1e6,
                worstError, ok ? "OK" : "WRONG");
  }
  pg->barrier()->wait();
  return ok ? 0 : 1;
}
