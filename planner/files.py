"""Writing the files plan3d makes (`--chart`, `calibrate -o`, `--timeline-out`, emitted launch
settings): all of the content or nothing, with the permissions the user's umask gives a new file.

A temporary file beside the target, then a rename (os.replace is atomic on POSIX within one file
system), so a reader never sees half a file and a failure leaves the old one. tempfile.mkstemp
creates its file 0600 whatever the umask; the file is given 0666 & ~umask before the rename
(0644 under the usual umask 022), or the mode of the file it replaces."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import PlanError


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back: the only portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(target: Path) -> int:
    """The mode a write to `target` leaves: that of the file it replaces, else 0666 & ~umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def write_atomic(path: str | Path, content: str | bytes) -> Path:
    """Write all of `content` (text as UTF-8, or bytes such as a PNG) to `path`, or nothing.
    Returns the path written. Raises PlanError with the reason (a missing folder, a folder in
    the way, no permission) on failure, leaving no temporary file behind."""
    target = Path(path).expanduser()
    data = content.encode("utf-8") if isinstance(content, str) else content
    tmp = None
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "is a folder")
        mode = new_file_mode(target)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                   dir=target.parent if str(target.parent) else ".")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise PlanError(f"cannot write {path}: {reason}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return target
