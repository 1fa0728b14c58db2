"""Prints what CMake needs to know about the installed torch, one `key=value` per line.

CMake reads this instead of torch's own TorchConfig.cmake: that config drags in a CUDA
toolkit search that must match torch's CUDA exactly, which a CPU-only build host does not
need and cannot always satisfy.
"""
import os

import torch
from torch.utils import cpp_extension

print(f"version={torch.__version__.split('+')[0]}")
print(f"include_dirs={';'.join(cpp_extension.include_paths())}")
print(f"lib_dir={os.path.join(os.path.dirname(torch.__file__), 'lib')}")
print(f"cxx11_abi={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
print(f"cuda={torch.version.cuda or ''}")
