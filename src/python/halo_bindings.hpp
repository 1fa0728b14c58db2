#pragma once
// commux._C's neighbourhood-exchange part (commux.halo): the grid from the core, and the
// core's persistent exchange over a commux process group's tensors.
#include <torch/csrc/utils/pybind.h>

void bindHalo(pybind11::module_& m);
