"""The data files ship inside the installed package: a wheel, unpacked and imported from another
directory, finds every preset and profile."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    try:
        import hatchling  # noqa: F401
    except ImportError:
        pytest.skip("hatchling not installed in this environment")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True, capture_output=True)
    (whl,) = out.glob("plan3d-*.whl")
    return whl


def test_wheel_contains_data_files(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for profile in (ROOT / "hardware_profiles").glob("*.toml"):
        assert f"planner/_data/hardware_profiles/{profile.name}" in names
    for preset in (ROOT / "model_presets").glob("*.toml"):
        assert f"planner/_data/model_presets/{preset.name}" in names
    assert "planner/reference/published_a100.json" in names


def test_installed_package_finds_its_data_from_elsewhere(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import planner.catalog as c; "
            "print(len(c.hardware_presets()), len(c.model_presets()), "
            "c.load_model('70b').name, c.load_hardware('h100-nvlink').name, "
            "c._data_dir('hardware_profiles'))")
    env = {"PYTHONPATH": str(site), "PATH": ""}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, check=True)
    n_hw, n_models, model, hw, where = r.stdout.split()
    assert int(n_hw) == len(list((ROOT / "hardware_profiles").glob("*.toml")))
    assert int(n_models) == len(list((ROOT / "model_presets").glob("*.toml")))
    assert (model, hw) == ("llama-3.1-70b", "h100-nvlink")
    assert str(site) in where  # read from the unpacked package, not the source tree
