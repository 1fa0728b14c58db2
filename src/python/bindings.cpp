// commux._C: the Python face of the C++ backend. Built against torch's bundled pybind11 so
// ProcessGroupUCX is a true subclass of torch's c10d Backend type.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>
#include <ucp/api/ucp.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <type_traits>
#include <variant>

#include "commux/options.hpp"
#include "config/settings.hpp"
#include "core/reduce.hpp"
#include "c10d/aten_fold.hpp"
#include "config/process_engine.hpp"
#include "commux/window_ucx.hpp"
#include "commux/process_group_ucx.hpp"
#include "cuda/cuda_support.hpp"
#include "engine/engine.hpp"
#include "python/halo_bindings.hpp"
#include "core/error.hpp"
#include "ucx/loaded_library.hpp"

namespace py = pybind11;


PYBIND11_MODULE(_C, m) {
  m.doc() = "commux: a UCX c10d backend for torch.distributed";
  py::module_::import("torch.distributed");
  commux::engine::Engine::setBlockingWrapper([](void (*call)(void*), void* arg) {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release release;
      call(arg);
    } else {
      call(arg);
    }
  });

  py::class_<commux::ProcessGroupUCX, c10d::Backend, c10::intrusive_ptr<commux::ProcessGroupUCX>>(
      m, "ProcessGroupUCX")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds,
                    bool, bool>(),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout") = commux::ProcessGroupUCX::kDefaultTimeout,
           py::arg("set_up_in_background") = true, py::arg("unconfigured") = false,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("timeout", &commux::ProcessGroupUCX::timeout)
      .def(
          "health",
          [](const commux::ProcessGroupUCX& pg) {
            const auto h = pg.health();
            py::dict d;
            d["healthy"] = h.healthy;
            d["dead_ranks"] = h.deadRanks;
            d["reason"] = h.reason;
            return d;
          },
          "What this rank knows of the group's health: healthy, dead_ranks, reason")
      .def("hosts", &commux::ProcessGroupUCX::hosts, py::call_guard<py::gil_scoped_release>(),
           "The group's ranks by host, when its first collective found that it spans hosts "
           "(collectives then run shared memory inside hosts, UCX between); else []")
      .def("shared_memory_shape", &commux::ProcessGroupUCX::sharedMemoryShape,
           "This host's shared-memory channel as its leader shaped it (slot and step sizes, "
           "depth, crowded, this process's poll_ns); {} before the group's first collective "
           "and when it has none")
      .def("connect", &commux::ProcessGroupUCX::connect,
           py::arg("timeout") = std::chrono::milliseconds(-1),
           py::call_guard<py::gil_scoped_release>(),
           "Waits until every member has made the group (at most `timeout`, the group's by "
           "default) and watches them all; raises naming the missing ranks")
      .def("known_ranks", &commux::ProcessGroupUCX::knownRanks,
           "The ranks whose records this rank has read and whose deaths it watches itself; "
           "in a group that spans hosts the others' deaths reach it through its host's leader")
      // torch calls this on ranks left out of a new subgroup of a device-bound group (NCCL's
      // ncclCommSplit needs them). A commux subgroup meets through its own store keys,
      // members only, so there is nothing for the others to do.
      .def(
          "perform_nocolor_split", [](commux::ProcessGroupUCX&, const c10::Device&) {},
          py::arg("device"));

#ifdef C10D_BACKEND_HAS_WINDOW
  // What dist._new_window returns on a commux group: torch's Window with commux's extensions
  // (pybind11 hands out the most derived registered type).
  py::class_<commux::WindowUCX, c10d::Window, c10::intrusive_ptr<commux::WindowUCX>>(m, "Window")
      .def(
          "put_signal",
          [](commux::WindowUCX& w, const at::Tensor& tensor, int64_t dst, int64_t offset,
             bool asyncOp, std::chrono::milliseconds timeout) {
            return w.putSignal(tensor, dst, offset, asyncOp, timeout);
          },
          py::arg("tensor"), py::arg("dst_rank"), py::arg("target_offset_nelems"),
          py::arg("async_op") = false, py::arg("timeout") = c10d::kUnsetTimeout,
          py::call_guard<py::gil_scoped_release>(),
          "put followed by a signal to the same rank (one message where the data is small); "
          "the wait_signal it satisfies sees the data")
      .def(
          "get",
          [](commux::WindowUCX& w, const at::Tensor& tensor, int64_t src, int64_t offset,
             bool asyncOp, std::chrono::milliseconds timeout) {
            return w.get(tensor, src, offset, asyncOp, timeout);
          },
          py::arg("tensor"), py::arg("src_rank"), py::arg("source_offset_nelems") = 0,
          py::arg("async_op") = false, py::arg("timeout") = c10d::kUnsetTimeout,
          py::call_guard<py::gil_scoped_release>(),
          "Reads tensor.numel() elements at that offset of src_rank's window into tensor; it "
          "sees every put this rank made to that window before")
      .def(
          "flush",
          [](commux::WindowUCX& w, int64_t peer, bool asyncOp, std::chrono::milliseconds timeout) {
            return w.flush(peer, asyncOp, timeout);
          },
          py::arg("peer_rank"), py::arg("async_op") = false,
          py::arg("timeout") = c10d::kUnsetTimeout, py::call_guard<py::gil_scoped_release>(),
          "Done once every put this rank made to peer_rank before is in the peer's memory")
      .def("path", &commux::WindowUCX::path, py::arg("rank"),
           "How puts reach `rank`: 'self', 'mapped' (its tensor is in shared memory on this "
           "host), 'cma' (another process of this host: process_vm_writev from 256 KiB, UCX "
           "messages below), 'messages' (UCX)");
