"""Build of the Cython kernels: every ``_ext/<name>.pyx`` becomes ``dledger._ext.<name>``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
EXT_DIR = "_ext"

compile_args = ["-O3"]
if sys.platform != "win32":
    compile_args += ["-fno-strict-aliasing", "-Wno-unused-function"]
if os.environ.get("DLEDGER_NATIVE") == "1":
    # Opt-in only: wheels must run on any CPU of their architecture.
    compile_args.append("-march=native")

extensions = [
    Extension(
        f"dledger._ext.{pyx.stem}",
        [str(Path(EXT_DIR) / pyx.name)],
        include_dirs=[EXT_DIR, numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args,
        # Listed so a change rebuilds, and so the sdist ships them.
        depends=sorted(str(p) for pattern in ("*.h", "*.pxi", "*.pyx") for p in Path(EXT_DIR).glob(pattern)),
    )
    for pyx in sorted((HERE / EXT_DIR).glob("*.pyx"))
]

if not extensions:
    # Never build a package without its kernels: it would fail at import, far from the cause.
    raise SystemExit(f"no Cython sources in {HERE / EXT_DIR}: the source tree is incomplete")


class BuildExtAndSparkJar(build_ext):
    """The kernels, then the ``rocketmq-jvm`` Spark format's jar from ``spark-jvm/`` when
    pyspark and javac are here (an isolated build has no pyspark: the jar is then built on
    first use, ``dledger.spark.jvm_jar``)."""

    def run(self) -> None:
        super().run()
        sources = HERE / "spark-jvm"
        if not sources.is_dir():
            return
        spec = importlib.util.spec_from_file_location("_dledger_jvm_build", HERE / "dledger" / "spark" / "jvm_build.py")
        assert spec is not None and spec.loader is not None
        jvm_build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(jvm_build)
        out = (HERE if self.inplace else Path(self.build_lib)) / "dledger" / "spark" / "jars"
        try:
            jar = jvm_build.build_jar(sources, out)
        except jvm_build.JarBuildError as exc:
            print(f"rocketmq-jvm jar not built now ({exc}); it is built on first use", file=sys.stderr)
            return
        print(f"rocketmq-jvm jar: {jar}")


setup(
    cmdclass={"build_ext": BuildExtAndSparkJar},
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
)
