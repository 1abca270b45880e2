"""The fixture the sequence tests share."""
import pytest

from swdask.sequences.ingest import ingest
from tests.helpers import SPROT_DB


@pytest.fixture(scope="package")
def sprot_store(tmp_path_factory):
    """The 400-record protein database, cut into many small partitions."""
    out = tmp_path_factory.mktemp("store") / "sprot.store"
    return ingest(SPROT_DB, out, partition_residues=20_000)
