"""The package as a user installs it: a wheel built from the source, installed into a fresh
virtual environment, running the demo from there; its requirements take a newer dask.

Offline, as CI runs: the wheel is built without build isolation (``setuptools`` comes with
the ``[test]`` extra) and installed without its dependencies, which the new environment
sees from this one (a ``.pth`` file naming this environment's site-packages folders, after
its own, so the installed wheel is what ``import swdask`` finds there).
"""
from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.helpers import ROOT

#: What the wheel is built from (``pyproject.toml`` names every other path).
SOURCE = ("pyproject.toml", "README.md", "LICENSE", "swdask", "kernels", "parquet_schemas")


def _run(*argv, **options):
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600,
                          check=False, **options)
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """``python -m pip wheel .`` of a copy of the source (the build writes beside it)."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    done = _run(sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--no-build-isolation",
                "--no-index", "-w", folder / "dist")
    assert "Warning" not in done.stderr and "warning" not in done.stderr, done.stderr
    (path,) = (folder / "dist").glob("swdask-*.whl")
    return path


@pytest.mark.slow
def test_wheel_holds_the_package_its_data_and_license(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    for data in ("demo_queries.fasta", "demo_db.fasta.gz", "blast_gapped_params.tsv"):
        assert f"swdask/data/{data}" in names
    assert "swdask/kernels/cuda/shipped/sm_90.zip" in names  # compiled CUDA kernels for Hopper
    for module in ("swdask/kernels/cpu/score.py", "swdask/parquet_schemas/__init__.py",
                   "swdask/cli/__main__.py", "swdask/__main__.py"):
        assert module in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    lines = metadata.decode().splitlines()
    assert "License-Expression: Apache-2.0" in lines
    requires = [Requirement(line.partition(": ")[2]) for line in lines
                if line.startswith("Requires-Dist: ") and "extra ==" not in line]
    # Ranges, not pins: an environment with a newer dask keeps it.
    for name in ("dask", "distributed"):
        (requirement,) = [r for r in requires if r.name == name]
        for newer in ("2026.8.0", "2026.12.1"):
            assert requirement.specifier.contains(newer), (requirement, newer)
        assert requirement.specifier.contains(version(name))  # what the tests run with


@pytest.mark.slow
def test_a_fresh_virtual_environment_runs_the_demo(wheel, tmp_path):
    """The installed command, from the installed files, with an empty Numba cache: the
    first-run compile cost the README states."""
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    purelib = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
                   .stdout.strip())
    here = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")])
            if Path(p).is_dir()]
    (purelib / "_this_environment.pth").write_text("".join(f"{p}\n" for p in here))
    dask_before = version("dask")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         wheel)
    found = _run(python, "-c", "import dask, swdask; print(swdask.__file__, dask.__version__)",
                 cwd=tmp_path).stdout.split()
    assert Path(found[0]).is_relative_to(purelib) and found[1] == dask_before
    done = _run(venv / "bin" / "swdask", "demo", "--hits", "1", cwd=tmp_path,
                env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
                     "SWDASK_CACHE_DIR": str(tmp_path / "cache")})
    assert done.stdout.startswith(f"swdask {version('swdask')} demo:")
    assert " cells: score pass " in done.stdout
    assert version("dask") == dask_before
