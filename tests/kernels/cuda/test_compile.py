"""The CUDA kernel room (kernels/cuda/compile.py): entries, keys, concurrency, bounds,
rendered files, declared signatures (CI: storage and the simulator; the GPU lane checks
that a second process loads without compiling, tests/kernels/cuda/test_compile_gpu.py)."""
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from swdask.kernels.cuda import compile as room

KEY = "a" * 64
COMPILED = room.Compiled(parameters=(("a", "<i4", 1, "C"), ("s", "<i8")), name="_Z6kernel",
                         cubin=b"cubin" * 1000, cooperative=False, declared=("void(int32[::1], int64)",))


class Interface:
    """A device array as a launch sees it: its ``__cuda_array_interface__`` (here of a host
    array: the tests read the layout, nothing is launched)."""

    def __init__(self, array):
        self.__cuda_array_interface__ = array.__array_interface__


def entry(tmp_path, payload=b"cubin" * 1000, key=KEY, name="k-1.nbk"):
    path = tmp_path / name
    room.write_atomic(path, room.entry_bytes(key, COMPILED.header({"family": "f"}), payload))
    return path


def test_entry_round_trip(tmp_path):
    path = entry(tmp_path)
    header, payload = room.read_entry(path, KEY)
    assert payload == b"cubin" * 1000 and header["spec"] == {"family": "f"}
    again = room.Compiled.from_entry(header, payload)
    assert (again.parameters, again.name, again.cubin, again.cooperative, again.declared) == (
        COMPILED.parameters, COMPILED.name, COMPILED.cubin, False, COMPILED.declared)
    assert path.exists()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "empty", "foreign"])
def test_damaged_or_foreign_entry_is_deleted_not_trusted(tmp_path, damage):
    path = entry(tmp_path)
    data = path.read_bytes()
    key = KEY
    if damage == "truncated":
        path.write_bytes(data[:-7])
    elif damage == "flipped":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "garbage":
        path.write_bytes(os.urandom(300))
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # written for another kernel, toolchain or device
        key = "b" * 64
    assert room.read_entry(path, key) is None
    assert not path.exists()


def test_missing_entry_is_a_miss(tmp_path):
    assert room.read_entry(tmp_path / "none.nbk", KEY) is None


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    """Threads rewrite one entry (a large payload each) while a reader reads it: every
    read is complete and valid, and no temporary file is left."""
    path = tmp_path / "shared.nbk"
    payloads = [bytes([k]) * 2_000_000 for k in range(6)]
    stop = threading.Event()
    seen, bad = set(), []

    def read():
        while not stop.is_set():
            got = room.read_entry(path, KEY)
            if got is not None:
                if got[1] not in payloads:
                    bad.append(len(got[1]))
                seen.add(got[1][:1])

    def write(payload):
        for _ in range(5):
            room.write_atomic(path, room.entry_bytes(KEY, {"name": "k"}, payload))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert not bad
    assert seen  # the reader did see entries
    assert room.read_entry(path, KEY)[1] in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["shared.nbk"]


def test_concurrent_writer_processes(tmp_path):
    """Four processes write the same entry at once (as four Dask workers that compiled
    the same kernel would): the entry that remains is one of theirs, whole."""
    script = ("import sys; from pathlib import Path; from swdask.kernels.cuda import compile as r\n"
              "p = Path(sys.argv[1]); b = bytes([int(sys.argv[2])]) * 3_000_000\n"
              "for _ in range(20): r.write_atomic(p, r.entry_bytes(sys.argv[3], {}, b))\n")
    path = tmp_path / "e.nbk"
    children = [subprocess.Popen([sys.executable, "-c", script, str(path), str(k), KEY])
                for k in range(4)]
    assert [c.wait(timeout=120) for c in children] == [0, 0, 0, 0]
    _, payload = room.read_entry(path, KEY)
    assert len(payload) == 3_000_000 and len(set(payload)) == 1 and payload[0] in range(4)
    assert [p.name for p in tmp_path.iterdir()] == ["e.nbk"]


