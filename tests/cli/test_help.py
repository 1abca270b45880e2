"""The help of ``swdask`` and of each subcommand says what the code does: nothing promised
for later, and every choice it offers runs (the GPU ones in the CUDA simulator, as the CI lane
runs every CUDA kernel)."""
from __future__ import annotations

import argparse

import pytest

from swdask import options
from swdask.cli import SUBCOMMANDS, build_parser
from tests.helpers import run_cli

#: The tuples of swdask.options that a subcommand's choices may be.
TABLES = {name: value for name, value in vars(options).items()
          if name.isupper() and isinstance(value, tuple)}
PROTEIN = {"q": ">q1\nMKVLAAGIVGLLLAWHEEGK\n>q2\nWWHEAGAWGHEE\n",
           "db": "".join(f">s{k}\n{seq}\n" for k, seq in enumerate((
               "MKVLAAGIVGLLLAWHEEGK", "MKVLAAGIVGLLLAWHEEGR", "PAWHEAEHEAGAWGHEE",
               "GSHMLEDPVKAFQGRW", "MKTAYIAKQRQISFVKSHFSRQ", "WWHEAGAWGHEEWW")))}
DNA = {"q": ">r1\nACGTTGCAAGGCTTACGATCGATCGGATCC\n>r2\nTTGACCGATAGGCTAGCTAGGCTAACG\n",
       "db": "".join(f">g{k}\n{seq}\n" for k, seq in enumerate((
           "ACGTTGCAAGGCTTACGATCGATCGGATCCAAGT", "TTGACCGATAGGCTAGCTAGGCTAACGTTAG",
           "GGGCCCAAATTTGGGCCCAAATTTACGTACGT", "ACGTTGCAAGGCTTACGTTCGATCGGATCC")))}


def _choices(parser: argparse.ArgumentParser):
    """``(option, choices, default)`` of every option of ``parser`` that offers choices."""
    return [(action.option_strings[0], action.choices, action.default)
            for action in parser._actions if action.choices and action.option_strings]


def _subparsers():
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices


def test_top_level_help_promises_nothing_for_later(capsys):
    status, out, _ = run_cli(capsys, "--help")
    assert status == 0
    for module in SUBCOMMANDS:
        assert module.NAME in out
    for word in ("coming", "future", "not yet", "planned", "soon"):
        assert word not in out.lower(), word


def test_choices_come_from_the_options_table():
    """One table of choices (swdask.options): --help and the checks cannot disagree."""
    for name, parser in _subparsers().items():
        for option, choices, _ in _choices(parser):
            assert any(choices is table for table in TABLES.values()), (name, option, choices)


def test_significance_offers_no_mode(capsys):
    """It scores local alignments only: its help offered --mode global, then refused it."""
    status, out, _ = run_cli(capsys, "significance", "--help")
    assert status == 0 and "--mode" not in out
    status, _, err = run_cli(capsys, "significance", "q", "s", "-o", "x", "--mode", "global")
    assert status == 2 and "unrecognized arguments: --mode global" in err


def _inputs(folder, alphabet):
    data = DNA if alphabet == "dna" else PROTEIN
    paths = {}
    for key, text in data.items():
        paths[key] = folder / f"{alphabet}_{key}.fasta"
        paths[key].write_text(text)
    return paths


def _argv(command, folder, alphabet, out):
    """A small run of ``command`` on ``alphabet`` input (protein for "auto")."""
    paths = _inputs(folder, alphabet)
    q, db = str(paths["q"]), str(paths["db"])
    return {
        "ingest": [db, "-o", out],
        "search": [q, db, "-o", out],
        "align": ["ACGTTGCAAGG", "ACGTAGCAAGG"] if alphabet == "dna"
        else ["HEAGAWGHEE", "PAWHEAE"],
        "allpairs": [db, "-o", out, "--min-score", "1"],
        "significance": [q, db, "-o", out, "--shuffles", "10"],
        "align-long": [q, db, "-o", out],
    }[command]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["ingest", "search", "align", "allpairs", "significance",
                                     "align-long"])
def test_every_choice_offered_runs(command, tmp_path, capsys):
    """Each value of each choice --help offers, the other options at their defaults, runs
    on small inputs and exits 0 (the DNA alphabet on DNA input).  ``warmup`` builds every
    kernel of the device and runs each job on the bundled data (minutes in the simulator):
    its choices are checked above to be ``DEVICES``, which search runs here."""
    parser = _subparsers()[command]
    runs = [()]
    for option, choices, default in _choices(parser):
        runs += [(option, value) for value in choices if value != default]
    for k, extra in enumerate(runs):
        alphabet = "auto"
        if extra and extra[0] == "--alphabet":
            alphabet = extra[1]
        elif extra and extra[0] == "--strand":  # strands are DNA's
            alphabet = "dna"
        out = str(tmp_path / f"out{k}")
        argv = [command, *_argv(command, tmp_path, alphabet, out), *extra]
        if command != "align":
            argv.append("--quiet")
        status, _, err = run_cli(capsys, *argv)
        assert status == 0, (argv, err)
