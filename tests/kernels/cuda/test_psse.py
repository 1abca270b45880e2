"""The significance kernels on the device (kernels/cuda/psse.py), in the CUDA simulator:
shuffles made on the device equal the CPU twin's, and every copy scored exactly by the
16-bit (two queries a launch) and 32-bit kernels, 16-bit overflows re-scored in 32 bits.
The ``gpu`` tests run the same checks on a real card."""
from __future__ import annotations

import numpy as np
import pytest

from swdask import Scoring
from swdask.jobs.significance import subject_key
from swdask.kernels.cpu import psse
from swdask.kernels.cpu.reference import score_reference
from tests.helpers import SMALL_QUERIES as QUERIES
from tests.helpers import SMALL_SUBJECTS as SUBJECTS

U64 = np.uint64


def _device_rows(profiles, packed, gap_open=11, gap_extend=1, n_shuffles=5, seed=3):
    """Scores of every copy from the device kernels, and the copies themselves."""
    from swdask.kernels.cuda.psse import DeviceShuffles

    scoring = Scoring()
    subjects = [scoring.alphabet.encode(s) for s in SUBJECTS.values()]
    order = np.argsort([-len(s) for s in subjects], kind="stable")
    subjects = [subjects[k] for k in order]
    off = np.concatenate([[0], np.cumsum([len(s) for s in subjects])]).astype(np.int64)
    keys = np.array([subject_key(n) for n in np.array(list(SUBJECTS))[order]], np.uint64)
    shuffled = DeviceShuffles(np.concatenate(subjects), off, keys, n_shuffles, seed)
    subset = tuple(range(len(subjects)))
    rows, _ = shuffled._score(subset, profiles, profiles[0].shape[0], gap_open, gap_extend, packed)
    res, res_off = shuffled.residues()
    copies = [res[res_off[c]:res_off[c + 1]] for c in range(len(res_off) - 1)]
    return [r.copy_to_host() for r in rows], copies, (np.concatenate(subjects), off, keys)


@pytest.mark.parametrize("packed", [True, False])
def test_device_kernels_score_every_shuffle_exactly(packed):
    """16-bit (two queries per launch) and 32-bit kernels over device-made shuffles
    against the reference; the device shuffles equal the CPU twin's."""
    scoring = Scoring()
    queries = [scoring.alphabet.encode(q) for q in QUERIES.values()][:2 if packed else 1]
    profiles = [np.ascontiguousarray(scoring.matrix[:, q], np.int32) for q in queries]
    rows, copies, (res, off, keys) = _device_rows(profiles, packed)
    lengths = np.diff(off)
    sizes = lengths * 6
    base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    out = np.zeros(int(sizes.sum()), np.uint8)
    out_off = np.zeros(len(lengths) * 6 + 1, np.int64)
    psse.shuffle_chunk(res, off[:-1].copy(), lengths, base, keys, np.int64(5), U64(3), out, out_off)
    assert [c.tolist() for c in copies] == [out[out_off[c]:out_off[c + 1]].tolist()
                                            for c in range(len(out_off) - 1)]
    for q, row in zip(queries, rows):
        expected = [score_reference(q, c, scoring.matrix, 11, 1)[0] for c in copies]
        assert row.tolist() == expected


def test_16bit_overflow_is_rescored_exactly():
    """A position-specific profile with large scores wraps 16 bits on the real subject:
    the launch re-scores those copies in 32 bits; the result equals the CPU scorer's."""
    scoring = Scoring()
    target = scoring.alphabet.encode(SUBJECTS["s33"])[:6]
    profile = np.full((scoring.alphabet.size, 6), -3, np.int32)
    profile[target, np.arange(6)] = 8000  # 6 x 8000 > 32767: the real pair wraps
    rows, copies, _ = _device_rows([profile], True)
    expected = np.zeros(len(copies), np.int64)
    buf = np.concatenate(copies)
    buf_off = np.concatenate([[0], np.cumsum([len(c) for c in copies])]).astype(np.int64)
    psse.score_profile(profile.astype(np.int64), buf, buf_off, np.arange(len(copies)), 11, 1,
                       expected)
    assert rows[0].max() > 32767
    assert rows[0].tolist() == expected.tolist()


# -- GPU lane ---------------------------------------------------------------------------


@pytest.mark.parametrize("packed", [True, False])
def test_significance_launches_only_the_shapes_warmup_builds(packed):
    """The significance job's score kernels are the search's shapes, which ``swdask
    warmup`` builds and the package ships, so its first run with them compiles nothing
    (with a 16-bit family of its own, 100 Swiss-Prot pairs compiled 11 shapes one by one:
    44 s on a 2 x H200 host)."""
    from swdask.kernels.cuda import psse as gpu
    from swdask.warmup import kernel_specs

    built = {(family, tuple(sorted(shape.items()))) for family, shape in kernel_specs()}
    for alphabet in {Scoring().matrix.shape[0], Scoring("NUC.4.4").matrix.shape[0]}:
        lengths = list(range(9000, 0, -1))  # longest first, as the job pairs them
        specs = gpu.kernel_specs(lengths, alphabet, packed)
        assert len(specs) == (len(lengths) + 1) // 2 if packed else len(lengths)
        missing = {(family, tuple(sorted(shape.items()))) for family, shape in specs} - built
        assert not missing, sorted(missing)[:3]


@pytest.mark.gpu
@pytest.mark.parametrize("packed", [True, False])
def test_gpu_kernels_score_every_shuffle_exactly(packed):
    test_device_kernels_score_every_shuffle_exactly(packed)


@pytest.mark.gpu
def test_gpu_overflow_rescored():
    test_16bit_overflow_is_rescored_exactly()
