"""What a run says while and after it works: progress lines on a standard error that is not a
terminal (every swdask.progress-interval), a bar counting cells (pairs for all-pairs) on a
terminal, in this process and on Dask, --quiet, swdask's log (-v, --log-level) and the JSON
summary (--summary-json), whose figures are the summary line's."""
from __future__ import annotations

import json
import re
import sys

import dask
import pytest
from tqdm import tqdm

from swdask.jobs.base import ProgressLines
from tests.helpers import QUERIES, run_cli

#: What each command's progress says it does, and what it counts.
PROGRESS = {"search": ("search", "cell"), "significance": ("significance", "cell"),
            "allpairs": ("all pairs", "pair"), "align-long": ("align-long", "cell")}


def commands(inputs, out) -> dict:
    """A small run of each job subcommand (its summary on), outputs in the folder ``out``."""
    return {
        "search": ["search", QUERIES, inputs.store, "-o", out / "hits.tsv", "--max-hits", "2",
                   "--device", "cpu"],
        # 2,000 shuffles: with warm kernels 200 ended within the 2 ms interval once in CI.
        "significance": ["significance", inputs.queries, inputs.queries, "-o",
                         out / "p.parquet", "--shuffles", "2000", "--device", "cpu"],
        "allpairs": ["allpairs", inputs.genes_store, "-o", out / "pairs", "--min-identity", "0.8",
                     "--block-size", "6", "--device", "cpu"],
        "align-long": ["align-long", inputs.a, inputs.b, "-o", out / "long.parquet", "--traceback",
                       "--tile", "400", "--device", "cpu"],
    }


def amount(x) -> str:
    """A number as the progress writes it (tqdm's 3 figures and SI prefix from 100,000)."""
    return f"{x:,}" if x < 100_000 else tqdm.format_sizeof(x)


def progress_lines(err: str, command: str) -> list[str]:
    desc, _ = PROGRESS[command]
    return [line for line in err.splitlines() if line.startswith(f"{desc}: ")]


# -- off a terminal: a line every interval ---------------------------------------------------


@pytest.mark.parametrize("command", list(PROGRESS))
def test_lines_off_a_terminal_and_a_summary_of_the_same_figures(inputs, tmp_path, capsys,
                                                                command):
    """Off a terminal (the standard error is a file here) a run prints a line every
    swdask.progress-interval, counting cells (pairs) up to the run's total; its JSON
    summary holds the figures of its summary line; --quiet prints nothing, and still
    writes the JSON summary."""
    desc, unit = PROGRESS[command]
    argv = commands(inputs, tmp_path)[command]
    with dask.config.set({"swdask.progress-interval": "2ms"}):
        status, out, err = run_cli(capsys, *argv, "--summary-json", tmp_path / "run.json")
    assert (status, out) == (0, ""), err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["command"] == command
    lines = progress_lines(err, command)
    # all-pairs counts the pairs the lengths allow: scored, or dropped by the pre-filter
    total = (summary["pairs_scored"] + summary["pairs_filtered"] if command == "allpairs"
             else summary["cells"])
    shape = re.compile(
        rf"{desc}: [\d.,]+[kMGT]? of {re.escape(amount(total))} {unit}s \(\d+%\) in \d\d:\d\d, "
        rf"[\d.,]+[kMGT]? {unit}s/s(, ETA (\?|[\d:]+)|; finishing)")
    assert lines and all(shape.fullmatch(line) for line in lines), lines[:3]
    done = [line for line in lines if "(100%)" in line]
    assert not done or all(line.endswith("; finishing") for line in done)
    others = [line for line in err.splitlines() if line not in lines]
    check_summary_line(command, others, summary)

    (tmp_path / "run.json").unlink()
    with dask.config.set({"swdask.progress-interval": "2ms"}):
        status, out, err = run_cli(capsys, *argv, "--force", "--quiet", "--summary-json",
                                   tmp_path / "run.json")
    assert (status, out, err) == (0, "", "")
    again = json.loads((tmp_path / "run.json").read_text())
    assert {key: again[key] for key in ("cells", "device")} == \
        {key: summary[key] for key in ("cells", "device")}


def figures(pattern: str, line: str) -> dict:
    match = re.fullmatch(pattern, line)
    assert match, line
    return match.groupdict()


