"""The GPU lane of the search (``python -m pytest -m gpu``): ``swdask.search`` on the GPU,
here and on dask-cuda's LocalCUDACluster, gives the CPU's hits."""
import pytest

from swdask.cluster import shutdown
from tests.helpers import QUERIES, SPROT_DB

pytestmark = pytest.mark.gpu


def test_search_on_gpu_equals_cpu(device):
    import dask

    import swdask

    cpu = swdask.search_in_process(QUERIES,
                                   SPROT_DB, device="cpu")
    gpu, stats = dask.compute(*swdask.search(QUERIES,
                                             SPROT_DB, device="gpu",
                                             return_stats=True))
    assert stats.device == "gpu"
    assert cpu.equals(gpu)


def test_search_on_a_local_cuda_cluster_equals_cpu(device, tmp_path):
    """The Dask flow on dask-cuda's LocalCUDACluster: one worker per GPU, GPU=1."""
    import swdask
    from swdask.cluster import compute

    store = swdask.ingest(SPROT_DB, tmp_path / "db.store",
                          partition_residues=40_000)
    assert len(store.files) > 1
    cpu = swdask.search_in_process(QUERIES, store, device="cpu",
                                   max_hits=20)
    client = swdask.cluster(device="gpu", dashboard_address=":0")
    try:
        assert type(client.cluster).__name__ == "LocalCUDACluster"
        hits, stats = compute(*swdask.search(QUERIES, store,
                                             device="gpu", max_hits=20, return_stats=True),
                              client=client)
    finally:
        shutdown(client)
    assert stats.device == "gpu"
    assert cpu.equals(hits)
