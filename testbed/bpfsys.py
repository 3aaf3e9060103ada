"""The few bpf(2) commands the testbed needs, through ctypes (no libbpf at run time).

Pinned maps are opened with ``BPF_OBJ_GET``, read and written element by
element; per-CPU values come back as one slot per possible CPU, each rounded
up to 8 bytes. Programs are checked for existence by id (teardown tests).
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "riscv64": 280,
            "ppc64le": 361, "s390x": 351}
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_OBJ_GET = 7
BPF_PROG_GET_NEXT_ID = 11
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
#: offsets in struct bpf_prog_info (linux/bpf.h, stable ABI)
PROG_INFO_SIZE = 232
PROG_INFO_RUN_TIME_NS = 192
PROG_INFO_RUN_CNT = 200
BPF_ANY = 0
ATTR_SIZE = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise OSError(f"bpf(2): unknown syscall number on {platform.machine()}")
    ret = int(_libc.syscall(nr, cmd, attr, ATTR_SIZE))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def possible_cpus() -> int:
    """Number of possible CPUs (the per-CPU value count), from sysfs."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) if hi else int(lo)) - int(lo) + 1
    return n


class Map:
    """A pinned BPF map, opened by path; closed by ``close()`` or ``with``."""

    def __init__(self, path: Path | str, value_size: int, per_cpu: bool = False) -> None:
        self.path = str(path)
        attr = ctypes.create_string_buffer(ATTR_SIZE)
        name = ctypes.create_string_buffer(self.path.encode())
        ctypes.memmove(ctypes.addressof(attr), ctypes.byref(
            ctypes.c_uint64(ctypes.addressof(name))), 8)
        try:
            self.fd = _bpf(BPF_OBJ_GET, attr)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open pinned map {self.path}: {exc.strerror}"
                          ) from None
        self.value_size = value_size
        self.per_cpu = per_cpu
        self.ncpu = possible_cpus() if per_cpu else 1
        self.stride = (value_size + 7) // 8 * 8 if per_cpu else value_size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Map:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _elem(self, cmd: int, key: bytes, value: ctypes.Array[ctypes.c_char],
              flags: int = 0) -> None:
        attr = ctypes.create_string_buffer(ATTR_SIZE)
        k = ctypes.create_string_buffer(key, len(key))
        fields = (ctypes.c_uint32 * 2)(self.fd, 0)
        ctypes.memmove(attr, fields, 8)
        ptrs = (ctypes.c_uint64 * 3)(ctypes.addressof(k), ctypes.addressof(value), flags)
        ctypes.memmove(ctypes.addressof(attr) + 8, ptrs, 24)
        _bpf(cmd, attr)

    def lookup(self, key: bytes) -> list[bytes] | None:
        """One value (a list of one per CPU for per-CPU maps), or None if absent."""
        buf = ctypes.create_string_buffer(self.stride * self.ncpu)
        try:
            self._elem(BPF_MAP_LOOKUP_ELEM, key, buf)
        except OSError as exc:
            if exc.errno == 2:  # ENOENT
                return None
            raise
        raw = buf.raw
        return [raw[i * self.stride: i * self.stride + self.value_size]
                for i in range(self.ncpu)]

    def update(self, key: bytes, value: bytes | list[bytes]) -> None:
        """Write a value; for per-CPU maps a single value is copied to every CPU."""
        values = value if isinstance(value, list) else [value] * self.ncpu
        if len(values) != self.ncpu or any(len(v) != self.value_size for v in values):
            raise ValueError(f"map {self.path}: expected {self.ncpu} value(s) of "
                             f"{self.value_size} bytes")
        blob = b"".join(v.ljust(self.stride, b"\0") for v in values)
        buf = ctypes.create_string_buffer(blob, len(blob))
        self._elem(BPF_MAP_UPDATE_ELEM, key, buf, BPF_ANY)


def prog_exists(prog_id: int) -> bool:
    """Is a BPF program with this id still loaded?"""
    attr = ctypes.create_string_buffer(ATTR_SIZE)
    ctypes.memmove(attr, ctypes.byref(ctypes.c_uint32(prog_id)), 4)
    try:
        fd = _bpf(BPF_PROG_GET_FD_BY_ID, attr)
    except OSError as exc:
        if exc.errno == 2:
            return False
        raise
    os.close(fd)
    return True


def enable_run_time_stats() -> int:
    """Turn on per-program run-time accounting until the returned fd is closed."""
    attr = ctypes.create_string_buffer(ATTR_SIZE)
    ctypes.memmove(attr, ctypes.byref(ctypes.c_uint32(BPF_STATS_RUN_TIME)), 4)
    return _bpf(BPF_ENABLE_STATS, attr)


def prog_run_time(prog_id: int) -> tuple[int, int]:
    """(ns spent in the program, times it ran) since it was loaded, counted while
    run-time stats were enabled."""
    attr = ctypes.create_string_buffer(ATTR_SIZE)
    ctypes.memmove(attr, ctypes.byref(ctypes.c_uint32(prog_id)), 4)
    fd = _bpf(BPF_PROG_GET_FD_BY_ID, attr)
    try:
        info = ctypes.create_string_buffer(PROG_INFO_SIZE)
        attr = ctypes.create_string_buffer(ATTR_SIZE)
        head = (ctypes.c_uint32 * 2)(fd, PROG_INFO_SIZE)
        ctypes.memmove(attr, head, 8)
        ctypes.memmove(ctypes.addressof(attr) + 8,
                       ctypes.byref(ctypes.c_uint64(ctypes.addressof(info))), 8)
        _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    finally:
        os.close(fd)
    run_ns = int.from_bytes(info.raw[PROG_INFO_RUN_TIME_NS:PROG_INFO_RUN_TIME_NS + 8], "little")
    cnt = int.from_bytes(info.raw[PROG_INFO_RUN_CNT:PROG_INFO_RUN_CNT + 8], "little")
    return run_ns, cnt