def test_prune_keeps_the_most_recently_used_within_the_bound(tmp_path):
    now = time.time()
    for k in range(10):
        path = entry(tmp_path, payload=bytes(100_000), name=f"k{k}-x.nbk")
        os.utime(path, (now - 1000 + k, now - 1000 + k))
    stale = tmp_path / ".k0-x.nbk.1.2.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (now - 7200, now - 7200))
    fresh = tmp_path / ".k1-x.nbk.1.2.tmp"  # a writer may still be busy with it
    fresh.write_bytes(b"x")
    removed = room.prune(tmp_path, limit=500_000)
    left = sorted(p.name for p in tmp_path.glob("*.nbk"))
    assert sum((tmp_path / name).stat().st_size for name in left) <= 0.75 * 500_000
    assert left == [f"k{k}-x.nbk" for k in range(10 - len(left), 10)]  # newest kept
    assert not stale.exists() and fresh.exists()
    assert removed == 10 - len(left) + 1
    assert room.prune(tmp_path, limit=10**9) == 0  # under the bound: nothing goes


def test_prune_counts_the_rendered_texts_and_their_bytecode(tmp_path):
    """The source/ folder is part of the bound: its oldest files go with the entries."""
    now = time.time()
    source = tmp_path / "source"
    source.mkdir()
    for k in range(4):
        for suffix in (".py", ".code"):
            path = source / f"kernel{k}-0123456789ab{suffix}"
            path.write_bytes(bytes(100_000))
            os.utime(path, (now - 1000 + k, now - 1000 + k))
    newest = entry(tmp_path, payload=bytes(100_000), name="k9-x.nbk")
    removed = room.prune(tmp_path, limit=500_000)
    left = sorted(p.name for p in source.iterdir())
    # 900 kB in all: the three oldest pairs go (6 files), the newest pair and entry stay.
    assert removed == 6 and newest.exists()
    assert left == ["kernel3-0123456789ab.code", "kernel3-0123456789ab.py"]
    total = sum(p.stat().st_size for p in source.iterdir()) + newest.stat().st_size
    assert total <= 0.75 * 500_000


def test_the_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(room.ENV_MAX_MB, "2")
    assert room.max_bytes() == 2 * 2**20
    monkeypatch.delenv(room.ENV_MAX_MB)
    assert room.max_bytes() == room.DEFAULT_MAX_MB * 2**20


def test_cache_folder_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(room.ENV_CACHE_DIR, str(tmp_path))
    assert room.kernel_dir() == tmp_path / "cuda"
    monkeypatch.delenv(room.ENV_CACHE_DIR)
    assert room.kernel_dir().parts[-2:] == ("swdask", "cuda")


@pytest.mark.parametrize("change", ["family", "shape", "kernel", "shared", "cc"])
def test_key_covers_what_changes_the_machine_code(change):
    """A kernel's text follows from its build spec and the kernels' source (in the shared
    facts with the versions); the machine code also from the device."""
    base = dict(spec={"family": "tile", "shape": {"rows": 2, "dpx": True}}, shared="s1",
                cc=(9, 0))
    other = dict(base)
    if change == "family":
        other["spec"] = {"family": "all_pairs", "shape": {"rows": 2, "dpx": True}}
    elif change == "shape":
        other["spec"] = {"family": "tile", "shape": {"rows": 2, "dpx": False}}
    elif change == "kernel":
        other["spec"] = {"kernel": "swdask.kernels.cuda.selection:_fill"}
    elif change == "shared":
        other["shared"] = "s2"
    else:
        other["cc"] = (8, 0)
    assert room.kernel_key(**base) == room.kernel_key(**dict(base))
    assert room.kernel_key(**base) != room.kernel_key(**other)
    # The order of a shape's items does not matter.
    assert room.kernel_key({"family": "tile", "shape": {"dpx": True, "rows": 2}}, "s1",
                           (9, 0)) == room.kernel_key(**base)


def test_parameter_types_are_numbas():
    """What a launch's arguments are, said without Numba, is what Numba's typeof says
    (checked through Numba here)."""
    from numba import typeof

    a = np.zeros((3, 4), np.int32)
    values = [a, a[1], a[:, 1], np.asfortranarray(a), np.int32(3), np.int64(4), 5, 2.5, True,
              np.bool_(False), np.uint8(1), np.float32(1.5)]
    got = [room.parameter_type(v) for v in values]
    assert got == list(room._parameter_types([typeof(v) for v in values]))
    for view in (a, a[1:], a[:, 1]):  # a device array says the same through its interface
        assert room.parameter_type(Interface(view)) == room.parameter_type(view)
    assert got[:4] == [("a", "<i4", 2, "C"), ("a", "<i4", 1, "C"), ("a", "<i4", 1, "A"),
                       ("a", "<i4", 2, "F")]
    assert room._parameter_types(room._numba_types(got)) == tuple(got)
    with pytest.raises(TypeError, match="cannot take str"):
        room.parameter_type("x")


