"""Property tests of dledger._ext.crc against zlib.crc32, for every CRC path this CPU runs.

The "table" (slicing-by-16) fallback is always tested, and so is every hardware path the
machine offers ("vpclmul" and "pclmul" on x86_64, "armv8-crc" on aarch64) via the test-only
``_force_impl`` hook.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import mmap
import os
import platform
import random
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import crc

ALL_IMPLS = ("vpclmul", "pclmul", "armv8-crc", "table")
crc._force_impl("auto")
IMPLS = crc.implementations()
AUTO_IMPL = crc.implementation()

# Lengths around the 16-byte block, the 32-byte register and 64-byte 4-lane folds, the
# 128-byte 4-register round and the table's 16-byte stride.
_BLOCKS = (0, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 1024, 4096)
BOUNDARY_LENGTHS = sorted({n + d for n in _BLOCKS for d in (-1, 0, 1)} - {-1})
U32 = st.integers(min_value=0, max_value=2**32 - 1)


@contextlib.contextmanager
def use_impl(name: str) -> Iterator[None]:
    crc._force_impl(name)
    try:
        assert crc.implementation() == name
        yield
    finally:
        crc._force_impl("auto")


def _rand(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# ---------------------------------------------------------------------------------------
# implementation selection


def test_hardware_path_selected_when_cpu_has_it() -> None:
    machine = platform.machine().lower()
    flags = _cpu_flags()
    if machine in ("x86_64", "amd64") and {"vpclmulqdq", "avx2", "pclmulqdq", "sse4_1"} <= flags:
        assert AUTO_IMPL == "vpclmul"
        assert IMPLS == ["vpclmul", "pclmul", "table"]
    elif machine in ("x86_64", "amd64") and {"pclmulqdq", "sse4_1"} <= flags:
        assert AUTO_IMPL == "pclmul"
    elif machine in ("aarch64", "arm64") and ("crc32" in flags or sys.platform == "darwin"):
        assert AUTO_IMPL == "armv8-crc"
    else:
        assert AUTO_IMPL in ALL_IMPLS


def test_implementations_lists_what_force_impl_takes_fastest_first() -> None:
    assert IMPLS[0] == AUTO_IMPL and IMPLS[-1] == "table"
    for name in ALL_IMPLS:
        try:
            crc._force_impl(name)
            taken = True
        except ValueError as exc:
            assert "not supported" in str(exc)
            taken = False
        finally:
            crc._force_impl("auto")
        assert taken == (name in IMPLS), name


def test_force_impl_rejects_unknown_and_unsupported() -> None:
    with pytest.raises(ValueError, match="unknown"):
        crc._force_impl("crc64")
    other = "pclmul" if AUTO_IMPL == "armv8-crc" else "armv8-crc"
    with pytest.raises(ValueError, match="not supported"):
        crc._force_impl(other)
    assert crc.implementation() == AUTO_IMPL


@pytest.mark.parametrize("name", IMPLS)
def test_env_var_selects_impl_at_first_call(name: str) -> None:
    code = (
        "import zlib; from dledger._ext import crc; d = bytes(range(256)) * 999; "
        "assert crc.crc32(d, 7) == zlib.crc32(d, 7); print(crc.implementation())"
    )
    env = {**os.environ, "DLEDGER_CRC32_IMPL": name, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == name


# ---------------------------------------------------------------------------------------
# crc32 == zlib.crc32


@pytest.mark.parametrize("impl", IMPLS)
def test_known_vectors(impl: str) -> None:
    with use_impl(impl):
        assert crc.crc32(b"") == 0
        assert crc.crc32(b"", 0xDEADBEEF) == 0xDEADBEEF
        assert crc.crc32(b"123456789") == 0xCBF43926
        assert crc.crc32(b"\x00" * 64) == zlib.crc32(b"\x00" * 64)
        assert crc.crc32(b"\xff" * 4096) == zlib.crc32(b"\xff" * 4096)


@pytest.mark.parametrize("impl", IMPLS)
@given(data=st.binary(max_size=300), value=U32)
def test_small_random(impl: str, data: bytes, value: int) -> None:
    with use_impl(impl):
        assert crc.crc32(data) == zlib.crc32(data)
        assert crc.crc32(data, value) == zlib.crc32(data, value)


@pytest.mark.parametrize("impl", IMPLS)
@given(
    length=st.sampled_from(BOUNDARY_LENGTHS),
    offset=st.integers(0, 31),
    seed=st.integers(0, 2**32),
    value=U32,
)
def test_fold_boundaries_unaligned(impl: str, length: int, offset: int, seed: int, value: int) -> None:
    raw = _rand(length + 32, seed)
    view = memoryview(raw)[offset : offset + length]
    expected = zlib.crc32(view, value)
    with use_impl(impl):
        assert crc.crc32(view, value) == expected


@pytest.mark.parametrize("impl", IMPLS)
def test_every_length_and_alignment_exhaustive(impl: str) -> None:
    raw = _rand(600, 1)
    with use_impl(impl):
        for offset in range(17):
            for length in range(0, 600 - offset, 1 if offset == 0 else 7):
                view = memoryview(raw)[offset : offset + length]
                assert crc.crc32(view, length) == zlib.crc32(view, length), (offset, length)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [65536, 65536 + 15, (1 << 20) + 3, 4 << 20])
def test_large_buffers(impl: str, size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    with use_impl(impl):
        assert crc.crc32(data) == zlib.crc32(data)
        assert crc.crc32(data, 0x12345678) == zlib.crc32(data, 0x12345678)


@pytest.mark.parametrize("impl", IMPLS)
@given(data=st.binary(max_size=2000), cuts=st.lists(st.integers(0, 2000), max_size=5), value=U32)
def test_continuation_over_chunks(impl: str, data: bytes, cuts: list[int], value: int) -> None:
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    with use_impl(impl):
        running = value
        for a, b in itertools.pairwise(bounds):
            running = crc.crc32(data[a:b], running)
    assert running == zlib.crc32(data, value)


@given(value=st.integers(min_value=-(2**70), max_value=2**70))
def test_value_is_reduced_mod_2_32_like_zlib(value: int) -> None:
    assert crc.crc32(b"dledger", value) == zlib.crc32(b"dledger", value)


def test_value_must_be_an_integer() -> None:
    with pytest.raises(TypeError):
        crc.crc32(b"x", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        crc.crc32(b"x", "1")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# buffer types


def _buffers(raw: bytes) -> list[Any]:
    out: list[Any] = [
        raw,
        bytearray(raw),
        memoryview(raw),
        memoryview(bytearray(raw)).toreadonly(),
        np.frombuffer(raw, dtype=np.uint8),
        np.frombuffer(raw, dtype=np.uint8).copy(),
    ]
    if len(raw) % 8 == 0:
        out += [
            np.frombuffer(raw, dtype=np.float64),  # any dtype: the bytes are what counts
            np.frombuffer(raw, dtype=np.uint32).reshape(-1, 2),  # C-contiguous 2-D
            array.array("Q", raw),
            memoryview(raw).cast("Q"),
        ]
    return out


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [0, 8, 64, 200, 4096, 70000])
def test_all_buffer_types(impl: str, size: int) -> None:
    raw = _rand(size, size)
    with use_impl(impl):
        for buf in _buffers(raw):
            assert crc.crc32(buf, 99) == zlib.crc32(raw, 99), type(buf)


@pytest.mark.parametrize("impl", IMPLS)
def test_mmap(impl: str, tmp_path: object) -> None:
    raw = _rand(100_003, 5)
    with mmap.mmap(-1, len(raw)) as m:
        m.write(raw)
        with use_impl(impl):
            assert crc.crc32(m) == zlib.crc32(raw)
            assert crc.crc32(memoryview(m)[3:77_777]) == zlib.crc32(raw[3:77_777])


def test_non_contiguous_buffers_raise_buffer_error() -> None:
    raw = _rand(4096)
    a2 = np.frombuffer(raw, dtype=np.uint8).reshape(64, 64)
    for bad in (memoryview(raw)[::2], a2[:, 0], a2.T, np.asfortranarray(a2)):
        with pytest.raises(BufferError, match="C-contiguous"):
            crc.crc32(bad)
        with pytest.raises(BufferError, match="C-contiguous"):
            crc.crc32_many(bad, [0], [1])


def test_non_buffers_raise_type_error() -> None:
    for bad in ("text", None, 123, [1, 2, 3]):
        with pytest.raises(TypeError, match="bytes-like"):
            crc.crc32(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="bytes-like"):
            crc.crc32_many(bad, [0], [0])  # type: ignore[arg-type]


def test_concurrent_threads_agree() -> None:
    data = [_rand(300_000 + i, i) for i in range(4)]
    expected = [zlib.crc32(d) for d in data]
    results: list[list[int]] = [[] for _ in data]

    def work(i: int) -> None:
        for _ in range(20):
            results[i].append(crc.crc32(data[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(data))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in enumerate(results):
        assert r == [expected[i]] * 20


# ---------------------------------------------------------------------------------------
# crc32_many


@st.composite
def _buffer_and_slices(draw: st.DrawFn) -> tuple[bytes, list[int], list[int]]:
    buf = draw(st.binary(max_size=3000))
    n = len(buf)
    pairs = draw(
        st.lists(
            st.integers(0, n).flatmap(lambda o: st.tuples(st.just(o), st.integers(0, n - o))),
            max_size=40,
        )
    )
    return buf, [o for o, _ in pairs], [ln for _, ln in pairs]


@pytest.mark.parametrize("impl", IMPLS)
@given(case=_buffer_and_slices())
@settings(max_examples=200)
def test_crc32_many_matches_loop(impl: str, case: tuple[bytes, list[int], list[int]]) -> None:
    buf, offsets, lengths = case
    oracle = [zlib.crc32(buf[o : o + ln]) for o, ln in zip(offsets, lengths, strict=True)]
    with use_impl(impl):
        got = crc.crc32_many(buf, np.array(offsets, dtype=np.int64), np.array(lengths, dtype=np.int64))
    assert got.dtype == np.uint32
    assert got.shape == (len(offsets),)
    assert got.tolist() == oracle


def test_crc32_many_accepts_lists_and_other_int_dtypes() -> None:
    buf = bytearray(_rand(10_000, 3))
    offs, lens = [0, 17, 5000, 10_000], [10_000, 4000, 0, 0]
    oracle = [zlib.crc32(buf[o : o + ln]) for o, ln in zip(offs, lens, strict=True)]
    assert crc.crc32_many(buf, offs, lens).tolist() == oracle
    for dt in (np.int32, np.uint32, np.uint64, np.int16):
        got = crc.crc32_many(buf, np.array(offs, dtype=np.int64).astype(dt), np.array(lens).astype(dt))
        assert got.tolist() == oracle
    assert crc.crc32_many(np.frombuffer(bytes(buf), dtype=np.uint16), offs, lens).tolist() == oracle


def test_crc32_many_empty() -> None:
    out = crc.crc32_many(b"abc", [], [])
    assert out.dtype == np.uint32 and out.shape == (0,)
    out = crc.crc32_many(b"", np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert out.shape == (0,)
    assert crc.crc32_many(b"", [0], [0]).tolist() == [0]


@pytest.mark.parametrize(
    ("offsets", "lengths", "bad_index"),
    [
        ([0, -1], [1, 1], 1),  # negative offset
        ([0, 0], [1, -5], 1),  # negative length
        ([90], [11], 0),  # runs past the end
        ([101], [0], 0),  # starts past the end
        ([0, 1, 2], [1, 1, 2**63 - 1], 2),  # offset + length overflows int64
        ([0], [2**63 - 1], 0),
    ],
)
def test_crc32_many_bounds_errors(offsets: list[int], lengths: list[int], bad_index: int) -> None:
    with pytest.raises(ValueError, match=rf"slice {bad_index} .*out of bounds for a buffer of 100 bytes"):
        crc.crc32_many(bytes(100), offsets, lengths)


def test_crc32_many_uint64_wraparound_is_rejected() -> None:
    with pytest.raises(ValueError, match="out of bounds"):
        crc.crc32_many(bytes(100), np.array([2**64 - 1], dtype=np.uint64), [1])


def test_crc32_many_shape_and_dtype_errors() -> None:
    buf = bytes(100)
    with pytest.raises(ValueError, match="differ in length"):
        crc.crc32_many(buf, [0, 1], [1])
    with pytest.raises(ValueError, match="1-D"):
        crc.crc32_many(buf, [[0]], [[1]])
    with pytest.raises(ValueError, match="1-D"):
        crc.crc32_many(buf, 0, 1)
    with pytest.raises(TypeError, match="integer array"):
        crc.crc32_many(buf, [0.0], [1])
    with pytest.raises(TypeError, match="integer array"):
        crc.crc32_many(buf, [0], [True])
