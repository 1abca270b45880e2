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
    # One partition per traceback batch, each numbered from 0 (Dask's way; with 2 GPUs
    # there are 2 batches): the rows, not the index, are what must agree.
    assert cpu.equals(hits.reset_index(drop=True))


def test_dna_both_strands_on_gpu_equal_cpu(device):
    """Reads of 16S genes, half of them reverse-complemented, against the 200 genes: the
    doubled query rows of both strands on the GPU give the CPU's hits, here and on Dask."""
    import dask

    import swdask
    from tests.helpers import RRNA, read_fasta

    genes = list(read_fasta(RRNA).values())
    reads = {}
    for k in range(0, 200, 10):
        read = genes[k][200:500]
        if k % 20:
            read = read[::-1].translate(str.maketrans("ACGTRYKMSWBDHVN", "TGCANNNNNNNNNNN"))
        reads[f"read{k}"] = read
    cpu, cpu_stats = swdask.search_in_process(reads, RRNA, device="cpu", max_hits=20,
                                              return_stats=True)
    assert set(cpu["strand"]) == {"plus", "minus"}
    here, stats = swdask.search_in_process(reads, RRNA, device="gpu", max_hits=20,
                                           return_stats=True)
    assert (stats.device, stats.strands, stats.cells) == ("gpu", 2, cpu_stats.cells)
    assert cpu.equals(here)
    lazy, lazy_stats = swdask.search(reads, RRNA, device="gpu", max_hits=20, return_stats=True)
    hits, stats = dask.compute(lazy, lazy_stats)
    assert stats.device == "gpu"
    assert cpu.equals(hits.reset_index(drop=True))


@pytest.mark.parametrize("mode", ["global", "semiglobal"])
def test_global_and_semiglobal_search_on_gpu_equal_cpu(device, mode):
    """Global and semiglobal searches on the GPU (score kernels, range histograms, the
    GPU traceback) give the CPU's hits, in this process and on Dask's threads."""
    import dask

    import swdask

    cpu = swdask.search_in_process(QUERIES, SPROT_DB, device="cpu", mode=mode, max_hits=50)
    here, stats = swdask.search_in_process(QUERIES, SPROT_DB, device="gpu", mode=mode,
                                           max_hits=50, return_stats=True)
    assert stats.device == "gpu"
    assert cpu.equals(here)
    gpu, stats = dask.compute(*swdask.search(QUERIES, SPROT_DB, device="gpu", mode=mode,
                                             max_hits=50, return_stats=True))
    assert stats.device == "gpu"
    assert cpu.equals(gpu)
    if mode == "global":
        assert (cpu["score"] < 0).any()
