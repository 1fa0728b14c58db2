"""Counts this process's process_vm_readv calls without changing what they do.

The shared-memory channel's single-copy reads (src/shm/cma.cpp, COMMUX_SHM_CMA_BYTES) are
process_vm_readv calls; nothing else in a rank makes them (UCX's own cma transport is for
point-to-point messages). :func:`install` puts a seccomp filter on every thread of this
process that sends each process_vm_readv to a supervisor process (SECCOMP_RET_USER_NOTIF);
the supervisor counts it in a shared page and lets the call run as it was
(SECCOMP_USER_NOTIF_FLAG_CONTINUE). The supervisor is a separate process because the
thread making the call may hold this one's GIL. It exits when this process does.

Linux 5.7 or later (a listener with TSYNC) on x86_64 or aarch64; :func:`available` says
whether it works here. A filter cannot be removed: install it in a process that ends with
the test (a rank).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile

# machine -> (AUDIT_ARCH_*, __NR_process_vm_readv, __NR_seccomp)
_ARCH = {"x86_64": (0xC000003E, 310, 317), "aarch64": (0xC00000B7, 270, 277)}

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_SECCOMP_FILTER_FLAG_TSYNC_ESRCH = 1 << 4
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_USER_NOTIF = 0x7FC00000
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_RET_K = 0x06

_SUPERVISOR = r"""
import fcntl, mmap, os, select, socket, struct, sys

channel = socket.socket(fileno=int(sys.argv[1]))
_, fds, _, _ = socket.recv_fds(channel, 16, 1)
listener = fds[0]
fd = os.open(sys.argv[2], os.O_RDWR)
counter = mmap.mmap(fd, 8)
RECV, SEND, CONTINUE = 0xC0502100, 0xC0182101, 1  # SECCOMP_IOCTL_NOTIF_*, _FLAG_CONTINUE
poller = select.poll()
poller.register(listener, select.POLLIN)
channel.send(b"ready")
while True:
    events = poller.poll()
    if not any(event & select.POLLIN for _, event in events):
        break  # POLLHUP: no thread is left under the filter
    notice = bytearray(80)  # struct seccomp_notif, zeroed as the kernel requires
    try:
        fcntl.ioctl(listener, RECV, notice, True)
    except OSError:
        continue  # the calling thread went away meanwhile
    (notice_id,) = struct.unpack_from("=Q", notice, 0)
    struct.pack_into("=Q", counter, 0, struct.unpack_from("=Q", counter, 0)[0] + 1)
    answer = bytearray(struct.pack("=QqiI", notice_id, 0, 0, CONTINUE))
    try:
        fcntl.ioctl(listener, SEND, answer, True)
    except OSError:
        pass
"""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class Counter:
    """process_vm_readv calls of this process since :func:`install`."""

    def __init__(self, page: mmap.mmap, supervisor: subprocess.Popen):
        self._page = page
        self._supervisor = supervisor

    def count(self) -> int:
        if self._supervisor.poll() is not None:
            raise RuntimeError(f"the process_vm_readv counter exited ({self._supervisor.returncode})")
        return struct.unpack_from("=Q", self._page, 0)[0]


def install() -> Counter:
    """Starts counting this process's process_vm_readv calls (every thread, also those
    started later). Raises OSError where seccomp's user notification is unavailable."""
    machine = platform.machine()
    if machine not in _ARCH:
        raise OSError(f"process_vm_readv counting: no syscall numbers for {machine}")
    audit_arch, nr_readv, nr_seccomp = _ARCH[machine]
    fd, path = tempfile.mkstemp(prefix="commux_cma_count_")
    os.write(fd, b"\0" * 8)
    page = mmap.mmap(fd, 8)
    os.close(fd)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    supervisor = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(theirs.fileno()), path],
                                  pass_fds=[theirs.fileno()])
    theirs.close()
    try:
        program = (_SockFilter * 6)(
            _SockFilter(_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
            _SockFilter(_BPF_JEQ_K, 0, 3, audit_arch),
            _SockFilter(_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
            _SockFilter(_BPF_JEQ_K, 0, 1, nr_readv),
            _SockFilter(_BPF_RET_K, 0, 0, _SECCOMP_RET_USER_NOTIF),
            _SockFilter(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        )
        fprog = _SockFprog(len(program), program)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        flags = (_SECCOMP_FILTER_FLAG_NEW_LISTENER | _SECCOMP_FILTER_FLAG_TSYNC
                 | _SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
        listener = libc.syscall(ctypes.c_long(nr_seccomp), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                                ctypes.c_long(flags), ctypes.byref(fprog))
        if listener < 0:
            raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER|TSYNC)")
        socket.send_fds(ours, [b"listener"], [listener])
        os.close(listener)
        ours.settimeout(30)
        if ours.recv(16) != b"ready":
            raise OSError("the process_vm_readv counter did not start")
    except BaseException:
        supervisor.kill()
        supervisor.wait()
        raise
    finally:
        ours.close()
        os.unlink(path)
    return Counter(page, supervisor)


def _self_check() -> None:
    """In a fresh process: one process_vm_readv of our own memory must count once."""
    counter = install()
    libc = ctypes.CDLL(None, use_errno=True)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    source, target = ctypes.create_string_buffer(b"commux", 8), ctypes.create_string_buffer(8)
    local = IoVec(ctypes.cast(target, ctypes.c_void_p), 8)
    remote = IoVec(ctypes.cast(source, ctypes.c_void_p), 8)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    n = libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    assert n == 8 and target.value == b"commux", (n, ctypes.get_errno(), target.value)
    assert counter.count() == 1, counter.count()
    print("cma counter ok")


def available() -> str:
    """'' where counting works on this machine, else why not (runs a fresh interpreter)."""
    code = "import sys; sys.path.insert(0, %r); import cma_counter; cma_counter._self_check()" % (
        os.path.dirname(os.path.abspath(__file__)))
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return "the process_vm_readv counter's self-check hung"
    if proc.returncode == 0 and "cma counter ok" in proc.stdout:
        return ""
    return "process_vm_readv cannot be counted here: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
