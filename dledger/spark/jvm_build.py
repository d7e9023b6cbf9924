"""Build of the ``rocketmq-jvm`` format's jar from ``spark-jvm/`` (Java 17, compiled against
pyspark's own jars). Standard library only: ``setup.py`` loads this file by path, without
importing ``dledger``.

The jar is named by a hash of its sources and of the pyspark version, so a changed source or a
new pyspark builds a new jar and a current one is never rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

JAR_STEM = "dledger-spark-jvm"
JAVA_RELEASE = "17"


class JarBuildError(RuntimeError):
    """The jar cannot be built here (the message says what is missing)."""


def source_files(sources: Path) -> list[Path]:
    """The Java sources and resources under ``sources`` (``spark-jvm/``), in a stable order."""
    return sorted(p for p in (sources / "src" / "main").rglob("*") if p.is_file())


def pyspark_jars() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise JarBuildError(
            "the rocketmq-jvm jar is compiled against pyspark's jars: pip install 'pyspark>=4.0'"
        ) from exc
    return Path(pyspark.__file__).parent / "jars"


def jar_name(sources: Path, spark_version: str) -> str:
    h = hashlib.sha256(spark_version.encode())
    for p in source_files(sources):
        h.update(str(p.relative_to(sources)).encode() + b"\0" + p.read_bytes() + b"\0")
    return f"{JAR_STEM}-{h.hexdigest()[:16]}.jar"


def find_javac() -> str:
    javac = shutil.which("javac")
    if javac is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "javac"
        javac = str(candidate) if candidate.is_file() else None
    if javac is None:
        raise JarBuildError(
            "the rocketmq-jvm format's jar needs javac (a JDK 17, not only a JRE: "
            "apt-get install openjdk-17-jdk-headless); format 'rocketmq' (the Python source) needs no JDK"
        )
    return javac


def build_jar(sources: Path, out_dir: Path, drop_others: bool = True) -> Path:
    """The jar of ``sources`` in ``out_dir``, compiled now unless a current one is there;
    ``drop_others`` removes the jars of older sources from ``out_dir``."""
    jars = pyspark_jars()
    import pyspark

    out = out_dir / jar_name(sources, pyspark.__version__)
    if out.is_file():
        return out
    javac = find_javac()
    out_dir.mkdir(parents=True, exist_ok=True)
    java_files = [str(p) for p in source_files(sources) if p.suffix == ".java"]
    with tempfile.TemporaryDirectory(prefix="dledger-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run(
            [javac, "--release", JAVA_RELEASE, "-nowarn", "-cp", f"{jars}{os.sep}*", "-d", str(classes), *java_files],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise JarBuildError(f"javac failed building the rocketmq-jvm jar:\n{done.stderr or done.stdout}")
        resources = sources / "src" / "main" / "resources"
        partial = Path(tmp) / out.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: dledger\r\n\r\n")
            for root, tree in ((classes, classes), (resources, resources)):
                for p in sorted(tree.rglob("*")):
                    if p.is_file():
                        z.write(p, str(p.relative_to(root)))
        # Moved into place whole: a concurrent build or reader never sees half a jar.
        shutil.move(str(partial), str(out) + ".tmp")
        os.replace(str(out) + ".tmp", out)
    for old in out_dir.glob(f"{JAR_STEM}-*.jar") if drop_others else ():
        if old != out:
            old.unlink(missing_ok=True)
    return out