def test_a_launch_takes_numbas_choice_of_specialisation():
    """Exact types first; an array of any layout for layout A; a scalar by a safe cast;
    otherwise none (the kernel compiles a new one)."""
    c1, a1 = ("a", "<i4", 1, "C"), ("a", "<i4", 1, "A")
    assert room.conversions((c1, ("s", "<i8")), (c1, ("s", "<i8"))) == 0
    assert room.conversions((a1, ("s", "<i8")), (c1, ("s", "<i4"))) == 2
    assert room.conversions((c1,), (a1,)) is None  # C cannot take a strided view
    assert room.conversions((("s", "<i4"),), (("s", "<i8"),)) is None  # unsafe
    assert room.conversions((("a", "<i8", 1, "A"),), (c1,)) is None  # another dtype
    assert room.conversions((c1,), (c1, c1)) is None


def test_arguments_are_packed_in_numbas_layout():
    """An array is two null pointers, its item count and size, its data pointer, its
    shape and its strides; scalars take their parameter's type (an int8 to int32, a
    float32 to float64), each value aligned to its size in one buffer."""
    device = Interface(np.zeros((3, 4), np.int16))
    args = (device, np.int8(7), True, np.float32(0.5))
    described = [room.argument(a) for a in args]
    assert [kind for kind, _ in described] == [("a", "<i2", 2, "C"), ("s", "|i1"),
                                               ("s", "|b1"), ("s", "<f4")]
    parameters = (("a", "<i2", 2, "C"), ("s", "<i4"), ("s", "|b1"), ("s", "<f8"))
    assert room.parameter_sizes(parameters) == [8] * 9 + [4, 1, 8]
    assert room.buffer_offsets(parameters) == [8 * k for k in range(9)] + [72, 76, 80]
    layout = room.buffer_layout(parameters)
    buffer, writeback = room.pack(layout, described, args, 0)
    assert not writeback and len(buffer) == layout.size == 88
    pointer = device.__cuda_array_interface__["data"][0]
    assert struct.unpack_from("<9q", buffer) == (0, 0, 12, 2, pointer, 3, 4, 8, 2)
    assert struct.unpack_from("<i?xxxd", buffer, 72) == (7, True, 0.5)
    # The machine code's offsets win where the driver gives them.
    wide = room.buffer_layout(parameters, [8 * k for k in range(12)])
    assert wide.size == 96 and struct.unpack_from("<i", wide.pack(*[0] * 9, 7, 1, 0.5), 72) == (7,)


def test_a_device_arrays_launch_values_are_worked_out_once():
    """This package's device arrays keep their launch description; views get their own."""
    array = room.driver.DeviceArray((5, 6), np.int32, pointer=4096)
    kind, values = room.argument(array)
    assert room.argument(array) is array.launch_argument
    assert kind == ("a", "<i4", 2, "C") and values == (0, 0, 30, 4, 4096, 5, 6, 24, 4)
    column = array[:, 2:3]
    assert room.argument(column) == (("a", "<i4", 2, "A"),
                                     (0, 0, 5, 4, 4096 + 8, 5, 1, 24, 4))


def test_an_edit_to_any_kernel_module_changes_the_digest(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "device.py").write_text("X = 1\n")
    (tmp_path / "cuda.py").write_text("Y = 1\n")
    before = room.kernels_digest(tmp_path)
    assert room.kernels_digest(tmp_path) == before
    (tmp_path / "cpu" / "device.py").write_text("X = 2\n")
    assert room.kernels_digest(tmp_path) != before
    assert len(room.kernels_digest()) == 64  # the installed package's


