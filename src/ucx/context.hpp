#pragma once
#include <ucp/api/ucp.h>

#include <cstddef>
#include <string>
#include <vector>

namespace commux::ucx {

/// What UCX is told about the job (ucp_params_t's estimated_num_eps and estimated_num_ppn),
/// so that it sizes its transports for the job from the start; 0 is unknown, not passed.
/// Hints only: they change transport choices and resource sizing, never semantics, and
/// UCX_NUM_EPS / UCX_NUM_PPN override them.
struct JobHints {
  std::size_t endpoints = 0;
  std::size_t processesPerNode = 0;
  /// WORLD_SIZE and LOCAL_WORLD_SIZE, as torchrun sets them; commux.launcher fills them in
  /// under mpirun and srun when torch loads commux, before any group (hence the context)
  /// exists.
  static JobHints fromEnvironment();
};

/// Owns a ucp_context_h with the tag-matching and wakeup features.
class Context {
 public:
  /// `loopbackOnly`: UCX's network transports use the loopback device alone (UCX's
  /// NET_DEVICES=lo), so nothing listens on an outside interface.
  explicit Context(bool loopbackOnly = false, JobHints hints = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ucp_context_h get() const noexcept { return handle_; }
  /// Transport/device pairs UCX can use here, e.g. "posix/memory", "tcp/lo".
  std::vector<std::string> transports() const;
  /// What was passed to ucp_init (for the diagnostics: commux.info shows it).
  const JobHints& hints() const noexcept { return hints_; }

 private:
  ucp_context_h handle_ = nullptr;
  JobHints hints_;
};

}  // namespace commux::ucx
