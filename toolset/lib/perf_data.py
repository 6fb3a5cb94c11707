"""Read the records of a perf.data file that the unwinder needs (no perf script in between).

`perf script` with `--call-graph dwarf` unwinds with libunwind, which stops at the first frame
without CFI: every JIT frame (Node, Java, Python's perf trampolines). `perf record -g` follows
frame pointers, which binaries built without them (Debian's libnode, libpython, libjvm, libc)
turn into garbage. The samples themselves carry everything a better unwinder needs (the user
registers and a copy of the user stack), so stacks_unwind.py unwinds them itself, and this
module only reads the file: the header, the event attributes, and the MMAP/MMAP2, COMM,
SWITCH, LOST/LOST_SAMPLES and SAMPLE records (see linux/perf_event.h and
tools/perf/util/header.h).

Everything here is data the kernel wrote for perf; sizes are still checked, so a truncated
file (perf killed mid-write) ends the records instead of raising.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

MAGIC = b"PERFILE2"

# perf_event_sample_format bits
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13
SAMPLE_WEIGHT = 1 << 14
SAMPLE_DATA_SRC = 1 << 15
SAMPLE_IDENTIFIER = 1 << 16
SAMPLE_TRANSACTION = 1 << 17
SAMPLE_REGS_INTR = 1 << 18
SAMPLE_PHYS_ADDR = 1 << 19
SAMPLE_AUX = 1 << 20
SAMPLE_CGROUP = 1 << 21
SAMPLE_DATA_PAGE_SIZE = 1 << 22
SAMPLE_CODE_PAGE_SIZE = 1 << 23
SAMPLE_WEIGHT_STRUCT = 1 << 24

RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_SAMPLE = 9
RECORD_MMAP2 = 10
RECORD_LOST_SAMPLES = 13
RECORD_SWITCH = 14
MISC_SWITCH_OUT = 1 << 13
MISC_MMAP_BUILD_ID = 1 << 14
MISC_SWITCH_OUT_PREEMPT = 1 << 14  # same bit, on SWITCH records: the task was still runnable

# Markers in a callchain (PERF_CONTEXT_*): the frames after PERF_CONTEXT_KERNEL are the kernel's.
CONTEXT_KERNEL = 0xFFFFFFFFFFFFFF80
CONTEXT_USER = 0xFFFFFFFFFFFFFE00
CONTEXT_MAX = 0xFFFFFFFFFFFFF001

# x86_64 perf register numbers (enum perf_event_x86_regs) of the registers unwinding uses.
PERF_REG_BP = 6
PERF_REG_SP = 7
PERF_REG_IP = 8
# perf register number -> DWARF register number (x86_64 psABI), for the general registers.
PERF_TO_DWARF = {0: 0, 3: 1, 2: 2, 1: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 16,
                 16: 8, 17: 9, 18: 10, 19: 11, 20: 12, 21: 13, 22: 14, 23: 15}


class PerfDataError(ValueError):
    """Not a perf.data file this reader understands; the message says what is wrong."""


@dataclass
class Attr:
    type: int
    config: int
    sample_type: int
    read_format: int
    sample_id_all: bool
    regs_user: int
    stack_user: int
    branch_hw_index: bool
    ids: list[int] = field(default_factory=list)
    name: str = ""


@dataclass
class Mapping:
    pid: int
    start: int
    end: int
    pgoff: int
    filename: str
    inode: int = 0
    prot: int = 0
    build_id: bytes = b""


@dataclass
class Sample:
    attr: Attr
    pid: int
    tid: int
    time: int
    ip: int
    period: int
    kernel: list[int]  # kernel frames from the callchain, innermost first
    user_chain: list[int]  # user frames perf's frame-pointer walk found (-g), innermost first
    regs: dict[int, int]  # DWARF register number -> value, at the sample
    stack: bytes  # a copy of the user stack from the stack pointer up
    raw: bytes = b""


@dataclass
class Switch:
    pid: int
    tid: int
    time: int
    out: bool
    preempt: bool = False


@dataclass
class Comm:
    pid: int
    tid: int
    comm: str


@dataclass
class Lost:
    """Records the kernel could not write: LOST (the ring buffer was full; any kind of
    record) or LOST_SAMPLES (samples only, counted by the event)."""
    count: int
    samples_only: bool


Record = Sample | Mapping | Switch | Comm | Lost


class PerfData:
    def __init__(self, data: bytes) -> None:
        if len(data) < 104 or data[:8] != MAGIC:
            raise PerfDataError("not a perf.data file (no PERFILE2 header)")
        self.data = memoryview(data)
        (_size, attr_size, attrs_off, attrs_size, self.data_off, self.data_size,
         types_off, types_size) = struct.unpack_from("<8Q", data, 8)
        del types_off, types_size
        if attr_size < 72 + 16 or attrs_off + attrs_size > len(data):
            raise PerfDataError("perf.data header points outside the file")
        self.attrs: list[Attr] = []
        for offset in range(attrs_off, attrs_off + attrs_size, attr_size):
            self.attrs.append(self._attr(offset, attr_size - 16))
        if not self.attrs:
            raise PerfDataError("perf.data has no events")
        self.by_id = {i: attr for attr in self.attrs for i in attr.ids}
        # Every event of one session shares the sample_id layout (perf enforces it).
        self.id_trailer = _trailer_size(self.attrs[0])
        self.data_end = min(len(data), self.data_off + self.data_size)

    def _attr(self, offset: int, size: int) -> Attr:
        data = self.data
        type_, _asize, config, _period, sample_type, read_format, flags = struct.unpack_from(
            "<IIQQQQQ", data, offset)
        branch_type, regs_user, stack_user = 0, 0, 0
        if size >= 92:
            branch_type, regs_user, stack_user = struct.unpack_from("<QQI", data, offset + 72)
        ids_off, ids_size = struct.unpack_from("<QQ", data, offset + size)
        ids = list(struct.unpack_from(f"<{ids_size // 8}Q", data, ids_off)) if ids_size else []
        return Attr(type=type_, config=config, sample_type=sample_type, read_format=read_format,
                    sample_id_all=bool(flags & (1 << 18)), regs_user=regs_user,
                    stack_user=stack_user, branch_hw_index=bool(branch_type & (1 << 17)),
                    ids=ids)

    def _attr_of(self, body: memoryview) -> Attr:
        first = self.attrs[0]
        if len(self.attrs) == 1 or not first.sample_type & SAMPLE_IDENTIFIER:
            return first
        (ident,) = struct.unpack_from("<Q", body, 0)
        return self.by_id.get(ident, first)

    def records(self) -> Iterator[Record]:
        data, offset, end = self.data, self.data_off, self.data_end
        while offset + 8 <= end:
            kind, misc, size = struct.unpack_from("<IHH", data, offset)
            if size < 8 or offset + size > end:
                return
            body = data[offset + 8 : offset + size]
            offset += size
            try:
                record = self._record(kind, misc, body)
            except struct.error:
                continue  # a record shorter than its fields say: skipped
            if record is not None:
                yield record

    def _record(self, kind: int, misc: int, body: memoryview) -> Record | None:
        if kind == RECORD_SAMPLE:
            return self._sample(body)
        if kind == RECORD_MMAP2:
            pid, _tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", body, 0)
            inode, build_id = 0, b""
            if misc & MISC_MMAP_BUILD_ID:
                id_size = body[32]
                build_id = bytes(body[36 : 36 + min(id_size, 20)])
            else:
                _maj, _min, inode = struct.unpack_from("<IIQ", body, 32)
            prot, _flags = struct.unpack_from("<II", body, 56)
            return Mapping(pid, addr, addr + length, pgoff, _cstring(body, 64, self.id_trailer),
                           inode, prot, build_id)
        if kind == RECORD_MMAP:
            pid, _tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", body, 0)
            return Mapping(pid, addr, addr + length, pgoff, _cstring(body, 32, self.id_trailer),
                           prot=5 if misc & 0x2000 == 0 else 1)
        if kind == RECORD_COMM:
            pid, tid = struct.unpack_from("<II", body, 0)
            return Comm(pid, tid, _cstring(body, 8, self.id_trailer))
        if kind == RECORD_LOST:
            _ident, lost = struct.unpack_from("<QQ", body, 0)
            return Lost(lost, samples_only=False)
        if kind == RECORD_LOST_SAMPLES:
            (lost,) = struct.unpack_from("<Q", body, 0)
            return Lost(lost, samples_only=True)
        if kind == RECORD_SWITCH and self.attrs[0].sample_id_all:
            pid, tid, time = self._sample_id(body)
            return Switch(pid, tid, time, bool(misc & MISC_SWITCH_OUT),
                          bool(misc & MISC_SWITCH_OUT_PREEMPT))
        return None

    def _sample_id(self, body: memoryview) -> tuple[int, int, int]:
        """pid, tid, time from the sample_id trailer of a non-sample record."""
        attr = self.attrs[0]
        offset = len(body) - self.id_trailer
        pid = tid = time = 0
        if attr.sample_type & SAMPLE_TID:
            pid, tid = struct.unpack_from("<II", body, offset)
            offset += 8
        if attr.sample_type & SAMPLE_TIME:
            (time,) = struct.unpack_from("<Q", body, offset)
        return pid, tid, time

    def _sample(self, body: memoryview) -> Sample:
        attr = self._attr_of(body)
        st = attr.sample_type
        offset = 0
        pid = tid = time = ip = 0
        period = 1

        def u64() -> int:
            nonlocal offset
            (value,) = struct.unpack_from("<Q", body, offset)
            offset += 8
            return int(value)

        if st & SAMPLE_IDENTIFIER:
            u64()
        if st & SAMPLE_IP:
            ip = u64()
        if st & SAMPLE_TID:
            pid, tid = struct.unpack_from("<II", body, offset)
            offset += 8
        if st & SAMPLE_TIME:
            time = u64()
        for bit in (SAMPLE_ADDR, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU):
            if st & bit:
                u64()
        if st & SAMPLE_PERIOD:
            period = u64()
        if st & SAMPLE_READ:
            raise PerfDataError("samples with read values are not supported")
        kernel: list[int] = []
        user_chain: list[int] = []
        if st & SAMPLE_CALLCHAIN:
            count = u64()
            chain = struct.unpack_from(f"<{count}Q", body, offset)
            offset += 8 * count
            context = CONTEXT_USER
            for address in chain:
                if address >= CONTEXT_MAX:
                    context = address
                elif context == CONTEXT_KERNEL:
                    kernel.append(address)
                elif context == CONTEXT_USER:
                    user_chain.append(address)
        raw = b""
        if st & SAMPLE_RAW:
            (raw_size,) = struct.unpack_from("<I", body, offset)
            raw = bytes(body[offset + 4 : offset + 4 + raw_size])
            offset += 4 + raw_size
        if st & SAMPLE_BRANCH_STACK:
            count = u64()
            offset += (8 if attr.branch_hw_index else 0) + 24 * count
        regs: dict[int, int] = {}
        if st & SAMPLE_REGS_USER:
            abi = u64()
            if abi:
                mask = attr.regs_user
                for bit in range(64):
                    if mask & (1 << bit):
                        value = u64()
                        if bit in PERF_TO_DWARF:
                            regs[PERF_TO_DWARF[bit]] = value
        stack = b""
        if st & SAMPLE_STACK_USER:
            size = u64()
            if size:
                start = offset
                offset += size
                dyn_size = u64()
                stack = bytes(body[start : start + min(size, dyn_size)])
        return Sample(attr, pid, tid, time, ip, period, kernel, user_chain, regs, stack, raw)


def _trailer_size(attr: Attr) -> int:
    if not attr.sample_id_all:
        return 0
    bits = (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER)
    return 8 * sum(1 for bit in bits if attr.sample_type & bit)


def _cstring(body: memoryview, offset: int, trailer: int) -> str:
    raw = bytes(body[offset : len(body) - trailer])
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def read(path: str, limit: int = 1 << 31) -> PerfData:
    with open(path, "rb") as handle:
        return PerfData(handle.read(limit))
