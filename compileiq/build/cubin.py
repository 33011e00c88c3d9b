"""Read the machine code of each kernel out of a cubin (a 64-bit little-endian ELF).

CUDA 13.0 ships no disassembler; the code sections are all the tuner needs: their bytes identify
a variant's machine code and, at 16 bytes per instruction on sm_70 and newer, count instructions.
"""

from __future__ import annotations

import struct

from compileiq.core.errors import CompileIQError

_TEXT_PREFIX = ".text."
_HEADER_SIZE = 0x40
_SECTION_HEADER_SIZE = 0x40


class CubinError(CompileIQError):
    """The file is not an ELF cubin this reader understands."""


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """Map each kernel (function) name to the bytes of its `.text.<name>` section."""
    if len(cubin) < _HEADER_SIZE or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF cubin")
    try:
        return _text_sections(cubin)
    except (struct.error, ValueError) as error:
        raise CubinError(f"truncated or corrupt ELF ({error})") from None


def _text_sections(cubin: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shentsize < _SECTION_HEADER_SIZE or shstrndx >= shnum or shoff + shnum * shentsize > len(cubin):
        raise CubinError("truncated or corrupt ELF: bad section header table")
    headers = [_section_header(cubin, shoff + index * shentsize) for index in range(shnum)]
    names_offset = headers[shstrndx][2]
    sections: dict[str, bytes] = {}
    for name_index, kind, offset, size in headers:
        name = _c_string(cubin, names_offset + name_index)
        if name.startswith(_TEXT_PREFIX) and kind == 1:  # SHT_PROGBITS
            if offset + size > len(cubin):
                raise CubinError(f"truncated ELF: section {name} ends past the end of the file")
            sections[name[len(_TEXT_PREFIX):]] = cubin[offset:offset + size]
    return sections


def _section_header(data: bytes, at: int) -> tuple[int, int, int, int]:
    name, kind = struct.unpack_from("<II", data, at)
    offset, size = struct.unpack_from("<QQ", data, at + 0x18)
    return name, kind, offset, size


def _c_string(data: bytes, at: int) -> str:
    end = data.index(b"\0", at)  # ValueError when unterminated
    return data[at:end].decode("ascii", errors="replace")
