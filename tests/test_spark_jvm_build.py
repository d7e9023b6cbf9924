"""The ``rocketmq-jvm`` jar's build (``dledger.spark.jvm_build``): a jar holding the format's
service registration, named by its sources so a current one is reused, and a clear error naming
the JDK when javac is missing."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from dledger.spark.jvm import SOURCES
from dledger.spark.jvm_build import JarBuildError, build_jar

pytestmark = pytest.mark.spark


def test_the_jar_registers_the_format_and_is_reused(tmp_path: Path) -> None:
    jar = build_jar(SOURCES, tmp_path)
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        service = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
    assert service.strip() == "io.dledger.spark.RocketMQJvmSource"
    assert "io/dledger/spark/RocketMQJvmSource.class" in names
    built = jar.stat().st_mtime_ns
    assert build_jar(SOURCES, tmp_path) == jar and jar.stat().st_mtime_ns == built
    # A changed source is another jar.
    copy = tmp_path / "spark-jvm"
    shutil.copytree(SOURCES, copy)
    (copy / "src" / "main" / "resources" / "extra.txt").write_text("x")
    other = build_jar(copy, tmp_path / "other")
    assert other.name != jar.name


def test_without_javac_the_error_names_the_jdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac on it
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JarBuildError, match=r"javac.*openjdk-17-jdk-headless"):
        build_jar(SOURCES, tmp_path / "out")
    assert not list((tmp_path / "out").glob("*.jar"))