def check_summary_line(command: str, lines: list[str], f: dict) -> None:
    """The summary lines of ``command`` say the figures of its JSON summary ``f``."""
    threads = r"(?P<threads>\d+) threads?"
    if command == "search":
        assert lines[0] == f"wrote {f['hits']:,} hits to {f['output']} ({f['format']})"
        got = figures(rf"(?P<queries>\d+) queries x (?P<subjects>[\d,]+) subjects, "
                      rf"(?P<cells>[\d,]+) cells: score pass (?P<score_seconds>[\d.]+) s "
                      rf"\((?P<kernel_gcups>[\d.]+) GCUPS\), traceback "
                      rf"(?P<traceback_seconds>[\d.]+) s, total (?P<seconds>[\d.]+) s "
                      rf"\((?P<gcups>[\d.]+) GCUPS\) on (?P<device>\w+), {threads}(; "
                      rf"(?P<queries_at_max_hits>\d+) quer(y|ies) reached --max-hits "
                      rf"(?P<max_hits>\d+): raise it to see more)?", lines[1])
    elif command == "significance":
        got = figures(rf"wrote (?P<pairs>[\d,]+) pairs to (?P<output>\S+) \((?P<shuffles>\d+) "
                      rf"shuffles each\): (?P<cells>[\d,]+) cells in (?P<seconds>[\d.]+) s "
                      rf"\((?P<gcups>[\d.]+) GCUPS\) on (?P<device>\w+), {threads}", lines[0])
    elif command == "allpairs":
        got = figures(rf"wrote (?P<hits>[\d,]+) pairs to (?P<output>\S+): (?P<sequences>[\d,]+) "
                      rf"sequences, (?P<pairs>[\d,]+) pairs, (?P<pairs_filtered>[\d,]+) dropped "
                      rf"by shared q-grams \((?P<filter_seconds>[\d.]+) s\), "
                      rf"(?P<pairs_scored>[\d,]+) scored "
                      rf"\((?P<cells>[\d,]+) cells, (?P<kernel_gcups>[\d.]+) GCUPS in the "
                      rf"kernel\), (?P<candidates>[\d,]+) traced back "
                      rf"\((?P<traceback_seconds>[\d.]+) s summed over tasks\), "
                      rf"(?P<block_pairs_skipped>[\d,]+) of (?P<block_pairs>[\d,]+) block pairs "
                      rf"skipped by length, [\d.]+ s \((?P<pairs_per_second>[\d,]+) pairs/s\) on "
                      rf"(?P<device>\w+), {threads}", lines[0])
    else:
        # The line is 1-based inclusive (as a person reads it), the JSON 0-based half-open
        # (as the table): the plus strand's starts differ by one, the ends are the same.
        got = figures(r"score (?P<score>\d+) on strand (?P<strand>\+): query "
                      r"(?P<query_first>\d+)\.\.(?P<query_end>\d+), subject "
                      r"(?P<subject_first>\d+)\.\.(?P<subject_end>\d+) \(1-based\), "
                      r"(?P<pident>[\d.]+)% identity, CIGAR of (?P<cigar_length>[\d,]+) "
                      r"characters", lines[0])
        assert (int(got.pop("query_first")), int(got.pop("subject_first"))) == \
            (f["query_start"] + 1, f["subject_start"] + 1)
        got.update(figures(r"(?P<cells>[\d,]+) cells in (?P<score_seconds>[\d.]+) s "
                           r"\((?P<gcups>[\d.]+) GCUPS\) on (?P<device>\w+) \((?P<threads>\d+) CPU "
                           r"threads?\), (?P<tile_rows>\d+) x (?P<tile_cols>\d+) tiles; wrote "
                           r"(?P<output>\S+)", lines[1]))
    assert got
    for key, text in got.items():
        if text is None or key not in f:  # an optional part that is not there
            continue
        value = f[key]
        if isinstance(value, float):  # as printed: the decimals the line shows
            decimals = len(text.split(".")[1]) if "." in text else 0
            expected = f"{value:.{decimals}f}"
        else:
            expected = str(value)
        assert text.replace(",", "") == expected, (key, text, value)


def test_progress_lines_unit(capsys):
    """A line's figures: done, total, share, rate, time left; then finishing, the time and
    rate of when all was done kept."""
    bar = ProgressLines(desc="search", unit="cell", total=4_000_000, interval=3600)
    try:
        assert re.fullmatch(r"search: 0 of 4.00M cells \(0%\) in 00:00, 0 cells/s, ETA \?",
                            bar.line())
        bar.update(1_000_000)
        assert re.fullmatch(r"search: 1.00M of 4.00M cells \(25%\) in 00:00, [\d.]+[kMG] cells/s, "
                            r"ETA 00:00", bar.line())
        bar.update(3_000_000)
        first = bar.line()
        assert re.fullmatch(r"search: 4.00M of 4.00M cells \(100%\) in 00:00, [\d.]+[kMG] "
                            r"cells/s; finishing", first)
        assert bar.line() == first
    finally:
        bar.close()
    unknown = ProgressLines(desc="ingest", unit=" records", interval=3600)
    unknown.update(12)
    unknown.close()
    assert re.fullmatch(r"ingest: 12 records in 00:00, [\d.,]+[kM]? records/s", unknown.line())
    assert capsys.readouterr().err == ""  # an hour's interval: no line yet


def test_a_bad_interval_is_one_line(inputs, tmp_path, capsys):
    with dask.config.set({"swdask.progress-interval": "soon"}):
        status, _, err = run_cli(capsys, *commands(inputs, tmp_path)["search"])
    assert status == 2
    assert err == ("swdask: error: swdask.progress-interval must be a positive duration such as "
                   "'10s', got 'soon'\n")
    assert not (tmp_path / "hits.tsv").exists()


