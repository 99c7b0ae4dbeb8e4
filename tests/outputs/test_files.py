"""planner.files.write_atomic: the umask's permissions, all or nothing, one clear error."""

from __future__ import annotations

import os
import stat

import pytest

from planner.errors import PlanError
from planner.files import current_umask, write_atomic


@pytest.fixture
def umask():
    """Set a umask for one test and put the old one back."""
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600),
                                                (0o027, 0o640)])
def test_a_new_file_gets_what_the_umask_gives(tmp_path, umask, mask, expected):
    umask(mask)
    assert current_umask() == mask
    path = write_atomic(tmp_path / "profile.toml", "name = 'x'\n")
    assert mode(path) == expected  # 0666 & ~umask: 0644 under 022
    assert path.read_text() == "name = 'x'\n"


def test_bytes_replace_a_file_keeping_its_mode_and_leave_no_temporary(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "chart.png"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    write_atomic(path, b"\x89PNG new")
    assert path.read_bytes() == b"\x89PNG new" and mode(path) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"]


def test_failures_are_one_clear_error_and_leave_nothing(tmp_path):
    with pytest.raises(PlanError, match=r"cannot write .*missing/x.toml: No such file"):
        write_atomic(tmp_path / "missing" / "x.toml", "x")
    (tmp_path / "folder").mkdir()
    with pytest.raises(PlanError, match=r"cannot write .*folder: is a folder"):
        write_atomic(tmp_path / "folder", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["folder"]
