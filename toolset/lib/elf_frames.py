"""What the unwinder needs from an ELF file of the app: its symbols and its call frame
information (.eh_frame through .eh_frame_hdr), read from bytes the caller opened safely.

Only 64-bit little-endian x86_64 objects are read (the toolset's platform). The files come from
the app's filesystem: every offset is bounds-checked, and a malformed table means "no CFI /
no symbol here" for that address, never an exception out of this module.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from dataclasses import dataclass

import gopclntab

# DWARF register numbers (x86_64 psABI)
RBP = 6
RSP = 7
RA = 16

# Pointer encodings (DW_EH_PE_*)
PE_OMIT = 0xFF
PE_ABSPTR, PE_ULEB128, PE_UDATA2, PE_UDATA4, PE_UDATA8 = 0x00, 0x01, 0x02, 0x03, 0x04
PE_SLEB128, PE_SDATA2, PE_SDATA4, PE_SDATA8 = 0x09, 0x0A, 0x0B, 0x0C
PE_PCREL, PE_DATAREL = 0x10, 0x30
PE_INDIRECT = 0x80

SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
FUNC_TYPES = (STT_FUNC, STT_GNU_IFUNC)
PT_LOAD = 1

# A CIE as _cie reads it: (code alignment, data alignment, return-address register, FDE pointer
# encoding, has a `z` augmentation, is a signal frame, initial instructions).
Cie = tuple[int, int, int, int, bool, bool, bytes]


class ElfError(ValueError):
    pass


@dataclass
class Rule:
    """How to find a register's value in the caller: 'offset' = saved at CFA+N, 'val' = CFA+N,
    'same' = unchanged, 'reg' = in register N, 'undefined' = none (outermost frame)."""

    kind: str
    value: int = 0


@dataclass
class Row:
    """The CFI row for one address: CFA = register + offset (or an expression), and rules."""

    cfa_reg: int
    cfa_offset: int
    cfa_expr: bytes | None
    rules: dict[int, Rule]
    signal: bool = False


def uleb(data: bytes | mmap.mmap, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, offset


def sleb(data: bytes | mmap.mmap, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if byte & 0x40:
                result -= 1 << shift
            return result, offset


class ElfFile:
    """Symbols and CFI of one ELF object, from its bytes (the whole file)."""

    def __init__(self, data: bytes | mmap.mmap, name: str = "") -> None:
        if len(data) < 64 or data[:4] != b"\x7fELF":
            raise ElfError(f"{name or 'file'} is not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ElfError(f"{name or 'file'} is not a 64-bit little-endian ELF file")
        self.data = data
        self.name = name
        (self.elf_type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize,
         phnum, shentsize, shnum, shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
        self.loads: list[tuple[int, int, int, int]] = []  # (vaddr, memsz, offset, filesz)
        for index in range(phnum):
            base = phoff + index * phentsize
            if base + 56 > len(data):
                break
            p_type, _pflags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz = struct.unpack_from(
                "<IIQQQQQ", data, base)
            if p_type == PT_LOAD:
                self.loads.append((p_vaddr, p_memsz, p_offset, p_filesz))
        self.sections: dict[str, tuple[int, int, int, int, int, int]] = {}
        headers = []
        for index in range(shnum if shoff and shoff + shnum * shentsize <= len(data) else 0):
            base = shoff + index * shentsize
            (sh_name, sh_type, _sflags, sh_addr, sh_offset, sh_size, sh_link, _info, _align,
             _entsize) = struct.unpack_from("<IIQQQQIIQQ", data, base)
            headers.append((sh_name, sh_type, sh_addr, sh_offset, sh_size, sh_link))
        if headers and shstrndx < len(headers):
            names_at = headers[shstrndx][3]
            for index, (sh_name, sh_type, sh_addr, sh_offset, sh_size, sh_link) in enumerate(
                    headers):
                name_end = data.find(b"\0", names_at + sh_name)
                section = data[names_at + sh_name : name_end].decode("ascii", "replace")
                self.sections.setdefault(section, (sh_type, sh_addr, sh_offset, sh_size,
                                                   sh_link, index))
        self._headers = headers
        self._symbols: tuple[list[int], list[int], list[int]] | None = None
        self._hdr: tuple[int, int, int, int, int] | None | bool = False
        self._rows: dict[int, Row | None] = {}
        # Where the full symbol table is when this file has only .dynsym (a debug file of the
        # same build-id, see recording.BinaryOpener).
        self.debug_symbols: ElfFile | None = None
        self._go_table: gopclntab.GoTable | None | bool = False

    # --- addresses -------------------------------------------------------------------------

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        """The link-time address of a file offset (inside a PT_LOAD segment)."""
        for vaddr, _memsz, offset, filesz in self.loads:
            if offset <= file_offset < offset + max(filesz, 1):
                return file_offset - offset + vaddr
        return None

    @property
    def is_go(self) -> bool:
        return any(name in self.sections for name in GO_MARKS)

    def go_table(self) -> gopclntab.GoTable | None:
        """The Go function table of a Go binary (names, files and lines without .symtab), or
        None; read once."""
        if self._go_table is False:
            sections = {name: (addr, offset, size) for name, (_t, addr, offset, size, _l, _i)
                        in self.sections.items() if name in GO_SECTIONS}
            self._go_table = gopclntab.find(self.data, sections, self._section_at_vaddr) \
                if self.is_go else None
        return self._go_table  # type: ignore[return-value]

    @property
    def has_cfi(self) -> bool:
        return self._eh_frame_hdr() is not None

    def build_id(self) -> str:
        section = self.sections.get(".note.gnu.build-id")
        if section is None:
            return ""
        offset, size = section[2], section[3]
        if size < 16:
            return ""
        namesz, descsz, _kind = struct.unpack_from("<III", self.data, offset)
        start = offset + 12 + ((namesz + 3) & ~3)
        return self.data[start : start + descsz].hex()

    # --- symbols -----------------------------------------------------------------------------

    def _load_symbols(self) -> tuple[list[int], list[int], list[int]]:
        """Function symbols of .symtab and .dynsym, sorted by address; names are decoded only
        when asked for (a big C++ binary has hundreds of thousands)."""
        if self._symbols is not None:
            return self._symbols
        entries: list[tuple[int, int, int]] = []
        for section in (".symtab", ".dynsym"):
            info = self.sections.get(section)
            if info is None or info[4] >= len(self._headers):
                continue
            _type, _addr, offset, size, link, _index = info
            strtab = self._headers[link]
            str_off, str_size = strtab[3], strtab[4]
            end = min(offset + size, len(self.data))
            count = max(0, (end - offset) // 24)
            if count == 0 or offset % 8:
                continue
            # Three u64 per entry: name|info|other|shndx, value, size. Columns by slicing and
            # filtering in comprehensions: node's tables hold 185,000 entries.
            table = memoryview(self.data)[offset : offset + count * 24].cast("Q")
            heads, values, sizes = table[0::3].tolist(), table[1::3].tolist(), table[2::3].tolist()
            table.release()
            entries += [
                (value, sym_size, str_off + (head & 0xFFFFFFFF))
                for head, value, sym_size in zip(heads, values, sizes, strict=True)
                if value and (head >> 32) & 0xF in FUNC_TYPES and head >> 48
                and head & 0xFFFFFFFF < str_size
            ]
        entries.sort()  # for one address, the largest size comes last and wins
        found = {value: (sym_size, name) for value, sym_size, name in entries}
        starts = list(found)
        self._symbols = (starts, [found[a][0] for a in starts], [found[a][1] for a in starts])
        return self._symbols

    def _name(self, offset: int) -> str:
        end = self.data.find(b"\0", offset, offset + (1 << 16))
        if end < 0:
            end = min(offset + (1 << 16), len(self.data))
        name = bytes(self.data[offset:end]).decode("utf-8", "replace")
        # A versioned name of a full symbol table (`__libc_start_main@GLIBC_2.2.5`): the
        # version is no part of the function's name.
        return name.split("@", 1)[0] if "@" in name and not name.startswith("@") else name

    @property
    def has_symtab(self) -> bool:
        return ".symtab" in self.sections

    def symbol(self, vaddr: int) -> str | None:
        """The function containing link-time address `vaddr`, or None."""
        if self.debug_symbols is not None:
            found = self.debug_symbols.symbol(vaddr)
            if found is not None:
                return found
        starts, sizes, names = self._load_symbols()
        index = bisect.bisect_right(starts, vaddr) - 1
        if index < 0:
            return None
        size = sizes[index]
        # A symbol without a size (hand-written assembly) covers up to the next symbol.
        if vaddr < starts[index] + size or (size == 0 and vaddr - starts[index] < 1 << 16):
            return self._name(names[index])
        return None

    # --- call frame information -----------------------------------------------------------

    def _section_at_vaddr(self, vaddr: int) -> int | None:
        for vstart, memsz, offset, filesz in self.loads:
            if vstart <= vaddr < vstart + min(memsz, filesz):
                return vaddr - vstart + offset
        return None

    def _eh_frame_hdr(self) -> tuple[int, int, int, int, int] | None:
        """(file offset of the table, its vaddr, count, table encoding, eh_frame vaddr)."""
        if self._hdr is not False:
            return self._hdr  # type: ignore[return-value]
        self._hdr = None
        info = self.sections.get(".eh_frame_hdr")
        if info is None:
            return None
        _type, addr, offset, size, _link, _index = info
        data = self.data
        if size < 12 or offset + size > len(data) or data[offset] != 1:
            return None
        ptr_enc, count_enc, table_enc = data[offset + 1], data[offset + 2], data[offset + 3]
        try:
            eh_frame, pos = self._read_encoded(offset + 4, ptr_enc, addr + 4, addr)
            count, pos = self._read_encoded(pos, count_enc, addr + (pos - offset), addr)
        except (IndexError, struct.error):
            return None
        if table_enc != 0x3B:  # datarel | sdata4: what every linker writes
            return None
        self._hdr = (pos, addr, count, table_enc, eh_frame)
        return self._hdr

    def _read_encoded(self, offset: int, encoding: int, pc: int, datarel: int) -> tuple[int, int]:
        """Read a DW_EH_PE-encoded pointer at file `offset`; `pc` is its own vaddr."""
        data = self.data
        fmt = encoding & 0x0F
        if fmt == PE_ABSPTR or fmt == PE_UDATA8:
            (value,) = struct.unpack_from("<Q", data, offset)
            size = 8
        elif fmt == PE_UDATA4:
            (value,) = struct.unpack_from("<I", data, offset)
            size = 4
        elif fmt == PE_SDATA4:
            (value,) = struct.unpack_from("<i", data, offset)
            size = 4
        elif fmt == PE_UDATA2:
            (value,) = struct.unpack_from("<H", data, offset)
            size = 2
        elif fmt == PE_SDATA2:
            (value,) = struct.unpack_from("<h", data, offset)
            size = 2
        elif fmt == PE_SDATA8:
            (value,) = struct.unpack_from("<q", data, offset)
            size = 8
        elif fmt == PE_ULEB128:
            value, end = uleb(data, offset)
            size = end - offset
        elif fmt == PE_SLEB128:
            value, end = sleb(data, offset)
            size = end - offset
        else:
            raise ElfError(f"pointer encoding {encoding:#x}")
        application = encoding & 0x70
        if application == PE_PCREL:
            value += pc
        elif application == PE_DATAREL:
            value += datarel
        return value & 0xFFFFFFFFFFFFFFFF, offset + size

    def _find_fde(self, vaddr: int) -> int | None:
        """File offset of the FDE covering vaddr (binary search in .eh_frame_hdr)."""
        hdr = self._eh_frame_hdr()
        if hdr is None:
            return None
        table, hdr_addr, count, _enc, _eh = hdr
        data = self.data
        low, high = 0, count - 1
        found = -1
        if table + count * 8 > len(data):
            return None
        while low <= high:
            mid = (low + high) // 2
            (start,) = struct.unpack_from("<i", data, table + mid * 8)
            if (start + hdr_addr) & 0xFFFFFFFFFFFFFFFF <= vaddr:
                found = mid
                low = mid + 1
            else:
                high = mid - 1
        if found < 0:
            return None
        (fde_rel,) = struct.unpack_from("<i", data, table + found * 8 + 4)
        return self._section_at_vaddr(hdr_addr + fde_rel)

    def row(self, vaddr: int) -> Row | None:
        """The CFI row in force at vaddr, or None when there is no CFI for it."""
        if vaddr in self._rows:
            return self._rows[vaddr]
        try:
            result = self._compute_row(vaddr)
        except (IndexError, struct.error, ElfError, KeyError):
            result = None
        if len(self._rows) < 200_000:
            self._rows[vaddr] = result
        return result

    def function_start(self, vaddr: int) -> int | None:
        """Where the function holding `vaddr` begins, by its CFI (one FDE per function): how
        functions a stripped binary does not name are told apart, and the address a
        developer gives addr2line with the library's debug symbols."""
        try:
            fde = self._find_fde(vaddr)
            found = self._fde_header(fde, vaddr) if fde is not None else None
        except (IndexError, struct.error, ElfError, KeyError):
            return None
        return found[1] if found is not None else None

    def _fde_header(self, fde: int, vaddr: int) -> tuple[Cie, int, int, int] | None:
        """(its CIE, pc_begin, where its augmentation starts, where it ends) of the FDE at
        file offset `fde`, or None unless it covers `vaddr`."""
        data = self.data
        length, = struct.unpack_from("<I", data, fde)
        if length in (0, 0xFFFFFFFF):
            return None
        cie_ptr, = struct.unpack_from("<I", data, fde + 4)
        cie_info = self._cie(fde + 4 - cie_ptr)
        fde_enc = cie_info[3]
        fde_vaddr = self.vaddr_of_offset(fde)
        if fde_vaddr is None:
            return None
        pos = fde + 8
        pc_begin, pos = self._read_encoded(pos, fde_enc, fde_vaddr + (pos - fde), 0)
        pc_range, pos = self._read_encoded(pos, fde_enc & 0x0F, 0, 0)
        if not pc_begin <= vaddr < pc_begin + pc_range:
            return None
        return cie_info, pc_begin, pos, fde + 4 + length

    def _compute_row(self, vaddr: int) -> Row | None:
        fde = self._find_fde(vaddr)
        if fde is None:
            return None
        header = self._fde_header(fde, vaddr)
        if header is None:
            return None
        cie_info, pc_begin, pos, end = header
        code_align, data_align, ra_reg, _fde_enc, has_z, signal, initial = cie_info
        data = self.data
        if has_z:
            aug_len, pos = uleb(data, pos)
            pos += aug_len
        row = Row(cfa_reg=RSP, cfa_offset=8, cfa_expr=None, rules={}, signal=signal)
        initial_row = self._execute(initial, row, code_align, data_align, None, 0, vaddr)
        initial_rules = dict(initial_row.rules)
        instructions = data[pos:end]
        result = self._execute(instructions, initial_row, code_align, data_align,
                               initial_rules, pc_begin, vaddr)
        if ra_reg != RA and ra_reg in result.rules:
            result.rules[RA] = result.rules[ra_reg]
        return result

    def _cie(self, offset: int) -> Cie:
        data = self.data
        length, cie_id = struct.unpack_from("<II", data, offset)
        if cie_id != 0 or length in (0, 0xFFFFFFFF):
            raise ElfError("not a CIE")
        end = offset + 4 + length
        pos = offset + 9
        version = data[offset + 8]
        aug_end = data.find(b"\0", pos, end)
        if aug_end < 0:
            raise ElfError("CIE augmentation string")
        augmentation = data[pos:aug_end].decode("ascii", "replace")
        pos = aug_end + 1
        if version >= 4:
            pos += 2  # address size, segment size
        code_align, pos = uleb(data, pos)
        data_align, pos = sleb(data, pos)
        if version == 1:
            ra_reg = data[pos]
            pos += 1
        else:
            ra_reg, pos = uleb(data, pos)
        fde_enc = PE_ABSPTR
        signal = "S" in augmentation
        has_z = augmentation.startswith("z")
        if has_z:
            aug_len, pos = uleb(data, pos)
            aug_pos, aug_end_pos = pos, pos + aug_len
            for char in augmentation[1:]:
                if char == "R":
                    fde_enc = data[aug_pos]
                    aug_pos += 1
                elif char == "P":
                    enc = data[aug_pos]
                    cie_vaddr = self.vaddr_of_offset(aug_pos + 1) or 0
                    _, aug_pos = self._read_encoded(aug_pos + 1, enc & 0x7F, cie_vaddr, 0)
                elif char == "L":
                    aug_pos += 1
            pos = aug_end_pos
        return code_align, data_align, ra_reg, fde_enc, has_z, signal, data[pos:end]

    @staticmethod
    def _execute(program: bytes, start: Row, code_align: int, data_align: int,
                 initial: dict[int, Rule] | None, pc: int, target: int) -> Row:
        """Run CFA instructions from `pc` until the row that covers `target`."""
        row = Row(start.cfa_reg, start.cfa_offset, start.cfa_expr, dict(start.rules),
                  start.signal)
        stack: list[tuple[int, int, bytes | None, dict[int, Rule]]] = []
        pos = 0
        size = len(program)
        while pos < size:
            op = program[pos]
            pos += 1
            high, low = op & 0xC0, op & 0x3F
            if high == 0x40:  # advance_loc
                pc += low * code_align
                if pc > target:
                    return row
                continue
            if high == 0x80:  # offset
                value, pos = uleb(program, pos)
                row.rules[low] = Rule("offset", value * data_align)
                continue
            if high == 0xC0:  # restore
                row.rules.pop(low, None)
                if initial and low in initial:
                    row.rules[low] = initial[low]
                continue
            if op == 0x00:  # nop
                continue
            if op in (0x02, 0x03, 0x04):  # advance_loc1/2/4
                width = {0x02: 1, 0x03: 2, 0x04: 4}[op]
                delta = int.from_bytes(program[pos : pos + width], "little")
                pos += width
                pc += delta * code_align
                if pc > target:
                    return row
            elif op == 0x01:  # set_loc: not used in .eh_frame with PC-relative encodings
                raise ElfError("DW_CFA_set_loc")
            elif op in (0x05, 0x11):  # offset_extended(_sf)
                reg, pos = uleb(program, pos)
                if op == 0x05:
                    value, pos = uleb(program, pos)
                else:
                    value, pos = sleb(program, pos)
                row.rules[reg] = Rule("offset", value * data_align)
            elif op == 0x06:  # restore_extended
                reg, pos = uleb(program, pos)
                row.rules.pop(reg, None)
                if initial and reg in initial:
                    row.rules[reg] = initial[reg]
            elif op == 0x07:  # undefined
                reg, pos = uleb(program, pos)
                row.rules[reg] = Rule("undefined")
            elif op == 0x08:  # same_value
                reg, pos = uleb(program, pos)
                row.rules[reg] = Rule("same")
            elif op == 0x09:  # register
                reg, pos = uleb(program, pos)
                other, pos = uleb(program, pos)
                row.rules[reg] = Rule("reg", other)
            elif op == 0x0A:  # remember_state
                stack.append((row.cfa_reg, row.cfa_offset, row.cfa_expr, dict(row.rules)))
            elif op == 0x0B:  # restore_state
                if stack:
                    cfa_reg, cfa_offset, cfa_expr, rules = stack.pop()
                    row.cfa_reg, row.cfa_offset, row.cfa_expr = cfa_reg, cfa_offset, cfa_expr
                    row.rules = rules
            elif op in (0x0C, 0x12):  # def_cfa(_sf)
                row.cfa_reg, pos = uleb(program, pos)
                if op == 0x0C:
                    row.cfa_offset, pos = uleb(program, pos)
                else:
                    value, pos = sleb(program, pos)
                    row.cfa_offset = value * data_align
                row.cfa_expr = None
            elif op == 0x0D:  # def_cfa_register
                row.cfa_reg, pos = uleb(program, pos)
                row.cfa_expr = None
            elif op in (0x0E, 0x13):  # def_cfa_offset(_sf)
                if op == 0x0E:
                    row.cfa_offset, pos = uleb(program, pos)
                else:
                    value, pos = sleb(program, pos)
                    row.cfa_offset = value * data_align
            elif op == 0x0F:  # def_cfa_expression
                length, pos = uleb(program, pos)
                row.cfa_expr = program[pos : pos + length]
                pos += length
            elif op in (0x10, 0x16):  # expression / val_expression: a rule we cannot follow
                reg, pos = uleb(program, pos)
                length, pos = uleb(program, pos)
                pos += length
                row.rules[reg] = Rule("expr")
            elif op in (0x14, 0x15):  # val_offset(_sf)
                reg, pos = uleb(program, pos)
                if op == 0x14:
                    value, pos = uleb(program, pos)
                else:
                    value, pos = sleb(program, pos)
                row.rules[reg] = Rule("val", value * data_align)
            elif op == 0x2E:  # GNU_args_size
                _, pos = uleb(program, pos)
            elif op == 0x2F:  # GNU_negative_offset_extended
                reg, pos = uleb(program, pos)
                value, pos = uleb(program, pos)
                row.rules[reg] = Rule("offset", -value * data_align)
            else:
                raise ElfError(f"CFA instruction {op:#x}")
        return row


