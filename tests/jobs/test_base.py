"""Tests of the outputs' mechanism in swdask.jobs.base: the checks before the work, the
renames that do not replace what appeared meanwhile (renameat2, and the fallback where it is
missing), the swap of a folder, signals that wait for a rename, the reclaiming of a killed
run's temporaries, and the umask."""
from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys

import pytest

from swdask.errors import InputNotFoundError, OutputError, OutputExistsError
from swdask.jobs import base
from swdask.jobs.base import (
    FILE,
    OutputKind,
    atomic_dir,
    atomic_path,
    atomic_paths,
    check_output,
    reclaim,
    temporary_folder,
)

#: A folder kind for the tests: a folder holding a file named "MARK".
MARKED = OutputKind("marked folder", folder=True, recognise=lambda p: (p / "MARK").is_file())
TEMPORARY = re.compile(r"\.(.+)\.([0-9a-f]{8})-([0-9]+)\.[0-9a-f]{8}\.tmp")


@pytest.fixture(params=["renameat2", "fallback"])
def renames(request, monkeypatch):
    """Every rename test twice: with Linux's renameat2, and with the fallback of systems and
    file systems that lack it (hard link for a file, rename for a folder, two renames for a
    swap)."""
    if request.param == "fallback":
        monkeypatch.setattr(base, "_renameat2", lambda: None)
    elif base._renameat2() is None:
        pytest.fail("renameat2 is missing here (glibc 2.28+ on Linux has it)")
    return request.param


def entries(folder) -> list[str]:
    return sorted(os.listdir(folder))


def dead_pid() -> int:
    """The PID of a process that has ended (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def host_mark(tmp_path) -> str:
    """This host's mark in temporary names, read from a temporary that atomic_path made."""
    with atomic_path(tmp_path / "x") as tmp:
        match = TEMPORARY.fullmatch(tmp.name)
    assert match and match[1] == "x" and int(match[3]) == os.getpid(), tmp.name
    return match[2]


# -- checks before the work ---------------------------------------------------------------


def test_check_output_refuses_inputs_by_any_name(tmp_path):
    query = tmp_path / "q.fasta"
    query.write_text(">q\nMKV\n")
    store = tmp_path / "db.store"
    store.mkdir()
    (store / "part-0.parquet").write_bytes(b"x")
    (tmp_path / "link.fasta").symlink_to(query)
    os.link(query, tmp_path / "hard.fasta")
    sub = tmp_path / "sub"
    sub.mkdir()
    cases = [
        (query, query, "is"), (tmp_path / "link.fasta", query, "is"),
        (tmp_path / "hard.fasta", query, "is"), (sub / ".." / "q.fasta", query, "is"),
        (store, store, "is"), (store / "hits.tsv", store, "is inside"),
        (store / "part-0.parquet", store, "is inside"),
    ]
    for out, given, how in cases:
        with pytest.raises(OutputError) as exc:
            check_output(out, force=True, inputs=["MKVLA", "all", None, given])
        assert str(exc.value) == (f"{out}: {how} the input {given}; an output never replaces "
                                  "an input, even with --force")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:  # relative against absolute
        with pytest.raises(OutputError, match="is the input"):
            check_output("q.fasta", force=True, inputs=[query])
    finally:
        os.chdir(old)
    assert query.read_text() == ">q\nMKV\n"
    assert check_output(tmp_path / "new.tsv", inputs=[query, store]) == tmp_path / "new.tsv"


def test_check_output_two_outputs_one_file(tmp_path):
    out = tmp_path / "a.parquet"
    with pytest.raises(OutputError) as exc:
        check_output(out, outputs=[None, tmp_path / "sub" / ".." / "a.parquet"])
    assert str(exc.value) == f"{out}: given for two outputs; give each its own name"


def test_check_output_what_exists(tmp_path):
    out = tmp_path / "out"
    out.write_text("old")
    assert str(pytest.raises(OutputExistsError, check_output, out).value) == \
        f"{out}: already exists (use --force to overwrite)"
    assert check_output(out, force=True) == out
    folder = tmp_path / "folder"
    folder.mkdir()
    assert str(pytest.raises(OutputExistsError, check_output, folder, force=True).value) == \
        f"{folder}: is a directory; give a file name"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert str(pytest.raises(OutputExistsError, check_output, fifo, force=True).value) == \
        f"{fifo}: is not a regular file; give a file name"
    # A folder kind: only its own kind, or an empty folder, is replaced.
    (folder / "keep.txt").write_text("precious")
    for thing in (folder, out):
        assert str(pytest.raises(OutputExistsError, check_output, thing, force=True,
                                 kind=MARKED).value) == \
            f"{thing}: exists and is not a marked folder; refusing to overwrite it even with --force"
    (folder / "MARK").write_text("")
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert check_output(folder, force=True, kind=MARKED) == folder
    assert check_output(empty, force=True, kind=MARKED) == empty
    with pytest.raises(OutputExistsError, match="is not a marked folder"):
        check_output(link, force=True, kind=MARKED)
    assert (folder / "keep.txt").read_text() == "precious"


