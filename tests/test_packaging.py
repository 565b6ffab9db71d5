"""The wheel holds every file the package reads at run time (no wheel is built here).

An editable install reads data files from the checkout, so a file missing from
``[tool.setuptools.package-data]`` only shows in a regular install (``pip install .``):
``groupnet-hw build`` then dies on a missing ``resource_model.json``. These checks read
pyproject.toml and the source folders the way setuptools does (package-data patterns
are globs relative to the package's folder); ``.ci/wheel_check`` builds the real wheel
and runs the CLI from it.
"""

import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGES = CONFIG["packages"]
PACKAGE_DIR = CONFIG["package-dir"]
PACKAGE_DATA = CONFIG.get("package-data", {})

# a data file named in the source beside a module:
# files(__package__) / "x", files("groupnet_hw.y").joinpath("x"), Path(__file__).with_name("x"),
# Path(__file__).parent / "x"
_REFERENCE = re.compile(
    r"""files\(\s*(?P<pkg>__package__|["'][\w.]+["'])\s*\)\s*(?:/|\.joinpath\()\s*["'](?P<a>[^"']+)["']"""
    r"""|Path\(__file__\)(?:\.resolve\(\))?\s*(?:\.with_name\(|\.parent\s*/)\s*["'](?P<b>[^"']+)["']""")


def _folder(package):
    return ROOT / PACKAGE_DIR[package]


def _covered(package):
    """Files setuptools adds to ``package`` from its package-data patterns."""
    folder = _folder(package)
    return {p.resolve() for pattern in PACKAGE_DATA.get(package, []) + PACKAGE_DATA.get("*", [])
            for p in folder.glob(pattern) if p.is_file()}


def _own_files(package):
    """Files of ``package``'s folder, less those of its subpackages and caches."""
    folder = _folder(package)
    others = {_folder(p) for p in PACKAGES if p != package}
    out = []
    for path in folder.rglob("*"):
        parents = path.relative_to(folder).parents
        if any(folder / q in others or (folder / q).name == "__pycache__" for q in parents):
            continue
        if path.is_file():
            out.append(path)
    return out


def _references():
    """``[(package, source file, referenced name)]`` of every data file named in a module."""
    refs = []
    for package in PACKAGES:
        for source in _own_files(package):
            if source.suffix != ".py":
                continue
            for m in _REFERENCE.finditer(source.read_text()):
                pkg = m["pkg"]
                owner = package if pkg in (None, "__package__") else pkg.strip("\"'")
                refs.append((owner, source, m["a"] or m["b"]))
    return refs


def test_every_package_folder_is_listed():
    # each folder mapped in package-dir is a listed package, and every folder with an
    # __init__.py under a package folder or at the top level is mapped (a new subpackage
    # left out of `packages` is missing from the wheel)
    assert set(PACKAGE_DIR) == set(PACKAGES)
    mapped = {_folder(p).resolve() for p in PACKAGES}
    for package in PACKAGES:
        assert (_folder(package) / "__init__.py").is_file(), package
    candidates = {p.parent.resolve() for p in ROOT.glob("*/__init__.py")}
    for package in PACKAGES:
        candidates |= {p.parent.resolve() for p in _folder(package).rglob("__init__.py")}
    candidates = {c for c in candidates
                  if not {"build", "tests", "benchmarks", "docs"} & set(c.relative_to(ROOT).parts)}
    assert candidates <= mapped, sorted(str(c.relative_to(ROOT)) for c in candidates - mapped)


def test_every_data_file_is_package_data():
    # any non-Python file that sits in a package's folder is read by something: ship it
    missing = [str(path.relative_to(ROOT)) for package in PACKAGES
               for path in _own_files(package)
               if path.suffix not in (".py", ".pyc") and path.resolve() not in _covered(package)]
    assert not missing, f"not in [tool.setuptools.package-data] of pyproject.toml: {missing}"


def test_every_referenced_file_exists_and_is_package_data():
    refs = _references()
    # the scan still finds the known run-time files (so that it cannot pass by finding nothing)
    names = {(owner, name) for owner, _, name in refs}
    assert {("groupnet_hw.compiler", "resource_model.json"),
            ("groupnet_hw.sim", "stream_driver.cpp"),
            ("groupnet_hw.sim", "lint_waivers.vlt")} <= names
    for owner, source, name in refs:
        path = (_folder(owner) / name).resolve()
        where = f"{source.relative_to(ROOT)} reads {name}"
        assert path.is_file(), f"{where}: no such file"
        assert path in _covered(owner), f"{where}: not package data of {owner}"


def test_runtime_paths_resolve_inside_the_package():
    # the constants that name the data files point into the imported package's folders
    from groupnet_hw.compiler import resources
    from groupnet_hw.sim import fast_rtl, toolchain
    for path in (resources.MODEL_FILE, fast_rtl.DRIVER_SOURCE, toolchain.LINT_WAIVERS):
        assert path.is_file(), path
    assert resources.load_model()
