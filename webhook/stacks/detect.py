"""A profile in any of the formats people have, its format told from its content (not from the
file name): folded stacks, speedscope JSON or pprof (stacks.folded, stacks.speedscope,
stacks.pprof read them), each possibly gzip-compressed.

Every input is hostile: numbers are checked, sizes (MAX_INPUT, after decompression), stack depth
(MAX_DEPTH) and the frames of all distinct stacks together (MAX_FRAMES) capped (the last two by
webhook.stacks.Tally, which every decoder reads into), and anything that is not one of the
formats ends in InputError with one line that names the format it was read as and what is wrong.
"""

from __future__ import annotations

import json
import re
import zlib

from webhook.stacks import InputError, Loaded, folded, pprof, speedscope

MAX_INPUT = 256 << 20  # bytes after decompression
_BINARY = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # no text has these; pprof always does
_BLANKS = re.compile(rb"[ \t\r\n]*")
_SNIFF = 64 << 10  # bytes looked at to tell text from binary


def load(data: bytes) -> Loaded:
    """Tell the format from the content and read it."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data)
    if len(data) > MAX_INPUT:
        raise InputError(f"larger than {MAX_INPUT >> 20} MiB")
    json_error = ""
    start = blanks.end() if (blanks := _BLANKS.match(data)) else 0
    if data[start:start + 1] in (b"{", b"["):  # JSON, or folded frames like [unknown], {closure}
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as error:
            json_error = str(error)[:120]
        else:
            return speedscope.decode(document)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its BOM (a Windows redirect)
        return folded.decode_text(_utf16(data), [])
    if _BINARY.search(data[:_SNIFF]):
        try:
            return pprof.decode(data)
        except InputError as error:
            pprof_error = error
        try:  # a folded file whose frame names hold control characters
            return folded.decode(data)
        except InputError:
            raise pprof_error from None
    try:
        return folded.decode(data)
    except InputError as error:
        if json_error:
            raise InputError(f"neither speedscope JSON ({json_error}) nor {error}") from None
        raise


def _gunzip(data: bytes) -> bytes:
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, MAX_INPUT + 1)
    except zlib.error as error:
        raise InputError(f"gzip: the data is corrupt: {error}") from None
    if len(out) > MAX_INPUT or inflate.unconsumed_tail:
        raise InputError(f"gzip: larger than {MAX_INPUT >> 20} MiB once decompressed")
    if not inflate.eof:
        raise InputError("gzip: the data is truncated")
    return out


def _utf16(data: bytes) -> str:
    try:
        return data.decode("utf-16")
    except UnicodeDecodeError as error:
        raise InputError(f"folded stacks: UTF-16 text that does not decode: {error}") from None
