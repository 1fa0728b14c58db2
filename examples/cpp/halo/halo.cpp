// A 1-D halo exchange in C++ over commux: two fields (u, v) diffuse on a line split across
// the ranks, each kept with one ghost cell on either side. A persistent exchange
// (commux::TensorExchange::halo, built once) fills the ghost cells every step: one message
// per neighbour carrying both fields. At the end every rank checks its part against a
// serial solve of the whole line.
//
// Launch it like any torch.distributed job (it reads RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT), e.g.:
//   torchrun --standalone --nproc-per-node 3 --no-python ./halo [points-per-rank] [steps]
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <commux/process_group_ucx.hpp>
#include <commux/tensor_exchange.hpp>

namespace {

constexpr int kHaloTag = 1;  // the tag the exchange's messages carry
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

  // Each field with a ghost cell on either side; beyond the ends of the line they stay 0.
  std::vector<at::Tensor> fields;
  for (const at::Tensor& f : initial(rank * local, local, total)) {
    at::Tensor padded = at::zeros({local + 2}, at::kDouble);
    padded.narrow(0, 1, local).copy_(f);
    fields.push_back(padded);
  }
  commux::TensorExchange halo = commux::TensorExchange::halo(
      pg, /*dims=*/{size}, /*periodic=*/{false}, /*diagonals=*/false, fields, /*widths=*/{1},
      kHaloTag);
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    halo.exchange();  // or start(), work on the interior, wait()
    for (at::Tensor& f : fields) {
      f.narrow(0, 1, local).copy_(diffuse(f.narrow(0, 1, local), f.narrow(0, 0, 1),
                                          f.narrow(0, local + 1, 1)));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The serial solve of the whole line, and this rank's part of it.
  std::vector<at::Tensor> serial = initial(0, total, total);
  const at::Tensor zero = at::zeros({1}, at::kDouble);
  for (int step = 0; step < steps; ++step) {
    for (int f = 0; f < 2; ++f) serial[f] = diffuse(serial[f], zero, zero);
  }
  double error = 0;
  for (int f = 0; f < 2; ++f) {
    error = std::max(error, (fields[f].narrow(0, 1, local) - serial[f].narrow(0, rank * local, local))
                                .abs().max().item<double>());
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
