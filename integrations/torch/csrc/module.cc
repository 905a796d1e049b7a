// The Python module chorus_torch._C: the constructor torch.distributed calls for backend
// "chorus" (registered by chorus_torch/__init__.py).
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>

#include "process_group_chorus.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, module) {
  // The base class's Python type must exist before a subclass is declared: importing
  // torch.distributed registers it.
  py::module::import("torch.distributed");
  py::class_<chorus_torch::ProcessGroupChorus, c10d::ProcessGroup,
             c10::intrusive_ptr<chorus_torch::ProcessGroupChorus>>(module, "ProcessGroupChorus")
      .def(py::init([](int rank, int size, std::chrono::milliseconds timeout) {
             return c10::make_intrusive<chorus_torch::ProcessGroupChorus>(rank, size, timeout);
           }),
           py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
}