# -- on a terminal: a bar of cells ---------------------------------------------------------


@pytest.mark.parametrize("command,dask_workers", [
    ("search", None), ("search", 1), ("significance", None), ("significance", 1),
    ("allpairs", None), ("align-long", None)])
def test_a_terminal_gets_a_bar_of_cells(inputs, tmp_path, capsys, monkeypatch, command,
                                        dask_workers):
    """On a terminal the bar's total is the run's cells (pairs to score for all-pairs), in
    this process and on Dask, where each kernel task weighs its cells: not a count of
    tasks."""
    _, unit = PROGRESS[command]
    argv = commands(inputs, tmp_path)[command]
    if dask_workers:
        argv += ["--workers", str(dask_workers)]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    status, _, err = run_cli(capsys, *argv, "--summary-json", tmp_path / "run.json")
    assert status == 0, err
    summary = json.loads((tmp_path / "run.json").read_text())
    total = (summary["pairs_scored"] + summary["pairs_filtered"] if command == "allpairs"
             else summary["cells"])
    assert total > 100  # tasks: a few
    assert f"/{tqdm.format_sizeof(total)} [" in err, err[-600:]  # tqdm's "n/total [elapsed"
    assert f"{unit}/s]" in err and "\r" in err  # redrawn in place, with tqdm's rate


# -- the log ---------------------------------------------------------------------------------


def test_verbose_shows_swdask_log_lines(inputs, tmp_path, capsys):
    argv = commands(inputs, tmp_path)["search"] + ["--quiet", "--force"]
    status, _, err = run_cli(capsys, "-v", *argv)
    assert status == 0
    lines = err.splitlines()
    assert lines and all(re.match(r"\d{4}-\d\d-\d\d [\d:,]+ swdask\.[\w.]+ (INFO|DEBUG): ", line)
                         for line in lines), lines
    assert any(" swdask.jobs.search.api INFO: search: 12 queries against 400 subjects" in line
               for line in lines)
    for quiet in ([], ["-v", "--log-level", "warning"], ["--log-level", "ERROR", "-vv"]):
        assert run_cli(capsys, *quiet, *argv) == (0, "", "")
    status, _, err = run_cli(capsys, "-vv", *argv)
    assert status == 0 and " INFO: " in err


def test_an_error_is_one_line_whatever_the_log_level(inputs, tmp_path, capsys):
    missing = tmp_path / "missing.fasta"
    for level in (["--log-level", "CRITICAL"], ["-vv"]):
        status, out, err = run_cli(capsys, *level, "search", missing, inputs.store, "-o",
                                   tmp_path / "h.tsv")
        assert (status, out) == (2, "")
        *logged, last = err.splitlines()
        assert last.startswith("swdask: error: ") and str(missing) in last
        assert not logged or level == ["-vv"] and all(" swdask." in line for line in logged)


def test_log_level_choices(capsys):
    status, _, err = run_cli(capsys, "--log-level", "LOUD", "demo")
    assert status == 2 and "argument --log-level: invalid choice: 'LOUD'" in err


# -- the JSON summary's own rules ---------------------------------------------------------------


def test_summary_json_to_the_standard_output(inputs, tmp_path, capsys):
    argv = commands(inputs, tmp_path)["search"]
    status, out, err = run_cli(capsys, *argv, "--quiet", "--summary-json", "-")
    assert (status, err) == (0, "")
    summary = json.loads(out)
    assert summary["hits"] == 24 and summary["output"] == str(tmp_path / "hits.tsv")
    # Where the hits go to the standard output, the summary cannot: refused before the work.
    status, out, err = run_cli(capsys, *argv[:4], "-", *argv[5:], "--outfmt", "blast6",
                               "--summary-json", "-")
    assert (status, out) == (2, "")
    assert err == ("swdask: error: --summary-json -: the output goes to the standard output; "
                   "give the summary a file name\n")


def test_summary_json_is_an_output(inputs, tmp_path, capsys):
    """Checked before any work, replaced only with --force, never an input or another
    output."""
    argv = commands(inputs, tmp_path)["significance"]
    summary = tmp_path / "run.json"
    summary.write_text("mine")
    status, _, err = run_cli(capsys, *argv, "--summary-json", summary)
    assert status == 2 and err == f"swdask: error: {summary}: already exists (use --force to " \
                                  "overwrite)\n"
    assert not (tmp_path / "p.parquet").exists() and summary.read_text() == "mine"
    status, _, err = run_cli(capsys, *argv, "--summary-json", inputs.queries)
    assert status == 2 and "an output never replaces an input" in err
    status, _, err = run_cli(capsys, *argv, "--summary-json", tmp_path / "p.parquet")
    assert status == 2 and "given for two outputs" in err
    assert run_cli(capsys, *argv, "--quiet", "--force", "--summary-json", summary)[0] == 0
    assert json.loads(summary.read_text())["pairs"] == 4
