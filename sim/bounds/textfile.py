"""Input files as kvscope reads them: at most so many bytes, then UTF-8 text with any BOM dropped.

The byte limit is checked on the size a regular file reports and again on the
bytes actually read, so ``/dev/zero``, a pipe or a file that grows while read
stops at the limit too. Every problem is a ``FileProblem`` whose message is
one line a reader prefixes with the file's name: a folder, a missing file, too
many bytes, UTF-16, a NUL byte or a byte that is not UTF-8 (with its line). A
UTF-8 BOM (Excel writes one) is dropped, as the page drops it from uploads.
"""

from __future__ import annotations

import codecs
import csv
import os
from typing import Any, BinaryIO

MAX_FILE_BYTES = 256 * 2**20  # any one input file: a trace of ~1 M requests, a measurement file of ~2 M rows


class FileProblem(ValueError):
    """A file that cannot be read as input; the message does not repeat the file's name."""


def too_large(max_bytes: int) -> FileProblem:
    return FileProblem(f"larger than the limit of {max_bytes:,} bytes ({max_bytes / 2**20:g} MiB)")


def open_binary(path: str | os.PathLike[str], max_bytes: int = MAX_FILE_BYTES) -> BinaryIO:
    """The file open for reading, refused first if it says it is larger than ``max_bytes``.

    A regular file says its size; a pipe or /dev/zero does not, so whoever
    reads it counts the bytes (``too_large`` past the limit).
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except IsADirectoryError:
        raise FileProblem("is a folder; give a file") from None
    except OSError as exc:
        raise FileProblem(exc.strerror or str(exc)) from None
    try:
        if os.fstat(fh.fileno()).st_size > max_bytes:
            raise too_large(max_bytes)
    except BaseException:
        fh.close()
        raise
    return fh


def read_bytes(path: str | os.PathLike[str], max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; ``FileProblem`` past ``max_bytes`` or when it cannot be read."""
    with open_binary(path, max_bytes) as fh:
        try:
            data = fh.read(max_bytes + 1)  # one read of at most one byte past the limit stops there
        except IsADirectoryError:
            raise FileProblem("is a folder; give a file") from None
        except OSError as exc:
            raise FileProblem(exc.strerror or str(exc)) from None
    if len(data) > max_bytes:
        raise too_large(max_bytes)
    return data


NUL_BYTE = "a NUL byte, so not text; is it a binary file?"
UTF16 = "is UTF-16 text; save it as UTF-8"


def text_bytes(data: bytes) -> bytes:
    """``data`` without a UTF-8 BOM; ``FileProblem`` for UTF-16 and for a NUL byte (a binary or sparse file)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise FileProblem(UTF16)
    if (nul := data.find(b"\0")) >= 0:
        raise FileProblem(f"line {_line_of(data, nul)}: {NUL_BYTE}")
    return data.removeprefix(codecs.BOM_UTF8)


def decode(data: bytes) -> str:
    """UTF-8 text without its BOM; ``FileProblem`` naming UTF-16, or the line of the first byte that is not text."""
    data = text_bytes(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"line {_line_of(data, exc.start)}: not UTF-8 text (byte 0x{data[exc.start]:02x}); is it a binary file?") from None


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def read_text(path: str | os.PathLike[str], max_bytes: int = MAX_FILE_BYTES) -> str:
    return decode(read_bytes(path, max_bytes))


class DictReader(csv.DictReader):
    """``csv.DictReader`` whose ``csv.Error`` (a field over the csv module's size limit, say) is ``error`` naming the line."""

    def __init__(self, f: Any, error: type[ValueError] = FileProblem) -> None:
        super().__init__(f)
        self._error = error

    @property
    def fieldnames(self) -> Any:
        try:
            return super().fieldnames
        except csv.Error as exc:
            raise self._error(f"line {self.line_num + 1}: {exc}") from None  # the line being read

    @fieldnames.setter
    def fieldnames(self, value: Any) -> None:
        self._fieldnames = value

    def __next__(self) -> dict[str | Any, str | Any]:
        try:
            return super().__next__()
        except csv.Error as exc:
            raise self._error(f"line {self.line_num + 1}: {exc}") from None  # the line being read
