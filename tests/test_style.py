"""The tree passes ``ruff check`` (rules in ``pyproject.toml``, ``[tool.ruff]``).

Part of the CI lane so that ``python -m pytest`` (the README's test command) checks style too;
ruff is pinned in the ``test`` extra so that a new release's rules do not fail old commits.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
