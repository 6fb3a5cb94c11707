"""Go function names, files and lines from a Go binary's own table (`.gopclntab`), for binaries
built without symbols (`go build -ldflags="-s -w"`, as release builds are): the linker drops
`.symtab` and DWARF but keeps this table, which the Go runtime needs for its own tracebacks.

The layout follows Go's `debug/gosym/pclntab.go` and `runtime/symtab.go`, told apart by the
table's magic: 0xfffffffa (Go 1.16, 1.17), 0xfffffff0 (1.18, 1.19), 0xfffffff1 (1.20 and later).
Only 64-bit little-endian tables are read (the toolset's platform).

    header   magic, 0, 0, pc quantum, pointer size, nfunc, nfiles, [textStart (>= 1.18)],
             offsets of funcnametab, cutab, filetab, pctab, pclntab (from the header)
    functab  nfunc + 1 pairs (entry, offset of the function's _func from the functab):
             uint32 entry offsets from textStart (>= 1.18), else absolute uintptr entries
    _func    entry, nameoff, args, deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset,
             [startLine (>= 1.20)], funcID, flag, pad, nfuncdata; then npcdata uint32 offsets of
             pc-value tables, then nfuncdata funcdata (uint32 offsets from moduledata.gofunc,
             >= 1.18; absolute pointers before)
    pc-value tables: (zig-zag value delta, pc delta / quantum) varint pairs; the value in force
             at a pc: the file index (through cutab), the line, the inline tree index

Inlined calls: where the compiler inlined g into f, f's pc-value table PCDATA_InlTreeIndex gives
an index into f's inline tree (FUNCDATA_InlTree) for the pcs of g's code; the tree's entry names
g and a pc of f (parentPc) whose position is the call site. Walking the indices out gives the
frames the source has, innermost first, as Go's own tracebacks print them.

From Go 1.18 the inline tree lies at an offset from `moduledata.gofunc`, which a stripped
binary names nowhere but in the runtime's `moduledata` itself (in .noptrdata, or its own section
`.go.module` from Go 1.26): found by the pointer to the table it starts with.

The binary is the app's: hostile. Every read is bounds-checked against the loaded bytes, counts
and sizes are capped, pc-value walks are bounded, and a table that does not hold together is
"no table" (None), never an exception out of this module.
"""

from __future__ import annotations

import array
import bisect
import mmap
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass

GO116, GO118, GO120 = 116, 118, 120
MAGICS = {0xFFFFFFFA: GO116, 0xFFFFFFF0: GO118, 0xFFFFFFF1: GO120}

# Sections a Go binary's table may live in: its own, or (-buildmode=pie) a .data.rel.ro part.
TABLE_SECTIONS = (".gopclntab", ".data.rel.ro.gopclntab")
# Where the table is searched for by its header when no section is named for it.
SCAN_SECTIONS = (".data.rel.ro", ".rodata")
# Where the runtime's moduledata lies (it points at the table): Go >= 1.26 gives it a section.
MODULEDATA_SECTIONS = (".go.module", ".noptrdata", ".data.rel.ro")
# Where inline trees are (Go >= 1.18: go:func.*, at the end of .rodata; before: anywhere).
INLINE_SECTIONS = (".rodata",)
# Every section this module reads: elf_frames.load reads these too for a Go binary.
SECTIONS = TABLE_SECTIONS + SCAN_SECTIONS + MODULEDATA_SECTIONS + INLINE_SECTIONS
MAX_INLINE_SECTION = 64 << 20  # a larger .rodata is not read: names and lines, no inlining

PCDATA_INLTREEINDEX = 2
FUNCDATA_INLTREE = 3

MAX_FUNCTIONS = 2_000_000  # the largest Go binaries have a few hundred thousand
MAX_CANDIDATES = 16  # headers tried where the table is searched for
MAX_NAME = 4096
MAX_STEPS = 1 << 16  # pc-value pairs decoded of one table (a function's code bytes bound them)
MAX_TABLES = 16384  # decoded pc-value tables kept
MAX_INLINE_DEPTH = 64
MAX_INLINE_INDEX = 1 << 20
MAX_SCAN = 256 << 20  # bytes of a section searched for the table's header or moduledata
VALIDATION_SAMPLE = 64  # inline trees decoded to tell the right moduledata.gofunc


