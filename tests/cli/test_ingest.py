"""``swdask ingest`` (swdask.cli.ingest): the store it writes and what it reports."""
import swdask
from tests.helpers import RRNA, SPROT_DB, run_cli


def test_ingest_writes_store_and_reports(tmp_path, capsys):
    out = tmp_path / "db.store"
    status, stdout, err = run_cli(capsys, "ingest", SPROT_DB, "-o", out, "--quiet",
                              "--partition-residues", 50_000)
    assert status == 0, err
    store = swdask.SequenceStore.open(out)
    assert (store.n_records, store.n_residues, store.alphabet.name) == (400, 171_138, "protein")
    assert len(store.partitions) > 1
    assert stdout == (f"wrote {out}: 400 protein sequences, 171,138 residues in "
                      f"{len(store.partitions)} Parquet file(s)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.store"]  # no temp dir left


def test_ingest_several_files_and_dna(tmp_path, capsys):
    out = tmp_path / "rrna.store"
    status, stdout, err = run_cli(capsys, "ingest", RRNA, "-o", out, "--quiet")
    assert status == 0, err
    assert stdout.startswith(f"wrote {out}: 200 dna sequences, 287,612 residues in 1 Parquet file(s)")