def evaluate_cfa_expression(expr: bytes, regs: dict[int, int]) -> int | None:
    """The few DWARF operations CFA expressions use in practice (the PLT's rule among them:
    rsp + 8 + ((rip & 15) >= 11) << 3). None for anything else."""
    stack: list[int] = []
    pos = 0
    mask = 0xFFFFFFFFFFFFFFFF
    try:
        while pos < len(expr):
            op = expr[pos]
            pos += 1
            if 0x70 <= op <= 0x8F:  # breg0..31 SLEB
                offset, pos = sleb(expr, pos)
                reg = op - 0x70
                if reg not in regs:
                    return None
                stack.append((regs[reg] + offset) & mask)
            elif 0x30 <= op <= 0x4F:  # lit0..31
                stack.append(op - 0x30)
            elif op == 0x1A:
                b, a = stack.pop(), stack.pop()
                stack.append(a & b)
            elif op == 0x22:
                b, a = stack.pop(), stack.pop()
                stack.append((a + b) & mask)
            elif op == 0x24:
                b, a = stack.pop(), stack.pop()
                stack.append((a << b) & mask)
            elif op == 0x2A:
                b, a = stack.pop(), stack.pop()
                stack.append(int(a >= b))
            elif op == 0x23:  # plus_uconst
                value, pos = uleb(expr, pos)
                stack.append((stack.pop() + value) & mask)
            elif op == 0x06:  # deref: needs memory, not supported here
                return None
            else:
                return None
    except IndexError:
        return None
    return stack[-1] if stack else None