class Corrupt(ValueError):
    """The table does not hold together here (internal: the public methods return None)."""


@dataclass(frozen=True)
class GoFrame:
    function: str
    file: str  # "" when the table holds none
    line: int  # 0 when the table holds none

    def label(self) -> str:
        """`function (file:line)`, as py-spy names Python frames; the function alone when the
        table has no position for it."""
        if self.file and self.line > 0:
            return f"{self.function} ({self.file}:{self.line})"
        return self.function


Memory = bytes | bytearray | mmap.mmap
Section = tuple[int, int, int]  # (vaddr, file offset, size)


class GoTable:
    """One binary's table: functions by entry (bisect), names, positions, inline frames."""

    def __init__(self, data: Memory, offset: int, size: int, vaddr: int,
                 to_offset: Callable[[int], int | None],
                 moduledata: list[Section] | None = None, text: int | None = None) -> None:
        """`data`: the file's bytes; the table at file `offset`, `size` bytes long, loaded at
        `vaddr`. `to_offset` maps a link-time address to a file offset (None outside the
        file's loaded bytes). `moduledata`: sections to look for the runtime's moduledata in;
        `text`: the .text section's address (the entries' base when nothing better says).
        Raises Corrupt when the header does not hold together."""
        self.data = data
        self.start = offset
        self.end = min(offset + max(size, 0), len(data))
        self.vaddr = vaddr
        self.to_offset = to_offset
        if self.end - self.start < 72:
            raise Corrupt("shorter than a header")
        magic, pad, quantum, ptrsize = struct.unpack_from("<IHBB", data, offset)
        version = MAGICS.get(magic)
        if version is None:
            raise Corrupt(f"magic {magic:#x}")
        if pad != 0 or quantum not in (1, 2, 4) or ptrsize != 8:
            raise Corrupt("header: not a 64-bit table")
        self.version = version
        self.quantum = quantum
        words = [int(word) for word in struct.unpack_from("<8Q", data, offset + 8)]
        nfunc = words[0]
        if version >= GO118:
            text_start = words[2]
            names, cutab, filetab, pctab, pcln = words[3:8]
        else:
            text_start = 0
            names, cutab, filetab, pctab, pcln = words[2:7]
        size = self.end - self.start
        for value in (names, cutab, filetab, pctab, pcln):
            if not 0 < value < size:
                raise Corrupt("a sub-table lies outside the table")
        if not 0 < nfunc <= MAX_FUNCTIONS:
            raise Corrupt(f"{nfunc} functions")
        self.names = offset + names
        self.cutab = offset + cutab
        self.filetab = offset + filetab
        self.pctab = offset + pctab
        self.functab = offset + pcln
        self.nfunc = nfunc
        self.names_end = min(at for at in (self.cutab, self.filetab, self.pctab, self.functab,
                                           self.end) if at > self.names)
        self.func_size = 44 if version in (GO116, GO120) else 40
        self.entry_size = 4 if version >= GO118 else 8
        self._gofunc: int | None | bool = False
        self._tables: dict[int, tuple[list[int], list[int]]] = {}
        self._moduledata_sections = moduledata or []
        self._moduledata: int | None | bool = False
        if version >= GO118 and text_start == 0:
            # Go >= 1.26 writes 0 (and PIE tables may hold an unrelocated one): the runtime's
            # moduledata.text, else the .text section's address.
            found = self._moduledata_word(22)
            text_start = found if found else (text or 0)
            if not text_start:
                raise Corrupt("no text start")
        self.text_start = text_start
        self.entries, self.offsets = self._functab()

    # --- bounded reads ---------------------------------------------------------------------

    def _u32(self, at: int) -> int:
        if not self.start <= at <= self.end - 4:
            raise Corrupt("read outside the table")
        return int(struct.unpack_from("<I", self.data, at)[0])

    def _i32(self, at: int) -> int:
        value = self._u32(at)
        return value - (1 << 32) if value & 0x80000000 else value

    def _string(self, at: int) -> str:
        if not self.start <= at < self.end:
            raise Corrupt("string outside the table")
        stop = min(at + MAX_NAME, self.end)
        end = self.data.find(b"\0", at, stop)
        if end < 0:
            end = stop
        return bytes(self.data[at:end]).decode("utf-8", "replace")

    def _varint(self, at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if at >= self.end or shift > 28:
                raise Corrupt("varint")
            byte = self.data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, at
            shift += 7

    # --- functions ---------------------------------------------------------------------------

    def _functab(self) -> tuple[array.array[int], array.array[int]]:
        """(entries, _func offsets) of the nfunc + 1 pairs, as compact arrays (8 and 4 or 8
        bytes each: a million functions cost 16 MB, not the 70 of lists)."""
        count = self.nfunc + 1
        width = self.entry_size
        end = self.functab + count * 2 * width
        if end > self.end:
            raise Corrupt("functab outside the table")
        code = "I" if width == 4 else "Q"
        pairs = array.array(code, bytes(self.data[self.functab : end]))
        if sys.byteorder != "little":  # pragma: no cover (the toolset runs on x86_64)
            pairs.byteswap()
        offsets = pairs[1::2]
        entries = array.array("Q", pairs[0::2])
        if width == 4 and self.text_start:
            base = self.text_start
            if base + max(entries) >= 1 << 64:
                raise Corrupt("text start")
            entries = array.array("Q", [base + entry for entry in entries])
        if any(a > b for a, b in zip(entries, entries[1:], strict=False)):
            raise Corrupt("functab not sorted by entry")
        return entries, offsets

    def _func(self, index: int) -> int:
        """File offset of function `index`'s _func, checked against its functab entry."""
        at = self.functab + int(self.offsets[index])
        if at + self.func_size > self.end:
            raise Corrupt("_func outside the table")
        if self.entry_size == 4:
            entry = self.text_start + self._u32(at)
        else:
            entry = int(struct.unpack_from("<Q", self.data, at)[0])
        if entry != self.entries[index]:
            raise Corrupt("_func entry differs from its functab entry")
        return at

    def _field(self, func: int, number: int) -> int:
        """The `number`th uint32 field after the entry: 1 nameoff, 2 args, 3 deferreturn, 4 pcsp,
        5 pcfile, 6 pcln, 7 npcdata, 8 cuOffset."""
        return self._u32(func + self.entry_size + (number - 1) * 4)

    def _nfuncdata(self, func: int) -> int:
        return int(self.data[func + self.func_size - 1])

    def index(self, vaddr: int) -> int | None:
        """The function containing `vaddr` (bisect over the entries), or None."""
        index = bisect.bisect_right(self.entries, vaddr) - 1
        if index < 0 or index >= self.nfunc:
            return None
        return index

    def function(self, vaddr: int) -> str | None:
        """The name of the function containing `vaddr` (outermost: inlining aside), or None."""
        try:
            index = self.index(vaddr)
            if index is None:
                return None
            return self._string(self.names + self._field(self._func(index), 1)) or None
        except (Corrupt, IndexError, struct.error):
            return None

    # --- positions ---------------------------------------------------------------------------

    def _table(self, offset: int) -> tuple[list[int], list[int]]:
        """The pc-value table at pctab+`offset`, decoded: (ends of its ranges, relative to the
        function's entry; their values). Tables are shared between functions (the linker
        deduplicates them), so they are cached by offset; a broken end cuts the table there."""
        cached = self._tables.get(offset)
        if cached is not None:
            return cached
        ends: list[int] = []
        values: list[int] = []
        at, value, pc = self.pctab + offset, -1, 0
        try:
            for step in range(MAX_STEPS):
                delta, at = self._varint(at)
                if delta == 0 and step:
                    break
                value += -((delta + 1) >> 1) if delta & 1 else delta >> 1
                advance, at = self._varint(at)
                pc += advance * self.quantum
                ends.append(pc)
                values.append(value)
        except Corrupt:
            pass
        if len(self._tables) >= MAX_TABLES:
            self._tables.clear()
        self._tables[offset] = (ends, values)
        return ends, values

    def _pcvalue(self, offset: int, entry: int, target: int) -> int:
        """The value the pc-value table at pctab+`offset` holds at `target` (-1: none)."""
        if offset == 0:
            return -1
        ends, values = self._table(offset)
        found = bisect.bisect_right(ends, target - entry)
        return values[found] if found < len(values) else -1

    def _file_line(self, func: int, entry: int, pc: int) -> tuple[str, int]:
        line = self._pcvalue(self._field(func, 6), entry, pc)
        number = self._pcvalue(self._field(func, 5), entry, pc)
        if number < 0:
            return "", max(line, 0)
        name_at = self._u32(self.cutab + (self._field(func, 8) + number) * 4)
        if name_at == 0xFFFFFFFF:
            return "", max(line, 0)
        return self._string(self.filetab + name_at), max(line, 0)

    def _pcdata(self, func: int, entry: int, table: int, pc: int) -> int:
        if table >= self._field(func, 7):
            return -1
        return self._pcvalue(self._u32(func + self.func_size + table * 4), entry, pc)

    # --- inline trees ------------------------------------------------------------------------

    def _inline_tree(self, func: int) -> int | None:
        """File offset of the function's inline tree, or None."""
        if self._nfuncdata(func) <= FUNCDATA_INLTREE:
            return None
        npcdata = self._field(func, 7)
        slots = func + self.func_size + npcdata * 4
        if self.version >= GO118:
            relative = self._u32(slots + FUNCDATA_INLTREE * 4)
            gofunc = self.gofunc()
            if relative == 0xFFFFFFFF or gofunc is None:
                return None
            return self.to_offset(gofunc + relative)
        if (slots - self.start) % 8:
            slots += 4  # pointers are aligned (the table starts 32-aligned)
        at = slots + FUNCDATA_INLTREE * 8
        if at + 8 > self.end:
            raise Corrupt("funcdata outside the table")
        pointer = int(struct.unpack_from("<Q", self.data, at)[0])
        return self.to_offset(pointer) if pointer else None

    def _inlined_call(self, tree: int, index: int, size: int) -> tuple[str, int]:
        """(name, parentPc) of entry `index` of the inline tree at file offset `tree`."""
        if not 0 <= index < MAX_INLINE_INDEX:
            raise Corrupt("inline index")
        if self.version >= GO120:  # funcID u8, pad [3], nameOff i32, parentPc i32, startLine i32
            at = tree + index * 16 + 4
        else:  # parent i16, funcID u8, pad, file i32, line i32, func_ i32, parentPc i32
            at = tree + index * 20 + 12
        if not 0 <= at <= len(self.data) - 8:
            raise Corrupt("inline tree outside the file")
        name_off, parent_pc = struct.unpack_from("<iI", self.data, at)
        if not 0 <= name_off < self.names_end - self.names or parent_pc >= size:
            raise Corrupt("inline tree entry")
        return self._string(self.names + name_off), parent_pc

    def frames(self, vaddr: int) -> list[GoFrame] | None:
        """The source frames at `vaddr`, innermost first: the functions inlined there, then
        the function the code belongs to; None when the table does not cover it."""
        try:
            index = self.index(vaddr)
            if index is None:
                return None
            func = self._func(index)
            entry, size = self.entries[index], self.entries[index + 1] - self.entries[index]
            name = self._string(self.names + self._field(func, 1))
            if not name:
                return None
        except (Corrupt, IndexError, struct.error):
            return None
        frames: list[GoFrame] = []
        pc = vaddr
        try:
            tree = self._inline_tree(func)
            seen: set[int] = set()
            for _ in range(MAX_INLINE_DEPTH if tree is not None else 0):
                inline_index = self._pcdata(func, entry, PCDATA_INLTREEINDEX, pc)
                if inline_index < 0 or tree is None:
                    break
                if inline_index in seen:
                    raise Corrupt("the inline tree loops")
                seen.add(inline_index)
                callee, parent_pc = self._inlined_call(tree, inline_index, size)
                file, line = self._file_line(func, entry, pc)
                frames.append(GoFrame(callee, file, line))
                pc = entry + parent_pc
        except (Corrupt, IndexError, struct.error):
            frames, pc = [], vaddr  # a broken tree: the function alone, at its own position
        try:
            file, line = self._file_line(func, entry, pc)
        except (Corrupt, IndexError, struct.error):
            file, line = "", 0
        frames.append(GoFrame(name, file, line))
        return frames

    # --- moduledata --------------------------------------------------------------------------

    def _moduledata_at(self) -> int | None:
        """File offset of the runtime's moduledata: the struct that begins with a pointer to
        this table and a slice of its function names."""
        if self._moduledata is not False:
            return self._moduledata
        self._moduledata = None
        needle = struct.pack("<QQ", self.vaddr, self.names - self.start + self.vaddr)
        for _vaddr, offset, size in self._moduledata_sections:
            stop = min(offset + min(size, MAX_SCAN), len(self.data))
            at = self.data.find(needle, offset, stop)
            while at >= 0 and (at - offset) % 8:
                at = self.data.find(needle, at + 1, stop)
            if at >= 0 and at + 8 * 48 <= len(self.data):
                self._moduledata = at
                return at
        return None

    def _moduledata_word(self, number: int) -> int | None:
        at = self._moduledata_at()
        if at is None:
            return None
        return int(struct.unpack_from("<Q", self.data, at + number * 8)[0])

    def gofunc(self) -> int | None:
        """moduledata.gofunc (Go >= 1.18): the base of funcdata offsets. Its place in the
        struct moved between releases (word 38 for 1.18-1.19, 40 from 1.20): the candidate
        whose inline trees decode is taken, or none."""
        if self._gofunc is not False:
            return self._gofunc
        self._gofunc = None
        if self._moduledata_at() is None:
            return None
        preferred = [40, 38] if self.version >= GO120 else [38, 40]
        candidates = preferred + [n for n in range(30, 48) if n not in preferred]
        with_trees = self._functions_with_trees()
        for number in candidates:
            value = self._moduledata_word(number)
            if not value or self.to_offset(value) is None:
                continue
            self._gofunc = value
            if with_trees and self._trees_decode(with_trees):
                return value
            self._gofunc = None
        return None

    def _functions_with_trees(self) -> list[int]:
        found = []
        step = max(1, self.nfunc // (VALIDATION_SAMPLE * 16))
        for index in range(0, self.nfunc, step):
            try:
                func = self._func(index)
                if self._nfuncdata(func) <= FUNCDATA_INLTREE:
                    continue
                slot = func + self.func_size + self._field(func, 7) * 4 + FUNCDATA_INLTREE * 4
                if self._u32(slot) != 0xFFFFFFFF:
                    found.append(index)
            except (Corrupt, IndexError, struct.error):
                continue
            if len(found) >= VALIDATION_SAMPLE:
                break
        return found

    def _trees_decode(self, indices: list[int]) -> bool:
        """Whether the first entry of each of these functions' inline trees names another
        function (one never inlines into itself)."""
        for index in indices:
            try:
                func = self._func(index)
                tree = self._inline_tree(func)
                if tree is None:
                    return False
                size = self.entries[index + 1] - self.entries[index]
                name, _parent = self._inlined_call(tree, 0, size)
                own = self._string(self.names + self._field(func, 1))
            except (Corrupt, IndexError, struct.error):
                return False
            if not name or not name.isprintable() or name == own:
                return False
        return True


def find(data: Memory, sections: dict[str, Section],
         to_offset: Callable[[int], int | None]) -> GoTable | None:
    """The Go table of a binary from its sections ({name: (vaddr, file offset, size)} of those
    loaded), or None: by the section named for it, else by its header in read-only data."""
    moduledata = [sections[name] for name in MODULEDATA_SECTIONS if name in sections]
    text = sections[".text"][0] if ".text" in sections else None
    for name in TABLE_SECTIONS:
        if name in sections:
            vaddr, offset, size = sections[name]
            try:
                return GoTable(data, offset, size, vaddr, to_offset, moduledata, text)
            except (Corrupt, IndexError, struct.error):
                return None
    for name in SCAN_SECTIONS:
        if name not in sections:
            continue
        vaddr, offset, size = sections[name]
        stop = min(offset + min(size, MAX_SCAN), len(data))
        at = offset
        # The header: magic (ff ff ff + version byte), two zero bytes, quantum 1, pointers 8.
        for _ in range(MAX_CANDIDATES):
            at = data.find(b"\xff\xff\xff\x00\x00\x01\x08", at + 1, stop)
            if at < 0:
                break
            start = at - 1
            if (start - offset) % 8:
                continue
            try:
                return GoTable(data, start, stop - start, vaddr + start - offset, to_offset,
                               moduledata, text)
            except (Corrupt, IndexError, struct.error):
                continue
    return None
