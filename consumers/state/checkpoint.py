"""Atomic, checksummed checkpoint files that survive crashes at any instant.

A checkpoint is an opaque payload (the bytes of ``learning.dump_state``) framed as::

    MAGIC (8 bytes) | sequence (u64 BE) | payload length (u64 BE) | SHA-256 of payload | payload

and written as ``checkpoint-<sequence>.ckpt`` in one directory:

1. the frame goes to a hidden temporary file, which is flushed and fsynced;
2. the temporary file is renamed to its final name (atomic on POSIX) and the directory is fsynced;
3. only then are older checkpoints beyond the newest ``keep`` removed.

A crash before step 2 leaves a temporary file, which the next start removes (and says so); a crash
after it leaves a complete new checkpoint. On load, every file is verified (magic, sequence, length,
checksum) newest first; a torn or altered file is logged, moved aside as ``*.corrupt`` for
inspection, and the previous good one is used. Loading nothing is logged loudly, never silent.

Only names this store generates inside its own directory are ever read or written: a path outside
the directory, a symbolic link, or a foreign name is refused. Payloads are bytes, never pickles.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MAGIC = b"NVKCKPT1"
HEADER = struct.Struct(">8sQQ32s")
FILE_PATTERN = re.compile(r"^checkpoint-(\d{12})\.ckpt$")
TEMP_PATTERN = re.compile(r"^\.checkpoint-(\d{12})\.ckpt\.tmp$")
CORRUPT_SUFFIX = ".corrupt"
DEFAULT_KEEP = 2
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


class CheckpointError(Exception):
    """A checkpoint file is unusable (torn, truncated, altered) or a path is refused."""


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """Where a checkpoint was written."""

    path: Path
    sequence: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SkippedCheckpoint:
    """A checkpoint file that failed verification, and why."""

    path: Path
    reason: str


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    """A verified checkpoint payload and the newer files that had to be skipped to reach it."""

    payload: bytes
    path: Path
    sequence: int
    skipped: tuple[SkippedCheckpoint, ...]


def _file_name(sequence: int) -> str:
    return f"checkpoint-{sequence:012d}.ckpt"


def _temp_name(sequence: int) -> str:
    return f".checkpoint-{sequence:012d}.ckpt.tmp"


def frame(payload: bytes, sequence: int) -> bytes:
    """The on-disk bytes of a checkpoint: header, then payload."""
    digest = hashlib.sha256(payload).digest()
    return HEADER.pack(MAGIC, sequence, len(payload), digest) + payload


def unframe(data: bytes, expected_sequence: int | None = None) -> bytes:
    """The payload of a framed checkpoint, after checking every field of the header.

    Raises
    ------
    CheckpointError
        When the data is shorter than a header, the magic or sequence is wrong, the length does
        not match (a torn or truncated write), or the checksum differs (an altered byte).
    """
    if len(data) < HEADER.size:
        raise CheckpointError(
            f"truncated: {len(data)} bytes, shorter than the {HEADER.size}-byte header"
        )
    magic, sequence, length, digest = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CheckpointError(f"not a novikoff checkpoint (magic {magic!r})")
    if expected_sequence is not None and sequence != expected_sequence:
        raise CheckpointError(
            f"header says sequence {sequence}, file name says {expected_sequence}"
        )
    payload = data[HEADER.size :]
    if len(payload) != length:
        raise CheckpointError(
            f"truncated or torn: header says {length} payload bytes, file has {len(payload)}"
        )
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError("checksum mismatch: the file was altered or damaged on disk")
    return payload


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """Checkpoints in one directory: atomic saves, verified loads, the previous good one kept.

    Parameters
    ----------
    directory
        Where checkpoints live; created (mode 0700) when missing.
    keep
        How many complete checkpoints to keep, newest first (at least 2, so a damaged newest file
        always leaves a previous good one).

    Examples
    --------
    >>> import tempfile
    >>> store = CheckpointStore(tempfile.mkdtemp())
    >>> store.load_latest() is None
    True
    >>> info = store.save(b"model bytes")
    >>> store.load_latest()
    b'model bytes'
    """

    def __init__(self, directory: Path | str, keep: int = DEFAULT_KEEP) -> None:
        if keep < DEFAULT_KEEP:
            raise ValueError(
                f"keep must be at least {DEFAULT_KEEP} so a previous checkpoint survives"
            )
        self._directory = Path(directory).resolve()
        self._keep = keep
        self._prepared = False

    @property
    def directory(self) -> Path:
        """The resolved checkpoint directory."""
        return self._directory

    # -- writing --------------------------------------------------------------------------------

    def save(self, payload: bytes) -> CheckpointInfo:
        """Write ``payload`` as the newest checkpoint, atomically and durably.

        When this returns, the checkpoint is on disk (data and directory entry fsynced). A failure
        leaves the previous checkpoints untouched and raises ``OSError``.
        """
        self._prepare()
        sequence = self._next_sequence()
        final = self._directory / _file_name(sequence)
        temp = self._directory / _temp_name(sequence)
        data = frame(payload, sequence)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_directory(self._directory)
        self._prune()
        logger.debug("checkpoint %s written (%d bytes)", final.name, len(data))
        return CheckpointInfo(path=final, sequence=sequence, size_bytes=len(data))

    # -- reading --------------------------------------------------------------------------------

    def load_latest(self) -> bytes | None:
        """The payload of the newest checkpoint that verifies, or ``None`` when there is none.

        Damaged newer files are logged and moved aside; having no checkpoint at all is logged as a
        warning (the caller then starts from an empty model).
        """
        for loaded in self.load_valid():
            return loaded.payload
        return None

    def load_valid(self) -> Iterator[LoadedCheckpoint]:
        """Verified checkpoints, newest first.

        A caller that finds a verified payload unusable (e.g. ``learning.load_state`` refuses its
        version) takes the next one. Each damaged file is logged at ERROR with the reason and
        renamed to ``*.corrupt``. When no file verifies, a WARNING says that there is no
        checkpoint to resume from.
        """
        self._prepare()
        skipped: list[SkippedCheckpoint] = []
        for sequence, path in self._checkpoint_files():
            try:
                payload = self._read_verified(path, sequence)
            except CheckpointError as exc:
                skipped.append(SkippedCheckpoint(path=path, reason=str(exc)))
                self.quarantine(path, str(exc))
                continue
            except OSError as exc:
                skipped.append(SkippedCheckpoint(path=path, reason=str(exc)))
                logger.error(
                    "cannot read checkpoint %s (%s); trying the previous one", path.name, exc
                )
                continue
            if skipped:
                logger.warning(
                    "using checkpoint %s after skipping %d damaged newer file(s)",
                    path.name,
                    len(skipped),
                )
            else:
                logger.info("using checkpoint %s", path.name)
            yield LoadedCheckpoint(
                payload=payload, path=path, sequence=sequence, skipped=tuple(skipped)
            )
        logger.warning(
            "NO usable checkpoint in %s%s: starting from an empty model",
            self._directory,
            f" ({len(skipped)} damaged file(s) moved aside)" if skipped else "",
        )

    def read(self, path: Path | str) -> bytes:
        """The verified payload of one checkpoint file named by path.

        Raises
        ------
        CheckpointError
            When the path is outside the checkpoint directory, a symbolic link, not a name this
            store writes, or when the file fails verification.
        """
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self._directory / candidate
        if candidate.is_symlink():
            raise CheckpointError(f"refusing {path}: checkpoint files are never symbolic links")
        resolved = candidate.resolve()
        if resolved.parent != self._directory:
            raise CheckpointError(
                f"refusing {path}: outside the checkpoint directory {self._directory}"
            )
        match = FILE_PATTERN.match(resolved.name)
        if match is None:
            raise CheckpointError(
                f"refusing {path}: not a checkpoint file name (checkpoint-N.ckpt)"
            )
        return self._read_verified(resolved, int(match.group(1)))

    def files(self) -> list[Path]:
        """Checkpoint files currently in the directory, newest first (not verified)."""
        self._prepare()
        return [path for _, path in self._checkpoint_files()]

    # -- internals ------------------------------------------------------------------------------

    def _prepare(self) -> None:
        if self._prepared:
            return
        self._directory.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
        for entry in self._directory.iterdir():
            if TEMP_PATTERN.match(entry.name):
                logger.warning(
                    "removing incomplete checkpoint %s left by a crash during a write", entry.name
                )
                entry.unlink(missing_ok=True)
        self._prepared = True

    def _checkpoint_files(self) -> list[tuple[int, Path]]:
        found: list[tuple[int, Path]] = []
        for entry in self._directory.iterdir():
            match = FILE_PATTERN.match(entry.name)
            if match is not None:
                found.append((int(match.group(1)), entry))
        found.sort(reverse=True)
        return found

    def _next_sequence(self) -> int:
        highest = 0
        for entry in self._directory.iterdir():
            name = entry.name.removesuffix(CORRUPT_SUFFIX)
            match = FILE_PATTERN.match(name)
            if match is not None:
                highest = max(highest, int(match.group(1)))
        return highest + 1

    def _read_verified(self, path: Path, sequence: int) -> bytes:
        if path.is_symlink():
            raise CheckpointError("is a symbolic link")
        with path.open("rb") as handle:
            data = handle.read()
        return unframe(data, expected_sequence=sequence)

    def quarantine(self, path: Path, reason: str) -> None:
        """Move a checkpoint file aside as ``*.corrupt`` (kept, never pruned) with an ERROR.

        For files that fail verification here, and for verified files whose content the caller
        refuses (``learning.load_state`` raising), so a refused file is never tried again.
        """
        target = path.with_name(path.name + CORRUPT_SUFFIX)
        logger.error(
            "checkpoint %s is damaged (%s); moved aside as %s, trying the previous one",
            path.name,
            reason,
            target.name,
        )
        try:
            os.replace(path, target)
            _fsync_directory(self._directory)
        except OSError as exc:
            logger.error("could not move damaged checkpoint %s aside: %s", path.name, exc)

    def _prune(self) -> None:
        for _, path in self._checkpoint_files()[self._keep :]:
            try:
                path.unlink()
            except OSError as exc:
                logger.warning("could not remove old checkpoint %s: %s", path.name, exc)
