"""File output and input that never leaves or reads a half-written or corrupt artifact silently.

- :func:`atomic_path`: write to a temporary sibling, rename it into place only if the block succeeds, so a killed
  job or a raised error never leaves a half-written artifact at the final path. It replaces only the final path (a
  regular file or directory: never ``.``, ``..``, a symbolic link, a device, a pipe or a socket), with the umask's
  permissions (not the 0600/0700 of temporary files).
- :func:`write_parquet` / :func:`read_parquet`: Parquet with a ``sha256sum``-style sidecar ``{file}.sha256``;
  reading checks it, so a truncated or altered file is an error naming it.
- :func:`jsonl_records`: the objects of a JSONL file; bad bytes, bad JSON or a non-object line is an error
  naming the file and line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

#: Suffix of the checksum file written beside every Parquet output (``sha256sum -c`` reads it).
CHECKSUM_SUFFIX = ".sha256"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_replaceable(final: str | os.PathLike) -> Path:
    """``final`` as a Path, if it names one entry of its parent directory that may be (re)placed."""
    raw = os.fspath(final)
    last = raw.rstrip("/" + os.sep).rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]
    path = Path(raw)
    if last in ("", ".", "..") or path.name in ("", ".", ".."):
        raise ValueError(
            f"refusing to write {raw!r}: an output must be a named entry of its directory (not '.', '..' or '/')"
        )
    if path.is_symlink():
        raise ValueError(f"refusing to replace {raw!r}: it is a symbolic link (to {os.readlink(path)!r})")
    if path.exists() and not (path.is_file() or path.is_dir()):
        raise ValueError(f"refusing to replace {raw!r}: not a regular file or directory (a device, pipe or socket)")
    return path


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it onto ``final`` only if the block succeeds.

    With ``directory=True`` the temporary path is a fresh directory (for Zarr stores); an existing
    ``final`` directory is replaced. Only ``final`` itself is ever removed: a ``final`` of ``.``/``..`` or
    a symbolic link is refused with a ``ValueError`` before anything is written.
    """
    final = _check_replaceable(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp" + final.suffix, dir=final.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        tmp.chmod((0o777 if directory else 0o666) & ~_umask())
        if directory and final.exists():
            _check_replaceable(final)  # still a plain entry (not swapped for a link meanwhile)
            if final.is_dir():
                shutil.rmtree(final)
            else:
                final.unlink()
        os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------
# Checksummed Parquet


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def checksum_path(path: str | os.PathLike) -> Path:
    """The checksum file of ``path``: ``{path}.sha256``."""
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


class CorruptFileError(ValueError):
    """A file whose bytes do not match its recorded checksum, or that cannot be decoded."""


def _rebuild_hint(path: Path) -> str:
    return f"delete {path} and rerun snakemake to rebuild it"


def write_parquet(frame, path: str | os.PathLike) -> Path:
    """Write a polars DataFrame to ``path`` atomically, then its checksum file ``{path}.sha256``."""
    path = Path(path)
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp)
        digest = sha256_file(tmp)
    with atomic_path(checksum_path(path)) as tmp:
        tmp.write_text(f"{digest}  {path.name}\n")
    return path


def verify_checksum(path: str | os.PathLike) -> None:
    """Raise :class:`CorruptFileError` (or ``FileNotFoundError``) naming ``path`` unless its bytes match
    ``{path}.sha256``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    sidecar = checksum_path(path)
    if not sidecar.is_file():
        raise CorruptFileError(f"{path}: its checksum file {sidecar.name} is missing; {_rebuild_hint(path)}")
    expected = sidecar.read_text().split()[:1]
    actual = sha256_file(path)
    if expected != [actual]:
        raise CorruptFileError(
            f"{path}: sha256 {actual} does not match {sidecar.name} ({expected[0] if expected else 'empty'}): "
            f"the file is truncated or altered; {_rebuild_hint(path)}"
        )


def read_parquet(path: str | os.PathLike, **kwargs):
    """A Parquet file written by :func:`write_parquet`, as a polars DataFrame, after checking its checksum.

    Any failure names the file: a missing or mismatching checksum, or bytes polars cannot decode.
    """
    import polars as pl

    path = Path(path)
    verify_checksum(path)
    try:
        return pl.read_parquet(path, **kwargs)
    except Exception as err:  # polars/arrow decoding errors name no file
        raise CorruptFileError(f"{path}: not readable as Parquet ({err}); {_rebuild_hint(path)}") from err


# --------------------------------------------------------------------------------------------
# JSONL


def jsonl_records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSONL file.

    Raises ``ValueError`` naming the file and line for bytes that are not UTF-8, a line that is not JSON,
    or a line that is not a JSON object; ``FileNotFoundError`` naming a missing file.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a JSONL file")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}:{lineno}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1})"
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record
