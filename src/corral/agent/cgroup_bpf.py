"""cgroup v2's device controller: a BPF_PROG_TYPE_CGROUP_DEVICE program attached to the job's cgroup, as
systemd's DeviceAllow= and Slurm's cgroup/v2 plugin do. It is loaded through the bpf(2) system call by
ctypes (no BPF library needed): a few instructions that refuse the job's denied character devices and
allow everything else. It is attached with BPF_F_ALLOW_MULTI, so the programs of the cgroups above (a
container's, systemd's) still apply: access needs every one's consent. Removing the cgroup detaches it.
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Sequence
from pathlib import Path

SYSCALL_BPF = {"x86_64": 321, "aarch64": 280}
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_MULTI = 2
BPF_DEVCG_DEV_CHAR = 2
ATTR_SIZE = 128  # zeroed beyond the fields given: the kernel accepts that from any version
LOG_SIZE = 4096

# struct bpf_cgroup_dev_ctx: access_type (access << 16 | device type), major, minor, each a u32.
LOAD_WORD, AND32_K, JNE_K, MOV64_K, EXIT = 0x61, 0x54, 0x55, 0xB7, 0x95


class BpfError(OSError):
    pass


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def device_filter(denied: Sequence[tuple[int, int]]) -> bytes:
    """The program: 0 (refuse) for a character device in `denied`, else 1 (allow)."""
    program = [
        _insn(LOAD_WORD, dst=2, src=1, off=0),
        _insn(AND32_K, dst=2, imm=0xFFFF),  # the device type
        _insn(LOAD_WORD, dst=3, src=1, off=4),
        _insn(LOAD_WORD, dst=4, src=1, off=8),
        _insn(JNE_K, dst=2, off=4 * len(denied), imm=BPF_DEVCG_DEV_CHAR),  # not a char device: allow
    ]
    for major, minor in denied:
        program += [_insn(JNE_K, dst=3, off=3, imm=major), _insn(JNE_K, dst=4, off=2, imm=minor),
                    _insn(MOV64_K, dst=0, imm=0), _insn(EXIT)]
    program += [_insn(MOV64_K, dst=0, imm=1), _insn(EXIT)]
    return b"".join(program)


def _bpf(command: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    number = SYSCALL_BPF.get(platform.machine())
    if number is None:
        raise BpfError(f"bpf(2) is not known to corral on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(ctypes.c_long(number), ctypes.c_int(command), attr, ctypes.c_uint(ATTR_SIZE))
    if result < 0:
        code = ctypes.get_errno()
        raise BpfError(code, os.strerror(code))
    return int(result)


def load(denied: Sequence[tuple[int, int]]) -> int:
    """The program's file descriptor."""
    program = device_filter(denied)
    insns = ctypes.create_string_buffer(program, len(program))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(LOG_SIZE)
    attr = ctypes.create_string_buffer(ATTR_SIZE)
    struct.pack_into("<IIQQIIQ", attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE, len(program) // 8,
                     ctypes.addressof(insns), ctypes.addressof(license_), 1, LOG_SIZE, ctypes.addressof(log))
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except BpfError as exc:
        detail = log.value.decode(errors="replace").strip().splitlines()
        raise BpfError(exc.errno, f"{exc.strerror}{': ' + detail[-1] if detail else ''}") from None


def deny(cgroup: Path, denied: Sequence[tuple[int, int]]) -> None:
    """Attach to `cgroup` (v2) a filter refusing its processes the character devices `denied`."""
    program = load(denied)
    try:
        target = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            attr = ctypes.create_string_buffer(ATTR_SIZE)
            struct.pack_into("<IIII", attr, 0, target, program, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI)
            _bpf(BPF_PROG_ATTACH, attr)
        finally:
            os.close(target)
    finally:
        os.close(program)  # the cgroup holds the program now


def unavailable() -> str | None:
    """Why device filters cannot be loaded here (not root, an old kernel, another architecture), or None."""
    try:
        os.close(load([(0, 0)]))
    except OSError as exc:
        return f"cannot load a cgroup v2 device filter: {exc.strerror or exc}"
    return None
