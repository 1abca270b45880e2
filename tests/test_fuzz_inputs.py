"""Property-based fuzzing of the inputs (hypothesis): hostile FASTA, matrix files and
stores give either a correct result or one ``swdask.errors`` error, never another
exception, and never a residue code outside the alphabet on its way to a kernel.

Derandomized (the same cases on every run) and small enough for CI: about 40 s on the
2-core machine.  The figures are in docs/reliability.md#inputs.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import swdask
from swdask.errors import SwdaskError
from swdask.scoring import SCORE_RANGE, Scoring
from swdask.sequences.alphabet import DNA, PROTEIN
from swdask.sequences.ingest import ingest
from swdask.sequences.store import METADATA_FILE, SequenceStore, load_sequences, metadata_checksum

FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="swdask-fuzz-"))


def residues_ok(batch) -> bool:
    """What may reach a kernel: codes inside the alphabet, lengths that match them."""
    return (len(batch.residues) == 0 or int(batch.residues.max()) < batch.alphabet.size) and \
        np.array_equal(np.diff(batch.offsets), batch.lengths)


# -- FASTA -------------------------------------------------------------------------------

LETTERS = st.sampled_from(list("ACGTNUacgtnuMKVLWQERYIPSDFHXBZJO*oj-.0 \t\r\x00\x07\x1b\xff"))
SEQUENCE = st.one_of(st.text(LETTERS, max_size=80),
                     st.text(st.sampled_from(list("ACGTacgt")), min_size=2000, max_size=6000),
                     st.text(st.sampled_from(list(PROTEIN.letters)), max_size=300))
HEADER = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
EOL = st.sampled_from(["\n", "\r\n", "\r"])
RECORD = st.tuples(HEADER, SEQUENCE, EOL)
#: Mostly well-formed records, lower case and wrapping included, so that many files ingest.
CLEAN = st.tuples(st.text(st.sampled_from(list("abcXYZ019|_.")), min_size=1, max_size=12),
                  st.one_of(st.text(st.sampled_from(list(PROTEIN.letters + "uojbzx")), min_size=1,
                                    max_size=200),
                            st.text(st.sampled_from(list("ACGTNacgtnRYU \n")), min_size=1,
                                    max_size=300).filter(str.strip)),
                  EOL)


@st.composite
def fasta_bytes(draw) -> bytes:
    if draw(st.integers(0, 9)) == 0:  # raw binary now and then
        return draw(st.binary(max_size=400))
    records = draw(st.lists(st.one_of(CLEAN, CLEAN, CLEAN, RECORD), max_size=6))
    text = "".join(f">{h}{eol}{s}{eol}" for h, s, eol in records)
    if draw(st.booleans()):
        text = draw(st.sampled_from(["", ";", "@", "\ufeff", " "])) + text
    return text.encode("utf-8", "surrogatepass")


@settings(FUZZ, max_examples=300)
@given(data=fasta_bytes(), gz=st.booleans(), alphabet=st.sampled_from(["auto", "protein", "dna"]))
def test_hostile_fasta_ingests_correctly_or_fails_with_one_swdask_error(data, gz, alphabet):
    folder = scratch()
    try:
        path = folder / ("in.fa.gz" if gz else "in.fa")
        if gz:
            import gzip

            path.write_bytes(gzip.compress(data, mtime=0))
        else:
            path.write_bytes(data)
        try:
            store = ingest(path, folder / "s.store", alphabet=alphabet)
        except SwdaskError as exc:
            event(f"refused: {type(exc).__name__}")
            assert not (folder / "s.store").exists()  # nothing partial left
            return
        event("ingested")
        batch = store.read_all()
        assert residues_ok(batch) and len(batch) == store.n_records > 0
        assert batch.take(np.argsort(batch.seq_id)) == load_sequences(folder / "s.store")
        assert batch.take(np.argsort(batch.seq_id)) == load_sequences(path, alphabet=alphabet)
        # Every residue read back is a letter of the input, upper-cased (IUPAC as N in DNA).
        letters = set(data.decode("utf-8", "replace").upper())
        decoded = set(batch.alphabet.decode(batch.residues))
        if batch.alphabet is DNA:
            decoded -= {"N", "T"}  # IUPAC codes read as N, U as T
        assert decoded <= letters
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- matrix files --------------------------------------------------------------------------

VALUE = st.one_of(st.integers(-40000, 40000), st.integers(-10, 12),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr),
                  st.sampled_from(["1e300", "-inf", "nan", "2.5", "x", "", "0x10", "--1"]))


@st.composite
def matrix_text(draw) -> str:
    letters = draw(st.sampled_from(["ARNDCQEGHILKMFPSTWYV", "ARNDCQEGHILKMFPSTWYVBZX*",
                                    "ARNDCQEGHILKMFPSTWYVBZX*UOJ", "ACGTN", "ACGT", "AC"]))
    letters = "".join(draw(st.permutations(list(letters))))
    lines = ["# fuzzed"] if draw(st.booleans()) else []
    lines.append("   " + "  ".join(letters))
    for a in letters[:len(letters) - draw(st.integers(0, 1))]:
        row = [str(draw(VALUE)) if draw(st.integers(0, 30)) == 0 else str(draw(st.integers(-6, 11)))
               for _ in letters[:len(letters) + draw(st.integers(-1, 0))]]
        lines.append(f"{a} " + " ".join(row))
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n\x00"]))


@settings(FUZZ, max_examples=300)
@given(text=matrix_text(), gap_open=st.integers(-2, 40000), gap_extend=st.integers(-1, 40000))
def test_hostile_matrix_files_load_in_range_or_fail_with_one_scoring_error(text, gap_open,
                                                                             gap_extend):
    folder = scratch()
    try:
        path = folder / "fuzz.mat"
        path.write_text(text, encoding="utf-8")
        try:
            scoring = Scoring(path, gap_open=gap_open, gap_extend=gap_extend)
        except SwdaskError as exc:
            event(f"refused: {type(exc).__name__}")
            return
        event("loaded")
        size = scoring.alphabet.size
        assert scoring.matrix.shape == (size, size) and scoring.matrix.dtype == np.int32
        assert SCORE_RANGE[0] <= scoring.matrix.min() <= scoring.matrix.max() <= SCORE_RANGE[1]
        assert 0 <= scoring.gap_open <= 32767 and 1 <= scoring.gap_extend <= 32767
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- stores --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_store():
    folder = scratch()
    fasta = folder / "small.fa"
    rng = np.random.default_rng(7)
    fasta.write_text("".join(
        f">p{k} protein {k}\n{PROTEIN.decode(rng.integers(0, 27, int(rng.integers(5, 60))))}\n"
        for k in range(30)))
    ingest(fasta, folder / "small.store", partition_residues=300)
    yield folder / "small.store"
    shutil.rmtree(folder, ignore_errors=True)


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12),
                              st.floats(allow_nan=False), st.text(max_size=12)),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
METADATA_KEYS = ["alphabet", "alphabet_letters", "n_records", "n_residues", "partitions",
                 "schema_version", "format", "checksum"]
PART_KEYS = ["file", "n_records", "n_residues", "min_length", "max_length", "min_seq_id",
             "max_seq_id", "bytes"]


@st.composite
def corruption(draw):
    kind = draw(st.sampled_from(["metadata", "partition entry", "bytes", "truncate", "codes",
                                 "copy", "swap"]))
    if kind == "metadata":
        return kind, (draw(st.sampled_from(METADATA_KEYS)), draw(JSON), draw(st.booleans()))
    if kind == "partition entry":
        return kind, (draw(st.integers(0, 9)), draw(st.sampled_from(PART_KEYS)), draw(JSON),
                      draw(st.booleans()))
    if kind in ("bytes", "truncate"):
        return kind, (draw(st.integers(0, 9)), draw(st.floats(0, 1)), draw(st.integers(1, 255)))
    if kind == "codes":
        return kind, (draw(st.integers(0, 9)), draw(st.lists(st.tuples(st.floats(0, 1),
                                                                        st.integers(0, 255)),
                                                             min_size=1, max_size=4)))
    return kind, (draw(st.integers(0, 9)), draw(st.integers(0, 9)))


def corrupt(store: Path, kind: str, args) -> None:
    meta_path = store / METADATA_FILE
    metadata = json.loads(meta_path.read_text())
    parts = [store / p["file"] for p in metadata["partitions"]]
    if kind in ("metadata", "partition entry"):
        if kind == "metadata":
            key, value, sign = args
            metadata[key] = value
        else:
            k, key, value, sign = args
            metadata["partitions"][k % len(parts)][key] = value
        if sign:
            metadata["checksum"] = metadata_checksum(metadata)
        meta_path.write_text(json.dumps(metadata))
    elif kind == "bytes":
        k, where, value = args
        data = bytearray(parts[k % len(parts)].read_bytes())
        data[int(where * (len(data) - 1))] ^= value
        parts[k % len(parts)].write_bytes(bytes(data))
    elif kind == "truncate":
        k, where, _ = args
        data = parts[k % len(parts)].read_bytes()
        parts[k % len(parts)].write_bytes(data[:int(where * len(data))])
    elif kind == "codes":  # schema-valid file, metadata re-signed to match it
        k, changes = args
        part = parts[k % len(parts)]
        table = pq.read_table(part)
        residues = table.column("residues").combine_chunks()
        codes = residues.values.to_numpy().copy()
        for where, value in changes:
            codes[int(where * (len(codes) - 1))] = value
        table = table.set_column(4, table.schema.field("residues"), pa.ListArray.from_arrays(
            residues.offsets, pa.array(codes, pa.uint8())))
        pq.write_table(table, part, write_statistics=["seq_id", "length"])
        metadata["partitions"][k % len(parts)]["bytes"] = part.stat().st_size
        metadata["checksum"] = metadata_checksum(metadata)
        meta_path.write_text(json.dumps(metadata))
    elif kind == "copy":
        a, b = (parts[x % len(parts)] for x in args)
        assume(a != b)
        shutil.copy(a, b)
    else:  # swap two part files
        a, b = (parts[x % len(parts)] for x in args)
        assume(a != b)
        tmp = a.with_suffix(".tmp")
        a.rename(tmp), b.rename(a), tmp.rename(b)


@settings(FUZZ, max_examples=250)
@given(damage=corruption())
def test_damaged_stores_read_correctly_or_fail_with_one_swdask_error(small_store, damage):
    folder = scratch()
    try:
        store = folder / "s.store"
        shutil.copytree(small_store, store)
        corrupt(store, *damage)
        try:
            opened = SequenceStore.open(store)
            batch = opened.read_all()
            hits = swdask.search_in_process(["MKVLAWCUOJ"], store, max_hits=3)
        except SwdaskError as exc:
            event(f"{damage[0]}: refused, {type(exc).__name__}")
            return
        event(f"{damage[0]}: read and searched")
        # Nothing was refused: then what was read is in range and is what was ingested,
        # unless the damage was a crafted file of valid codes (that store's own data).
        assert residues_ok(batch)
        original = SequenceStore.open(small_store).read_all()
        if damage[0] == "codes":
            assert batch.names == original.names
            assert np.array_equal(batch.offsets, original.offsets)
        else:
            assert batch == original
            assert hits.equals(swdask.search_in_process(["MKVLAWCUOJ"], small_store, max_hits=3))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