def test_rendered_kernel_runs_from_a_real_file_and_dumps(monkeypatch, tmp_path):
    monkeypatch.setenv(room.ENV_DUMP, str(tmp_path / "dump"))
    monkeypatch.setattr(room, "_KERNELS", {})
    kernel = room.get_kernel("inter_task_dpx", rows=3, group=2, alphabet=5, threads=32)
    path = kernel.py_func.__code__.co_filename
    assert os.path.isfile(path) and path.startswith(str(room.kernel_dir()))
    dumped = tmp_path / "dump" / "inter_task_dpx-R3-G2-A5-T32.py"
    assert dumped.read_text() == Path(path).read_text()
    assert dumped.read_text().startswith("def kernel(")
    assert room.get_kernel("inter_task_dpx", rows=3, group=2, alphabet=5, threads=32) is kernel


def test_unknown_family_names_the_choices():
    with pytest.raises(ValueError, match="unknown kernel family 'nope'; expected one of "
                                         "all_pairs, inter_task, inter_task_dpx, inter_task_dpx_scan, "
                                         "intra_task, tile"):
        room.get_kernel("nope")


def test_declared_signatures_are_what_the_launchers_pass(monkeypatch):
    """Kernels built ahead of time are compiled for the declared argument types; a launch
    with other types would compile again.  Launch every family through its real launcher
    in the simulator and compare."""
    from swdask.backend import score_all_gpu, top_hits_gpu
    from swdask.kernels.cuda import launcher, traceback

    monkeypatch.setattr(room, "_KERNELS", {})  # only this test's launches
    for family, spec in launcher.SEARCH_KERNELS:
        monkeypatch.setattr(room.resolve(family, spec)[0], "launched", set())
    from numba.core import sigutils

    from swdask.kernels.cpu.tile import matrix_boundaries
    from swdask.kernels.cuda import all_pairs, tile
    from swdask.scoring import Scoring

    rng = np.random.default_rng(5)
    protein = Scoring()
    seqs = [rng.integers(0, 20, n).astype(np.uint8) for n in (5, 20, 34)]
    res = np.concatenate(seqs)
    off = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    top_hits_gpu(res, off, res, off, protein.matrix, 11, 1, 2, 1)  # the search: the scan
    launcher.DeviceSubjects(res, off).top_many(seqs[:2], protein.matrix, 11, 1, 2,
                                               kernel="ends")  # 16-bit with end cells
    launcher.DeviceSubjects(res, off).top_many(seqs[:2], protein.matrix, 11, 1, 2,
                                               kernel="scan")  # the scan and its end pass
    score_all_gpu(seqs[0], off[:2], res, off, protein.matrix, 11, 1, packed=False,
                  intra_threshold=30)  # 32-bit, and the long subject to the intra-task kernel
    dna = Scoring("NUC.4.4", gap_open=5, gap_extend=2)
    genes = [rng.integers(0, 4, n).astype(np.uint8) for n in (20, 24)]
    g_res = np.concatenate(genes)
    g_off = np.array([0, 20, 44], np.int64)
    all_pairs.score_passing_pairs(g_res, g_off, g_res, g_off, np.array([0], np.int64),
                                  np.array([1], np.int64), np.array([1], np.int64), dna.matrix,
                                  5, 2, (0, 1, 0, 0, 0), rows=1)
    all_pairs.score_passing_pairs(g_res, g_off, g_res, g_off, np.array([0], np.int64),
                                  np.array([1], np.int64), np.array([1], np.int64), dna.matrix,
                                  5, 2, (0, 1, 0, 0, 1), rows=1)  # local
    a, b = genes[0].repeat(4)[:65], genes[1][:16]  # the simulator is slow: two strips
    tile.score_grid_gpu(a[:10], b[:10], dna.matrix, 5, 2, *matrix_boundaries(10, 10), rows=2,
                        width=8)
    tile.score_grid_gpu(a, b, dna.matrix, 5, 2, *matrix_boundaries(len(a), len(b)), [64], [8],
                        rows=2, width=8)
    from swdask.kernels.cpu.score import score_all

    _, q_end, s_end = score_all(seqs[1], np.array([0, 20]), seqs[2], np.array([0, 34]),
                                protein.matrix, 11, 1)
    traceback.trace_paths([seqs[1]], [seqs[2]], np.array([[q_end[0, 0], s_end[0, 0]]]),
                          protein.matrix, 11, 1)
    checked = set()
    for (family, shape, _), kernel in room._KERNELS.items():
        if family == "kernel":  # hand-written: below
            continue
        declared = tuple(sigutils.normalize_signature(room.signature(family, **dict(shape)))[0])
        for launched in kernel.launched:
            assert launched == declared, (family, dict(shape), launched)
            checked.add(family)
    assert checked == set(room.FAMILIES)
    for family, spec in launcher.SEARCH_KERNELS + launcher.END_KERNELS:  # hand-written
        kernel, signatures = room.resolve(family, spec)
        declared = {tuple(sigutils.normalize_signature(s)[0]) for s in signatures}
        assert kernel.launched <= declared, (spec, kernel.launched)
        if kernel.launched:
            checked.add(spec["name"])
    assert len(checked) >= len(room.FAMILIES) + 5  # _scatter runs only after an overflow


