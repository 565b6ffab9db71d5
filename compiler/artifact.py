"""The build directory as a verifiable artifact.

``groupnet-hw build`` records in ``build.json`` what it built from and how: the
checkpoint's path and SHA-256, the board, every scheduling option, the Verilog
file with its top module, port widths and SHA-256, and the predicted cycles per
frame. ``groupnet-hw verify OUT_DIR`` reads it back, refuses a checkpoint that
changed since, recomputes the schedule with the recorded options and requires it
to equal ``schedule.json``, and then simulates the Verilog file that is on disk.
So what the report claims (folding, FIFO depths, cycles per frame) is what is
simulated.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MANIFEST", "FORMAT", "BuildError", "BuildManifest", "file_sha256",
           "write_manifest", "read_manifest"]

MANIFEST = "build.json"
FORMAT = "groupnet-hw/build/1"


class BuildError(ValueError):
    """A build directory that cannot be verified; the message is one line."""


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class BuildManifest:
    """Contents of ``build.json``.

    Attributes
    ----------
    checkpoint : str
        Absolute path of the checkpoint the build came from.
    checkpoint_sha256 : str
    board : str
    options : dict
        Scheduling options as passed to :func:`~groupnet_hw.compiler.schedule.schedule`
        (``target_cycles``).
    verilog : str
        File name of the core's Verilog inside the build directory.
    toplevel : str
    verilog_sha256 : str
    in_width, out_width : int
        Stream payload widths of the core.
    frame_cycles : int
        Predicted cycles per frame.
    backend : {"dataflow", "sequential"}
        Which back end the build used.
    image : str, optional
        The layer-sequential engine's memory image (program, parameters) inside the
        build directory; ``image_sha256`` its hash.
    """

    checkpoint: str
    checkpoint_sha256: str
    board: str
    options: dict
    verilog: str
    toplevel: str
    verilog_sha256: str
    in_width: int
    out_width: int
    frame_cycles: int
    backend: str = "dataflow"
    image: str | None = None
    image_sha256: str | None = None

    def to_dict(self):
        return {"format": FORMAT, **self.__dict__}


def write_manifest(directory, manifest: BuildManifest) -> None:
    Path(directory, MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2))


def read_manifest(directory) -> BuildManifest:
    """Read and check ``build.json`` of a build directory.

    Raises
    ------
    BuildError
        No manifest, a malformed one, a missing Verilog file, or a checkpoint that is
        gone or changed since the build.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise BuildError(f"{directory}: not a groupnet-hw build directory (no {MANIFEST}); "
                         "create one with `groupnet-hw build CHECKPOINT -o DIR`")
    try:
        raw = json.loads(path.read_text())
        if raw.pop("format", None) != FORMAT:
            raise ValueError("unknown format")
        manifest = BuildManifest(**raw)
    except (ValueError, TypeError, OSError) as exc:
        raise BuildError(f"{path}: unreadable build manifest ({exc}); rebuild") from None
    verilog = directory / manifest.verilog
    if not verilog.is_file():
        raise BuildError(f"{directory}: {manifest.verilog} is missing; rebuild")
    if not os.path.isfile(manifest.checkpoint):
        raise BuildError(f"{directory} was built from {manifest.checkpoint}, which no longer "
                         "exists; rebuild from the checkpoint you want verified")
    if file_sha256(manifest.checkpoint) != manifest.checkpoint_sha256:
        raise BuildError(f"{manifest.checkpoint} changed since {directory} was built from it "
                         f"(sha256 {manifest.checkpoint_sha256[:12]}...); rebuild with "
                         f"`groupnet-hw build {manifest.checkpoint} -o {directory}`")
    return manifest
