"""Every code block of README.md runs as written, in order, in one folder that holds small
copies of the files the README names (as a reader who follows it has them).

``python`` blocks run as scripts (a comment after a ``print(...)`` is the line it prints),
``bash`` blocks in ``bash -e -o pipefail``; ``text`` blocks are not code.  A block preceded by
``<!-- readme-test: skip (why) -->`` is not run here: an install, the test suite itself, a
command that needs a running cluster.  Anything else, or a block without a language, fails.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import QUERIES, ROOT, RRNA, SPROT_DB

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
SKIP = re.compile(r"<!-- readme-test: skip \((.+)\) -->\n$")
PRINTS = re.compile(r"^\s*print\(.*\)\s+# (.+)$")


def readme_blocks(text: str) -> list[tuple[str, str, str | None]]:
    """``(language, code, why skipped or None)`` of every fenced block, in order."""
    return [(m.group(1), m.group(2), (SKIP.search(text[:m.start()]) or [None, None])[1])
            for m in FENCE.finditer(text)]


def _folder(tmp_path: Path) -> Path:
    """The files the README's examples name, small: 400 Swiss-Prot records, 12 queries,
    200 16S genes and 3 reads of them."""
    folder = tmp_path / "reader"
    folder.mkdir()
    shutil.copy(SPROT_DB, folder / "uniprot_sprot.fasta.gz")
    shutil.copy(QUERIES, folder / "queries.fasta")
    shutil.copy(RRNA, folder / "genes.fna.gz")
    with gzip.open(RRNA, "rt") as handle:
        records = handle.read().split(">")[1:4]
    (folder / "reads.fasta").write_text("".join(">" + r for r in records))
    return folder


def test_readme_blocks_are_known_and_few_are_skipped():
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert {language for language, _, _ in blocks} <= {"python", "bash", "text"}, blocks
    skipped = [why for _, _, why in blocks if why]
    assert len(skipped) <= 3, skipped
    assert sum(1 for language, _, why in blocks if language != "text" and not why) >= 4


@pytest.mark.slow
def test_every_readme_block_runs(tmp_path):
    folder = _folder(tmp_path)
    bin_dir = str(Path(sys.executable).parent)  # swdask and python of this environment
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    for k, (language, code, why) in enumerate(readme_blocks((ROOT / "README.md").read_text())):
        if why or language == "text":
            continue
        if language == "python":
            script = folder / f"readme_block_{k}.py"
            script.write_text(code)
            argv = [sys.executable, script.name]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, f"README block {k}:\n{code}\n{done.stdout}\n{done.stderr}"
        expected = [m.group(1) for m in map(PRINTS.match, code.splitlines()) if m]
        if language == "python" and expected:
            assert done.stdout.splitlines() == expected, (code, done.stdout)