def test_check_output_folder_problems(tmp_path, unwritable_folder):
    with pytest.raises(InputNotFoundError) as exc:
        check_output(tmp_path / "missing" / "out.tsv")
    assert str(exc.value) == f"{tmp_path / 'missing' / 'out.tsv'}: folder {tmp_path / 'missing'} " \
        "does not exist"
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError) as exc:
        check_output(tmp_path / "file" / "out.tsv")
    assert str(exc.value) == f"{tmp_path / 'file' / 'out.tsv'}: {tmp_path / 'file'} is not a folder"
    out = unwritable_folder / "out.tsv"
    with pytest.raises(OutputError) as exc:
        check_output(out)
    assert re.fullmatch(rf"{re.escape(str(out))}: cannot write in folder "
                        rf"{re.escape(str(unwritable_folder))}: [A-Z].*", str(exc.value))
    assert check_output(tmp_path / "fine.tsv") and "fine.tsv" not in entries(tmp_path)


# -- renames that do not replace ----------------------------------------------------------


def test_atomic_path_two_writers_one_wins(tmp_path, renames):
    out = tmp_path / "out.tsv"
    first, second = atomic_path(out), atomic_path(out)
    a, b = first.__enter__(), second.__enter__()
    a.write_text("first\n")
    b.write_text("second\n")
    first.__exit__(None, None, None)
    with pytest.raises(OutputExistsError) as exc:
        second.__exit__(None, None, None)
    assert str(exc.value) == (f"{out}: already exists (another run wrote it meanwhile) (use "
                              "--force to overwrite)")
    assert out.read_text() == "first\n" and entries(tmp_path) == ["out.tsv"]
    # With force the later one replaces it, whole.
    with atomic_path(out, force=True) as tmp:
        tmp.write_text("third\n")
    assert out.read_text() == "third\n" and entries(tmp_path) == ["out.tsv"]


def test_atomic_path_never_replaces_a_folder_that_appeared(tmp_path, renames):
    out = tmp_path / "out.tsv"
    with pytest.raises(OutputExistsError, match="is a directory"), \
            atomic_path(out, force=True) as tmp:
        tmp.write_text("new\n")
        out.mkdir()
        (out / "keep").write_text("precious")
    assert (out / "keep").read_text() == "precious" and entries(tmp_path) == ["out.tsv"]


def test_atomic_paths_puts_all_in_place_or_none(tmp_path, renames):
    a, b = tmp_path / "a.parquet", tmp_path / "a.sam"
    b.write_text("old sam\n")
    with pytest.raises(OutputExistsError, match="a.sam: already exists"):
        with atomic_paths([a, b]) as temporaries:
            pass
    with pytest.raises(RuntimeError), atomic_paths([a, b], force=True) as temporaries:
        temporaries[0].write_text("new parquet")
        raise RuntimeError("the second failed")
    assert entries(tmp_path) == ["a.sam"] and b.read_text() == "old sam\n"
    with atomic_paths([a, b], force=True) as temporaries:
        temporaries[0].write_text("new parquet")
        temporaries[1].write_text("new sam\n")
    assert (a.read_text(), b.read_text()) == ("new parquet", "new sam\n")
    assert entries(tmp_path) == ["a.parquet", "a.sam"]


def test_atomic_dir_two_writers_one_wins(tmp_path, renames):
    out = tmp_path / "out.store"
    first = atomic_dir(out, kind=MARKED)
    second = atomic_dir(out, kind=MARKED)
    a, b = first.__enter__(), second.__enter__()
    (a / "MARK").write_text("first")
    (b / "MARK").write_text("second")
    first.__exit__(None, None, None)
    with pytest.raises(OutputExistsError, match="another run wrote it meanwhile"):
        second.__exit__(None, None, None)
    assert (out / "MARK").read_text() == "first" and entries(tmp_path) == ["out.store"]


def test_atomic_dir_force_swaps_only_its_kind(tmp_path, renames):
    out = tmp_path / "out.store"
    out.mkdir()
    (out / "MARK").write_text("old")
    (out / "data").write_text("old data")
    with atomic_dir(out, force=True, kind=MARKED) as tmp:
        (tmp / "MARK").write_text("new")
        assert (out / "data").read_text() == "old data"  # the old one stays until the end
    assert entries(out) == ["MARK"] and (out / "MARK").read_text() == "new"
    assert entries(tmp_path) == ["out.store"]
    # Something else took the name meanwhile: not replaced, even with force.
    with pytest.raises(OutputExistsError, match="is not a marked folder"), \
            atomic_dir(out, force=True, kind=MARKED) as tmp:
        (tmp / "MARK").write_text("newer")
        (out / "MARK").unlink()
        (out / "keep").write_text("precious")
    assert entries(out) == ["keep"] and entries(tmp_path) == ["out.store"]


