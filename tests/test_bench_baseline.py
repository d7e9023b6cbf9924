"""The benchmarks without their baseline installed: they say which extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_cluster_bench_without_pysyncobj_names_the_bench_extra(tmp_path: Path):
    # Hidden even where it is installed: an import of it fails as a missing module's would.
    (tmp_path / "pysyncobj.py").write_text("raise ImportError(\"No module named 'pysyncobj'\")\n")
    path = [str(tmp_path), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "bench/test_bench_cluster.py", "-k", "sync_append", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stdout[-3000:]
    assert "PySyncObj, the cluster benchmarks' baseline, is not installed: install the bench extra" in res.stdout
    assert "CalledProcessError" not in res.stdout
