"""Packaging: the sdist builds and installs, wheels target what we promise, no silent fallback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_cibuildwheel_targets():
    pytest.importorskip("cibuildwheel", reason="cibuildwheel is in the dev extra")
    expected = {
        "linux": {f"cp3{v}-manylinux_{a}" for v in (10, 11, 12, 13) for a in ("x86_64", "aarch64")},
        "macos": {f"cp3{v}-macosx_{a}" for v in (10, 11, 12, 13) for a in ("x86_64", "arm64")},
    }
    for platform, want in expected.items():
        out = subprocess.run(
            [sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", platform],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.split()
        assert set(out) == want, (platform, out)


def test_wheels_workflow_is_the_one_github_runs():
    assert (REPO / "wheels.yml").read_bytes() == (REPO / ".github" / "workflows" / "wheels.yml").read_bytes()


def test_version_is_single_sourced():
    from importlib.metadata import version

    import dledger

    assert version("dledger") == dledger.__version__


# Extras a module may need; without them only that module may fail to import.
OPTIONAL = {"pyarrow", "pyspark", "pysyncobj", "pytest_benchmark"}


def test_every_module_imports():
    # Runs on every supported Python in CI: a module that uses what its Python lacks fails here.
    import importlib
    import pkgutil

    import dledger

    failed = {}
    for mod in pkgutil.walk_packages(dledger.__path__, "dledger."):
        try:
            importlib.import_module(mod.name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in OPTIONAL:
                failed[mod.name] = repr(e)
        except Exception as e:
            failed[mod.name] = repr(e)
    assert not failed


def test_import_without_extension_says_how_to_build(tmp_path: Path):
    shutil.copytree(
        REPO / "dledger", tmp_path / "dledger", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    )

    def run(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-P", "-c", code],
            cwd=tmp_path,
            env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )

    # Every store needs the kernels, the memory store too: the entry layout (sizes, magic
    # numbers) comes from them, so the consensus layer above it does as well.
    for module in ("dledger.store.file", "dledger.store.memory", "dledger.rocketmq.store.message_store"):
        res = run(f"import {module}")
        assert res.returncode != 0, module
        assert "ImportError" in res.stderr and "pip install" in res.stderr and "build_ext --inplace" in res.stderr
    # The package and its configuration still import, so what fails can say how to build.
    ok = run("import dledger, dledger.config, dledger.errors")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.timeout(900)
def test_sdist_installs_and_works(tmp_path: Path):
    pytest.importorskip("build", reason="build is in the dev extra")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path / "dist"), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (sdist,) = (tmp_path / "dist").glob("dledger-*.tar.gz")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(sdist)], check=True, capture_output=True, timeout=800)
    script = (
        "import sys; from dledger.store.file import MmapFileStore\n"
        "with MmapFileStore(sys.argv[1]) as s:\n"
        "    s.append_batch([b'a', b'b'], 1)\n"
        "    assert s.get(1).body == b'b'\n"
        "print('ok')\n"
    )
    # The store goes under tmp_path, so pytest removes it: a 1 GiB data file left in the system's
    # temporary directory by every run adds up.
    store = tmp_path / "store" / "dledger-n0"
    res = subprocess.run(
        [str(py), "-P", "-c", script, str(store)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.stdout.strip() == "ok", res.stderr