def test_atomic_dir_failure_keeps_the_old_one(tmp_path, renames):
    out = tmp_path / "out.store"
    out.mkdir()
    (out / "MARK").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_dir(out, force=True, kind=MARKED) as tmp:
        (tmp / "MARK").write_text("half")
        raise KeyboardInterrupt
    assert entries(out) == ["MARK"] and (out / "MARK").read_text() == "old"
    assert entries(tmp_path) == ["out.store"]


# -- signals wait for a rename --------------------------------------------------------------


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_rename_waits_for_it(tmp_path, monkeypatch, number):
    """The signal arrives in the middle of putting the file in place: the rename completes,
    then the signal acts, with a note saying what was written."""
    def terminated(signum, frame):
        raise KeyboardInterrupt("terminated")

    previous = signal.signal(signal.SIGTERM, terminated)
    real = os.replace
    calls = []

    def replace_with_a_signal(source, target):
        calls.append(target)
        signal.raise_signal(number)  # the handler waits: nothing is raised here
        real(source, target)

    out = tmp_path / "out.tsv"
    out.write_text("old\n")
    monkeypatch.setattr(os, "replace", replace_with_a_signal)
    try:
        with pytest.raises(KeyboardInterrupt) as exc, atomic_path(out, force=True) as tmp:
            tmp.write_text("new\n")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert calls == [out]
    assert exc.value.__notes__ == [f"wrote {out} in full"]
    assert out.read_text() == "new\n" and entries(tmp_path) == ["out.tsv"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# -- temporaries of killed runs -----------------------------------------------------------


def test_reclaim_removes_only_stale_temporaries_of_ours(tmp_path):
    mark = host_mark(tmp_path)  # (sweeps tmp_path: the test's folder is another one)
    folder = tmp_path / "out"
    folder.mkdir()
    dead, alive = dead_pid(), os.getppid()
    stale_file = f".hits.tsv.{mark}-{dead}.0123abcd.tmp"
    stale_dir = f".db.store.{mark}-{dead}.4567cdef.tmp"
    kept = [f".hits.tsv.{mark}-{alive}.0123abcd.tmp",  # a running process's
            f".hits.tsv.{'0' * 8 if mark != '0' * 8 else '1' * 8}-{dead}.0123abcd.tmp",  # host
            ".hits.tsv.1234.tmp", "hits.tsv", f".hits.tsv.{mark}-{dead}.0123abcd.old"]
    (folder / stale_file).write_text("partial")
    (folder / stale_dir).mkdir()
    (folder / stale_dir / "part-00000.parquet").write_text("partial")
    for name in kept:
        (folder / name).write_text("keep")
    assert sorted(reclaim(folder)) == sorted([stale_file, stale_dir])
    assert entries(folder) == sorted(kept)
    # Once a minute per folder: a writer of many files does not sweep at every file.
    (folder / stale_file).write_text("partial")
    assert reclaim(folder) == [] and stale_file in entries(folder)


def test_the_next_writer_reclaims(tmp_path):
    mark = host_mark(tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    stale = folder / f".old.parquet.{mark}-{dead_pid()}.89abcdef.tmp"
    stale.write_text("partial")
    with atomic_path(folder / "new.parquet") as tmp:
        tmp.write_text("x")
    assert entries(folder) == ["new.parquet"]


def test_temporary_folder_is_private_and_reclaimable(tmp_path):
    made = temporary_folder(tmp_path / "swdask-db")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    match = TEMPORARY.fullmatch(made.name)
    assert match and match[1] == "swdask-db" and int(match[3]) == os.getpid()


# -- permissions ----------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002, 0o077])
def test_outputs_have_the_umask_permissions(tmp_path, umask):
    previous = os.umask(umask)
    try:
        with atomic_path(tmp_path / "file.tsv") as tmp:
            tmp.write_text("x")
        with atomic_dir(tmp_path / "folder", kind=MARKED) as tmp:
            (tmp / "MARK").write_text("")
        (tmp_path / "old").mkdir()
        with atomic_dir(tmp_path / "old", force=True, kind=MARKED) as tmp:
            (tmp / "MARK").write_text("")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "file.tsv").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((tmp_path / "old").stat().st_mode) == 0o777 & ~umask
    assert FILE.folder is False