#endif

  m.def("version", [] { return std::string(COMMUX_VERSION); });
  m.def("ucx_version", &commux::ucx::loadedVersion, "Version of the UCX library loaded at run time");
  m.def("ucx_header_version",
        [] { return std::to_string(UCP_API_MAJOR) + "." + std::to_string(UCP_API_MINOR); });
  m.def("ucx_library_path", &commux::ucx::loadedLibraryPath, "Path of the libucp that was loaded");
  m.def("cuda_compiled", &commux::cuda::compiled);
  m.def("cuda_device_count", &commux::cuda::deviceCount);
  m.def("transports", [] { return commux::processEngine()->transports(); },
        py::call_guard<py::gil_scoped_release>(),
        "UCX transport/device pairs usable in this process");
  m.def(
      "ucx_context_hints",
      [] {
        commux::ucx::JobHints h;
        {
          py::gil_scoped_release release;
          h = commux::processEngine()->jobHints();
        }
        // None: not passed to UCX (not known when the context was made).
        const auto orNone = [](std::size_t v) { return v > 0 ? py::cast(v) : py::none(); };
        py::dict d;
        d["estimated_num_eps"] = orNone(h.endpoints);
        d["estimated_num_ppn"] = orNone(h.processesPerNode);
        return d;
      },
      "What ucp_init was told about the job (WORLD_SIZE, LOCAL_WORLD_SIZE, else the first "
      "group's size for the endpoints)");
  m.def("config", [] {
    // From the settings table (src/config/settings.cpp), as this process read it.
    const auto& c = commux::Config::get();
    py::dict d;
    for (const commux::Setting& s : commux::settings()) {
      if (s.show == nullptr) continue;  // the Python package's own
      d[s.name] = std::visit(
          [](const auto& v) -> py::object {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, std::monostate>) {
              return py::none();
            } else {
              return py::cast(v);
            }
          },
          s.show(c));
    }
    return d;
  });
  m.def(
      "_core_reduce",
      [](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const std::string& op) {
        // Tests only: the core's kernel on three alike contiguous CPU tensors.
        TORCH_CHECK_VALUE(out.device().is_cpu() && out.is_contiguous() && a.is_contiguous() &&
                              b.is_contiguous() && a.sizes() == out.sizes() &&
                              b.sizes() == out.sizes() && a.scalar_type() == out.scalar_type() &&
                              b.scalar_type() == out.scalar_type(),
                          "_core_reduce: three alike contiguous CPU tensors");
        const auto dtype = commux::coreDtype(out.scalar_type());
        TORCH_CHECK_VALUE(dtype, "_core_reduce: the core has no dtype ", out.scalar_type());
        static const std::pair<const char*, commux::core::ReduceOp> kOps[] = {
            {"sum", commux::core::ReduceOp::Sum},      {"product", commux::core::ReduceOp::Product},
            {"min", commux::core::ReduceOp::Min},      {"max", commux::core::ReduceOp::Max},
            {"band", commux::core::ReduceOp::BitAnd}, {"bor", commux::core::ReduceOp::BitOr},
            {"bxor", commux::core::ReduceOp::BitXor}};
        for (const auto& [name, value] : kOps) {
          if (op == name) {
            return commux::core::reduce(out.data_ptr(), a.data_ptr(), b.data_ptr(),
                                        static_cast<std::size_t>(out.numel()), *dtype, value);
          }
        }
        TORCH_CHECK_VALUE(false, "_core_reduce: no operation ", op);
        return false;
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "settings_table",
      [] {
        py::list rows;
        for (const commux::Setting& s : commux::settings()) {
          rows.append(py::make_tuple(s.name, s.defaultText, s.doc, s.read != nullptr));
        }
        return rows;
      },
      "Every COMMUX_* setting as (name, default, meaning, read by the C++ core), in the "
      "order of docs/settings.md");
  m.def(
      "_engine_stats",
      [] {
        commux::engine::Engine::Stats s;
        {
          py::gil_scoped_release release;  // the worker lock's holder may need the GIL
          s = commux::processEngine()->stats();
        }
        py::dict d;
        d["active_ops"] = s.activeOps;
        d["inflight_requests"] = s.inflightRequests;
        d["endpoints"] = s.endpoints;
        d["purged_messages"] = s.purgedMessages;
        return d;
      },
      "Operations and UCX requests in flight in this process (leak checks). A live group "
      "that spans hosts keeps one of each posted: its death-notice receive");
  bindHalo(m);
  m.def("_shutdown", &commux::engine::Engine::shutdownInstance,
        py::call_guard<py::gil_scoped_release>(),
        "Stops the progress thread (registered with atexit)");
}