# Sections the unwinder reads; a loaded file holds only these (and the headers).
WANTED = (".eh_frame_hdr", ".eh_frame", ".symtab", ".strtab", ".dynsym", ".dynstr",
          ".note.gnu.build-id", ".gopclntab", ".note.go.buildid")
# Sections only a Go binary has; in one, the sections its function table may need are read too.
GO_MARKS = (".gopclntab", ".data.rel.ro.gopclntab", ".note.go.buildid", ".go.buildinfo")
GO_SECTIONS = (*gopclntab.SECTIONS, ".text")


def load(fd: int, size: int, name: str, limit: int,
         wanted: tuple[str, ...] = WANTED) -> ElfFile:
    """An ElfFile of an open file, holding only its headers and the WANTED sections: read with
    pread into anonymous memory at their file offsets (untouched pages cost nothing), so a
    1 GiB binary costs what its tables weigh, and a file the app truncates meanwhile reads as
    zeros instead of killing the reader with SIGBUS as a file mapping would."""
    if size < 64:
        raise ElfError(f"{name} is not an ELF file")
    if size > limit:
        raise ElfError(f"{name} is larger than {limit >> 20} MiB")
    memory = mmap.mmap(-1, size)

    def fill(offset: int, length: int) -> None:
        if 0 <= offset < size and length > 0:
            chunk = os.pread(fd, min(length, size - offset), offset)
            memory[offset : offset + len(chunk)] = chunk

    fill(0, 64)
    header = memory[:64]
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise ElfError(f"{name} is not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", header, 32)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", header, 54)
    fill(phoff, phentsize * phnum)
    fill(shoff, shentsize * shnum)
    sections = []
    for index in range(shnum):
        base = shoff + index * shentsize
        if base + 64 > size:
            break
        sh_name, sh_type, _flags, _addr, sh_offset, sh_size = struct.unpack_from(
            "<IIQQQQ", memory, base)
        sections.append((sh_name, sh_type, sh_offset, sh_size))
    if shstrndx < len(sections):
        names_offset, names_size = sections[shstrndx][2], sections[shstrndx][3]
        fill(names_offset, names_size)
        wanted_names = {section.encode() for section in wanted}
        named: list[tuple[str, int, int]] = []
        for sh_name, sh_type, sh_offset, sh_size in sections:
            end = memory.find(b"\0", names_offset + sh_name, names_offset + names_size)
            if sh_type != 8 and end >= 0:  # not NOBITS
                section = memory[names_offset + sh_name : end].decode("ascii", "replace")
                named.append((section, sh_offset, sh_size))
        present = {section for section, _offset, _size in named}
        if present & set(GO_MARKS):  # a Go binary: what its function table needs
            go: tuple[str, ...] = gopclntab.TABLE_SECTIONS + gopclntab.MODULEDATA_SECTIONS
            if not present & set(gopclntab.TABLE_SECTIONS):
                go += gopclntab.SCAN_SECTIONS  # found by its header
            go += tuple(section for section, _offset, sh_size in named
                        if section in gopclntab.INLINE_SECTIONS
                        and sh_size <= gopclntab.MAX_INLINE_SECTION)
            wanted_names |= {section.encode() for section in go}
        for section, sh_offset, sh_size in named:
            if section.encode() in wanted_names:
                fill(sh_offset, sh_size)
    return ElfFile(memory, name)
