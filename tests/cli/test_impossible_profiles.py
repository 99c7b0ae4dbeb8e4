"""A hardware profile whose numbers are physically impossible is refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware
from planner.cli import app
from planner.errors import PlanError

runner = CliRunner()
ROOT = Path(__file__).parents[2]


def profile_file(tmp_path, edit: tuple[str, str]):
    """The shipped h100-nvlink profile with one line replaced."""
    source = (ROOT / "hardware_profiles" / "h100-nvlink.toml").read_text()
    old, new = edit
    assert old in source
    path = tmp_path / "bad.toml"
    path.write_text(source.replace(old, new, 1).replace('name = "h100-nvlink"', 'name = "bad"'))
    return path


@pytest.mark.parametrize(("edit", "reason"), [
    (("hbm_gib = 79.6", "hbm_gib = 79600"), r"hbm_gib = 79,600 GiB per GPU is not a GPU's memory"),
    (("busbw_gb_per_s = 46.0", "busbw_gb_per_s = 460.0"),
     r"busbw_gb_per_s \(460\) is above the link's own rate gb_per_s \(50\)"),
])
def test_impossible_numbers_are_refused_with_the_reason(tmp_path, edit, reason):
    path = profile_file(tmp_path, edit)
    with pytest.raises(PlanError, match=reason):
        load_hardware(str(path))
    r = runner.invoke(app, ["search", "--model", "8b", "--gpus", "8", "--hw", str(path)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
