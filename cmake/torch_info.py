"""Prints what CMake needs to know about the installed torch, one `key=value` per line.

CMake reads this instead of torch's own TorchConfig.cmake: that config drags in a CUDA
toolkit search that must match torch's CUDA exactly, which a CPU-only build host does not
need and cannot always satisfy.
"""
import os

import torch
from torch.utils import cpp_extension

print(f"version={torch.__version__.split('+')[0]}")
# Older releases list folders their wheels no longer ship (include/TH, include/THC).
print(f"include_dirs={';'.join(p for p in cpp_extension.include_paths() if os.path.isdir(p))}")
print(f"lib_dir={os.path.join(os.path.dirname(torch.__file__), 'lib')}")
print(f"cxx11_abi={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
print(f"cuda={torch.version.cuda or ''}")
# The pybind11 ABI torch's own module was built with (older releases: _cxxabi1011 etc.):
# the extension must use the same, or pybind11 cannot see torch's c10d.Backend type.
import warnings  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # newer releases: "ABI handling is internal to PyBind11"
    _abi = getattr(cpp_extension, "_get_pybind11_abi_build_flags", lambda: [])()
print("pybind11_defines=" + ";".join(f[2:].replace('\\"', '"') for f in _abi if f.startswith("-D")))