def test_rendered_options_reach_numba_jit(monkeypatch):
    """A family's ``cuda.jit`` options (the scan kernel's ``lto`` and ``max_registers``
    on a GPU) are passed on with its text; the scan kernel asks for them outside the
    simulator."""
    from numba import cuda

    from swdask.kernels.cuda import inter_task_dpx_scan

    seen = []
    simulator_jit = cuda.jit

    def recording(*args, **options):
        seen.append(options)
        return simulator_jit(*args)  # the simulator's jit takes none of these options

    options = {"lto": True, "max_registers": 96}
    monkeypatch.setattr(cuda, "jit", recording)
    monkeypatch.setattr(inter_task_dpx_scan, "render", lambda **shape: room.Rendered(
        name="options-test", source="def kernel(x):\n    x[0] = 1\n", options=options))
    room._render("inter_task_dpx_scan", {"rows": 4})
    assert seen == [options]
    monkeypatch.undo()
    monkeypatch.setattr(inter_task_dpx_scan, "simulated", lambda: False)
    rendered = inter_task_dpx_scan.render(20, 16, 24, 128)
    assert rendered.options == {"lto": True, "max_registers": inter_task_dpx_scan.MAX_REGISTERS}
    assert "sw16_max3_relu" in rendered.link[0]


def test_build_process_protocol():
    """``python -m swdask.kernels.cuda.compile`` (one share of a parallel build) prints
    a JSON line per kernel; in the simulator nothing needs compiling."""
    share = [["tile", {"rows": 2, "width": 8, "warps": 1, "dpx": False, "checkpoints": True}]]
    done = subprocess.run(room.build_command(share), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["family"] == "tile" and line["shape"] == share[0][1] and line["seconds"] >= 0
    assert room.build([("tile", share[0][1])]) == []  # the simulator: nothing to build


def test_a_build_process_ignores_a_swdask_folder_where_it_runs(tmp_path, monkeypatch):
    """Run from a source checkout over an installed package, a build process imports the
    package, not the checkout's ``swdask/`` (which has no ``kernels``; here a folder
    whose import fails)."""
    (tmp_path / "swdask").mkdir()
    (tmp_path / "swdask" / "__init__.py").write_text("raise ImportError('the folder, not the package')\n")
    monkeypatch.chdir(tmp_path)
    share = [["tile", {"rows": 2, "width": 8, "warps": 1, "dpx": False, "checkpoints": True}]]
    done = subprocess.run(room.build_command(share), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["family"] == "tile"


def test_rendered_kernel_bytecode_is_kept_and_checked(tmp_path, monkeypatch):
    """A rendered kernel's text is compiled once: the next process reads the bytecode
    kept beside the file; a damaged, foreign or misplaced entry is compiled anew."""
    path = tmp_path / "kernel-0123456789ab.py"
    source = "def kernel(x):\n    return x + 41\n"
    path.write_text(source)
    first = room._code_of(source, path)
    cached = path.with_suffix(".code")
    assert cached.exists()

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although the bytecode was kept")

    import builtins

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "compile", no_compile)
        again = room._code_of(source, path)
    namespace = {}
    exec(again, namespace)
    assert namespace["kernel"](1) == 42 and again.co_filename == first.co_filename == str(path)
    good = cached.read_bytes()
    for damaged in (good[:-5], b"\x00\x00\x00\x00" + good[4:], b""):
        cached.write_bytes(damaged)
        code = room._code_of(source, path)
        namespace = {}
        exec(code, namespace)
        assert namespace["kernel"](1) == 42
        assert cached.read_bytes() == good  # written again
    # Bytecode kept for another file is not taken for this one.
    other = tmp_path / "other-0123456789ab.py"
    other.write_text(source)
    other.with_suffix(".code").write_bytes(good)
    assert room._code_of(source, other).co_filename == str(other)


# --------------------------------------------------------------------------------------
# Kernels shipped in the package (the GPU lane loads real ones: test_compile_gpu.py).

SPEC = {"family": "tile", "shape": {"rows": 2, "dpx": True}}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A pretend GPU of compute capability 9.0 (nothing is launched): this process's
    kernels are not simulated, its toolchain is fixed, its cache and the package's
    archives are folders of ``tmp_path``."""
    monkeypatch.setattr(room, "simulated", lambda: False)
    monkeypatch.setattr(room, "_shared_key", lambda: "toolchain-1")
    monkeypatch.setattr(room, "_toolchain", lambda: {"numba-cuda": "0.30.4", "driver": 13000})
    monkeypatch.setattr(room.driver, "compute_capability", lambda: (9, 0))
    monkeypatch.setenv("SWDASK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SWDASK_SHIPPED_KERNELS", raising=False)
    monkeypatch.setattr(room, "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setattr(room, "_SHIPPED", {})
    monkeypatch.setattr(room, "_SHIPPED_REFUSED", [])
    monkeypatch.setitem(room.STATS, "shipped", 0)
    return tmp_path


def built_here(folder, spec=SPEC, cc=(9, 0), shared="toolchain-1", compiled=COMPILED):
    """An entry as this machine's build would save it in cache folder ``folder``."""
    key = room.kernel_key(spec, shared, cc)
    path = folder / f"{key}-{room.parameters_tag(compiled.parameters)}.nbk"
    room.write_atomic(path, room.entry_bytes(key, compiled.header(spec, compiled.declared),
                                             compiled.cubin))
    return path


def test_shipped_kernels_are_taken_instead_of_compiled(machine, monkeypatch):
    """Packed on one machine, a kernel is taken from the archive by a process with an
    empty cache (and saved in its cache), and the next process loads it from its cache."""
    built = machine / "built"
    built_here(built)
    built_here(built, spec={"family": "tile", "shape": {"rows": 4, "dpx": True}})
    built_here(built, cc=(8, 0))  # another device's: not packed
    built_here(built, shared="toolchain-0")  # another toolchain's or older sources: not packed
    manifest = room.pack_shipped(built, room.SHIPPED_DIR / "sm_90.zip", (9, 0))
    assert sorted(manifest["entries"]) == sorted(
        room._spec_text(s) for s in (SPEC, {"family": "tile", "shape": {"rows": 4, "dpx": True}}))
    assert manifest["digest"] == room.shipped_digest() and manifest["cc"] == [9, 0]
    archive = room.ShippedArchive(room.SHIPPED_DIR / "sm_90.zip")
    assert len(archive.entries(SPEC)) == 1
    assert archive.entries(SPEC, skip=[room.parameters_tag(COMPILED.parameters)]) == []

    def compile_fails(*_):
        raise AssertionError("compiled a shipped kernel")

    kernel = room.Kernel(SPEC, compile_fails)
    kernel._compile = compile_fails
    assert kernel.load() == 1 and room.STATS["shipped"] == 1
    compiled = kernel._compiled[COMPILED.parameters]
    assert compiled.cubin == COMPILED.cubin and compiled.name == COMPILED.name
    assert compiled.shipped and kernel.has(COMPILED.declared[0])
    saved = list(room.kernel_dir().glob("*.nbk"))
    assert len(saved) == 1
    later = room.Kernel(SPEC, compile_fails)
    assert later.load() == 1 and room.STATS["shipped"] == 1  # from the cache this time
    assert later._compiled[COMPILED.parameters].shipped  # it remembers where it came from
    saved[0].write_bytes(saved[0].read_bytes()[:-3])  # a damaged cache entry
    again = room.Kernel(SPEC, compile_fails)
    assert again.load() == 1 and room.STATS["shipped"] == 2  # taken from the package again
    assert again._compiled[COMPILED.parameters].cubin == COMPILED.cubin
    assert room.read_entry(saved[0], again.key()) is not None  # and the cache repaired
    read = []
    monkeypatch.setattr(room.ShippedArchive, "entries",
                        lambda self, spec, skip=(): read.append(set(skip)) or [])
    room.Kernel(SPEC, compile_fails).load()  # what the cache has is not read from the package
    assert read == [{room.parameters_tag(COMPILED.parameters)}]


def test_shipped_kernels_of_other_sources_or_turned_off_are_not_taken(machine, monkeypatch):
    built = machine / "built"
    built_here(built)
    room.pack_shipped(built, room.SHIPPED_DIR / "sm_90.zip", (9, 0))
    monkeypatch.setenv("SWDASK_SHIPPED_KERNELS", "0")
    assert room.shipped_archive((9, 0)) is None
    monkeypatch.delenv("SWDASK_SHIPPED_KERNELS")
    assert room.shipped_archive((9, 0)).current
    monkeypatch.setattr(room, "_SHIPPED", {})
    monkeypatch.setattr(room, "shipped_digest", lambda: "edited kernel sources")
    assert room.shipped_archive((9, 0)) is None
    assert room.Kernel(SPEC, lambda: None).load() == 0


def test_a_damaged_archive_or_member_compiles_instead(machine):
    built = machine / "built"
    built_here(built)
    path = room.pack_shipped(built, room.SHIPPED_DIR / "sm_90.zip", (9, 0)) and \
        room.SHIPPED_DIR / "sm_90.zip"
    archive = room.ShippedArchive(path)
    member = next(iter(archive.manifest["entries"].values()))[0]
    import zipfile

    with zipfile.ZipFile(path) as old, zipfile.ZipFile(machine / "bad.zip", "w") as new:
        for name in old.namelist():
            data = old.read(name)
            new.writestr(name, data[:-5] + b"xxxxx" if name == member else data)
    os.replace(machine / "bad.zip", path)
    assert room.ShippedArchive(path).entries(SPEC) == []  # a wrong checksum: left out
    path.write_bytes(b"not a zip")
    assert room.shipped_archive((9, 0)) is None


@pytest.mark.parametrize(("cc", "expected"), [((9, 0), "sm_90"), ((8, 9), "sm_86"),
                                              ((8, 6), "sm_86"), ((8, 0), "sm_80"),
                                              ((7, 5), None), ((10, 0), None)])
def test_the_archive_of_a_device_is_its_major_version_up_to_its_minor(tmp_path, cc, expected):
    """A cubin runs on devices of its major version and a minor at least its own."""
    for name in ("sm_80", "sm_86", "sm_90", "sm_xy"):
        (tmp_path / f"{name}.zip").write_bytes(b"")
    found = room.shipped_archive_path(cc, tmp_path)
    assert (found.stem if found else None) == expected


def test_a_shipped_kernel_the_driver_refuses_is_compiled(machine, monkeypatch):
    """A driver older than the toolchain that built a shipped cubin refuses it: the kernel
    compiles instead, its cache entry is replaced, and no shipped kernel is taken again."""
    built = machine / "built"
    built_here(built)
    room.pack_shipped(built, room.SHIPPED_DIR / "sm_90.zip", (9, 0))
    fresh = room.Compiled(COMPILED.parameters, COMPILED.name, b"rebuilt", declared=COMPILED.declared)

    def function(self):
        if self.shipped:
            raise room.driver.CudaError("cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE")
        return "loaded"

    monkeypatch.setattr(room.Compiled, "function", function)
    kernel = room.Kernel(SPEC, lambda: None)
    compiles = []

    def compile_(parameters, declared=()):
        compiles.append(parameters)
        kernel._compiled[parameters] = fresh
        return fresh

    kernel._compile = compile_
    assert kernel.specialisation(COMPILED.parameters) is fresh
    assert compiles == [COMPILED.parameters] and room._SHIPPED_REFUSED
    assert room.shipped_archive((9, 0)) is None
    assert room.Kernel(SPEC, lambda: None).load() == 0  # the refused entry left the cache


def test_host_modules_define_no_kernels():
    """The shipped kernels' digest leaves out HOST_MODULES, so none may define a kernel or
    a device function."""
    import re

    root = Path(room.__file__).resolve().parents[1]
    for name in room.HOST_MODULES:
        text = (root / name).read_text()
        assert not re.search(r"^\s*@(cuda\.)?jit\b|cuda\.jit\(device=True\)|^\s*@jit\(",
                             text, re.M), name


def test_the_archive_in_the_tree_matches_these_kernel_sources():
    """The package's archive was packed from the kernel sources it ships with.  An edit to
    a kernel, a device function or a constant they read leaves it stale: every H100 or
    H200 user's first search would compile again (22-25 s, against 2.2 s with the archive)
    until ``python workflows/ship_kernels.py`` runs on such a GPU and its archive is
    committed.  The GPU lane checks the same on the card
    (``test_the_shipped_kernels_are_current``)."""
    path = Path(room.__file__).resolve().parent / "shipped" / "sm_90.zip"
    archive = room.ShippedArchive(path)
    assert archive.manifest["digest"] == room.kernels_digest(leave_out=room.HOST_MODULES), (
        f"{path} was packed from other kernel sources: run python workflows/ship_kernels.py "
        "on an H100 or H200 and commit the archive it writes")
    assert archive.manifest["cc"] == [9, 0] and len(archive.manifest["entries"]) >= 20


def test_a_failed_build_process_is_built_again_here(monkeypatch, caplog):
    """Build processes that fail (here: each could not make a CUDA context) leave their
    kernels to this process, one at a time; every child is waited for."""
    specs = [("tile", {"rows": r}) for r in (1, 2, 3)]
    done = set()

    class Kernel:
        def load(self):
            return 0

    monkeypatch.setattr(room, "is_cached", lambda family, **shape: shape["rows"] in done)
    monkeypatch.setattr(room, "resolve", lambda family, shape: (Kernel(), ()))

    def build_one(family, shape):
        done.add(shape["rows"])
        return family, shape, 0.5

    monkeypatch.setattr(room, "_build_one", build_one)
    children = []

    class Child:
        def __init__(self, argv, **_):
            self.returncode = None
            children.append(self)

        def communicate(self):
            self.returncode = 1
            return "", "CudaError: cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY\n"

    monkeypatch.setattr(subprocess, "Popen", Child)
    with caplog.at_level("WARNING", logger=room.__name__):
        built = room.build(specs, jobs=2)
    assert sorted(shape["rows"] for _, shape, _ in built) == [1, 2, 3] and done == {1, 2, 3}
    assert len(children) == 2 and all(c.returncode == 1 for c in children)
    assert "CUDA_ERROR_OUT_OF_MEMORY" in caplog.text


@cuda.jit
def _block_sums(values, out):
    """Threads that meet at block barriers: a tree sum over each block of 64."""
    shared = cuda.shared.array(64, np.int64)
    tx = cuda.threadIdx.x
    shared[tx] = values[cuda.blockIdx.x * 64 + tx]
    cuda.syncthreads()
    step = 32
    while step:
        if tx < step:
            shared[tx] += shared[tx + step]
        cuda.syncthreads()
        step //= 2
    if tx == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def _fails_in_one_thread(out):
    tx = cuda.threadIdx.x
    if tx == 5:
        out[100] = 1  # out of bounds, in the simulator an IndexError
    cuda.syncthreads()
    out[tx] = tx


def test_the_simulators_block_loop_yields_and_keeps_its_results():
    """The simulator's block loop is the one :func:`yield_in_simulated_blocks` was written
    against (with another Numba it keeps its own, and CI's simulated tests take about
    twice as long), and blocks that meet at barriers still compute what they did."""
    assert room.yield_in_simulated_blocks()
    values = np.arange(3 * 64, dtype=np.int64) ** 2
    out = np.zeros(3, np.int64)
    _block_sums[3, 64](values, out)
    assert out.tolist() == values.reshape(3, 64).sum(axis=1).tolist()


def test_a_simulated_thread_that_raises_before_a_barrier_aborts_its_block():
    """An exception in one thread still reaches the caller (the loop aborts the block's
    other threads, which wait at the barrier) instead of hanging the test."""
    assert room.yield_in_simulated_blocks()
    with pytest.raises(IndexError):
        _fails_in_one_thread[1, 16](np.zeros(16, np.int64))


def test_a_block_loop_of_another_numba_is_left_alone(monkeypatch):
    from numba.cuda.simulator import kernel as simulator

    def other_run(self, grid_point, *args):  # not the loop the replacement matches
        raise AssertionError("not called here")

    monkeypatch.setattr(simulator.BlockManager, "run", other_run)
    monkeypatch.setattr(room, "_YIELDING", False)
    assert room.yield_in_simulated_blocks() is False
    assert simulator.BlockManager.run is other_run
