"""Self-describing checkpoints, loaded as untrusted input.

A checkpoint is a plain dict of tensors and JSON-like values (no pickled
objects), read with ``torch.load(..., weights_only=True)``. :func:`load_checkpoint`
refuses anything hostile before it can cost memory or time, in this order:

1. the file: size limit, a zip archive whose entries are all stored uncompressed
   with honest sizes (no zip bombs), a bounded pickle;
2. the payload: exact top-level keys; ``family`` one of :data:`~.zoo.FAMILIES`
   (``"groupnet"`` when absent: checkpoints written before CNV); ``metrics``/``dataset``/
   ``train``/``versions`` plain JSON values (``build`` writes metrics into report.json);
3. ``config`` and ``quant``: strict types and ranges (the family's config class,
   :class:`GroupNetConfig` or :class:`~.cnv.CNVConfig`, and :class:`QuantConfig`),
   before any model exists;
4. the weights against the declared architecture, built on the meta device (no
   memory): names, shapes, dtypes, bytes really stored, then finite and bounded
   values and non-negative BN variances;
5. only then the real model, and its fixed-point constants: each must stay below
   ``2**MAX_CONSTANT_BITS`` (worst-case intermediates against int64 are bounded
   by the compiler's range analysis, which ``build`` and ``verify`` run).

Every refusal is a :class:`CheckpointError` with a one-line message naming the
file and the offending field.
"""

from __future__ import annotations

import math
import os
import pickle
import zipfile

import torch

from .groupnet import GroupNet
from .layers import BatchNorm
from .quantize import ConfigError, QuantConfig, show_value
from .zoo import FAMILIES, family_of

__all__ = ["FORMAT", "CheckpointError", "save_checkpoint", "load_checkpoint",
           "MAX_FILE_BYTES", "MAX_PICKLE_BYTES", "MAX_ZIP_ENTRIES", "MAX_WEIGHT_MAGNITUDE",
           "MAX_CONSTANT_BITS"]

FORMAT = "groupnet-hw/checkpoint/1"

#: Largest checkpoint file accepted; far above the largest model the limits of
#: :class:`GroupNetConfig` make sense for on the target FPGA.
MAX_FILE_BYTES = 2 * 1024 ** 3
#: Largest pickle (``data.pkl``) entry. torch's weights-only unpickler is pure Python
#: (about 1 s per MiB here), so this bounds the time a hostile file can cost; a real
#: one holds ~120 bytes per tensor (a K=16 ResNet-34: ~3,200 tensors, ~400 kB).
MAX_PICKLE_BYTES = 1024 ** 2
#: Largest number of zip entries (one per tensor; the largest architecture has ~6,000).
MAX_ZIP_ENTRIES = 20_000
#: Largest |weight| or BN statistic: trained values are O(1..100); beyond this the
#: fixed-point fold loses all precision or overflows.
MAX_WEIGHT_MAGNITUDE = 1e6
#: Largest magnitude of a fixed-point constant (post-op multipliers and offsets,
#: lambdas, gates, classifier): keeps every hardware width bounded.
MAX_CONSTANT_BITS = 40
#: Largest fractional bits of a batch norm's output (calibration picks at most 16).
MAX_ACT_FRAC = 24
#: Metadata (metrics, dataset, train, versions): nesting depth, total values, and
#: string length. Real metadata has depth 1 and a dozen values.
MAX_META_DEPTH = 8
MAX_META_ITEMS = 10_000
MAX_META_STRING = 4096

_REQUIRED = ("format", "config", "quant", "state_dict")
_METADATA = ("dataset", "metrics", "train", "versions")
#: Absent in checkpoints written before the CNV family existed: those are Group-Nets.
_FAMILY = "family"
_DEFAULT_FAMILY = "groupnet"
_FLOAT_DTYPES = (torch.float32, torch.float64)
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line saying why."""


def _versions():
    import amaranth
    import numpy
    import groupnet_hw
    return {"groupnet_hw": groupnet_hw.__version__, "torch": str(torch.__version__),
            "numpy": str(numpy.__version__), "amaranth": str(amaranth.__version__)}


def save_checkpoint(path, model: GroupNet, *, dataset=None, metrics=None, train_config=None):
    """Write ``model`` (a network of any family in :data:`~.zoo.FAMILIES`) with everything
    needed to rebuild it; atomic (temp file + rename)."""
    payload = {
        "format": FORMAT,
        _FAMILY: family_of(model),
        "config": model.config.to_dict(),
        "quant": model.quant.to_dict(),
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "dataset": dataset or {},
        "metrics": metrics or {},
        "train": train_config or {},
        "versions": _versions(),
    }
    path = os.fspath(path)
    tmp = path + ".partial"
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _gib(n):
    return f"{n / 1024 ** 3:.2f} GiB"


def _check_archive(path):
    """Refuse, before torch reads anything, files whose reading could explode.

    torch.save writes a zip of *stored* (uncompressed) entries. A compressed entry,
    one whose declared size differs from its stored size, or entries that add up to
    more than the file (overlapping entries) is a zip bomb, not a checkpoint.
    """
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise CheckpointError(f"{path}: file is {size:,} bytes; a checkpoint may have at most "
                              f"{MAX_FILE_BYTES:,} ({_gib(MAX_FILE_BYTES)})")
    with open(path, "rb") as fp:
        magic = fp.read(4)
        if magic[:1] == b"\x80":
            raise CheckpointError(f"{path}: legacy (non-zip) torch.save format is refused; "
                                  "re-save it with torch.save's default zip format")
        try:
            # the end record alone gives the entry count: refuse a huge central
            # directory before zipfile builds an object per entry (private but
            # long-stable helper of zipfile)
            end = zipfile._EndRecData(fp)
        except Exception:  # any malformed tail means: not a zip we accept
            end = None
    if magic != b"PK\x03\x04" or not end:
        raise CheckpointError(f"{path}: corrupted or not a PyTorch checkpoint "
                              "(not a zip archive)")
    if end[zipfile._ECD_ENTRIES_TOTAL] > MAX_ZIP_ENTRIES:
        raise CheckpointError(f"{path}: zip archive has {end[zipfile._ECD_ENTRIES_TOTAL]} entries; "
                              f"a checkpoint has at most {MAX_ZIP_ENTRIES}")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except Exception as exc:  # BadZipFile, OSError, struct.error, ... on malformed archives
        msg = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise CheckpointError(f"{path}: corrupted or not a PyTorch checkpoint ({msg})") from None
    total = 0
    for info in infos:
        name = show_value(info.filename, 60)
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{path}: zip entry {name} is compressed; torch.save "
                                  "writes stored entries only (refusing a possible zip bomb)")
        if info.file_size != info.compress_size:
            raise CheckpointError(f"{path}: zip entry {name} declares {info.file_size} bytes "
                                  f"but stores {info.compress_size} (refusing a possible zip bomb)")
        if info.filename.endswith("data.pkl") and info.file_size > MAX_PICKLE_BYTES:
            raise CheckpointError(f"{path}: zip entry {name} is {info.file_size} bytes; "
                                  f"allowed at most {MAX_PICKLE_BYTES}")
        total += info.file_size
    if total > size:
        raise CheckpointError(f"{path}: zip entries declare {total} bytes, more than the "
                              f"{size}-byte file (overlapping entries; refusing a zip bomb)")
    return size


def _check_plain(value, where, depth, budget):
    """Refuse anything but JSON values: str keys; str, int, float, bool, None, and
    lists and dicts of them, bounded in depth, count and string length."""
    budget[0] -= 1
    if budget[0] < 0:
        raise CheckpointError(f"{where}: more than {MAX_META_ITEMS} values in the metadata")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if value.bit_length() > 63:  # json.dumps of a huge int can fail or take long
            raise CheckpointError(f"{where} is an integer of {value.bit_length()} bits; "
                                  "allowed a 64-bit integer")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CheckpointError(f"{where} = {value!r}; allowed a finite number (JSON)")
        return
    if isinstance(value, str):
        if len(value) > MAX_META_STRING:
            raise CheckpointError(f"{where} is a string of {len(value)} characters; "
                                  f"allowed at most {MAX_META_STRING}")
        return
    if isinstance(value, (list, tuple, dict)):
        if depth >= MAX_META_DEPTH:
            raise CheckpointError(f"{where} is nested deeper than {MAX_META_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or len(key) > 256:
                    raise CheckpointError(f"{where} has the key {show_value(key)}; "
                                          "allowed string keys (JSON)")
                name = key if key.isidentifier() else show_value(key, 40)
                _check_plain(item, f"{where}.{name}", depth + 1, budget)
        else:
            for i, item in enumerate(value):
                _check_plain(item, f"{where}[{i}]", depth + 1, budget)
        return
    kind = "a tensor" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
    raise CheckpointError(f"{where} is {kind}; allowed plain JSON values (str, int, float, "
                          "bool, None, and lists and dicts of them)")


def _check_tensors(path, state, expected, file_size):
    """Weights against the (meta-device) state dict of the declared architecture."""
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        what = f"missing {missing[:3]}" if missing else \
            f"unexpected {[show_value(k, 60) for k in extra[:3]]}"
        raise CheckpointError(f"{path}: weights do not match the declared architecture ({what})")
    stored = 0
    for name, ref in expected.items():
        value = state[name]
        if value.shape != ref.shape:
            raise CheckpointError(f"{path}: {name} has shape {tuple(value.shape)}, "
                                  f"the architecture needs {tuple(ref.shape)}")
        allowed = _FLOAT_DTYPES if ref.dtype.is_floating_point else _INT_DTYPES
        if value.dtype not in allowed:
            names = ", ".join(str(d).replace("torch.", "") for d in allowed)
            found = str(value.dtype).replace("torch.", "")
            raise CheckpointError(f"{path}: {name} has dtype {found}; allowed {names}")
        stored += math.prod(value.shape) * value.element_size()
    # Shapes alone do not prove the data is there: a stride-0 view of one stored
    # number has any shape. The real model needs as many bytes as the weights claim.
    if stored > file_size:
        raise CheckpointError(f"{path}: the weights claim {stored} bytes but the file has "
                              f"{file_size}; tensors must be stored, not broadcast views")
    for name, value in state.items():
        if value.dtype.is_floating_point:
            if not torch.isfinite(value).all():
                raise CheckpointError(f"{path}: {name} contains NaN or infinite values")
            peak = float(value.abs().max()) if value.numel() else 0.0
            if peak > MAX_WEIGHT_MAGNITUDE:
                raise CheckpointError(f"{path}: {name} has a value of magnitude {peak:.3g}; "
                                      f"allowed at most {MAX_WEIGHT_MAGNITUDE:g}")
            if name.endswith("running_var") and value.numel() and float(value.min()) < 0:
                raise CheckpointError(f"{path}: {name} has a negative variance "
                                      f"{float(value.min()):.3g}; allowed >= 0")
        elif value.numel() and int(value.min()) < 0:
            raise CheckpointError(f"{path}: {name} = {int(value.min())}; allowed >= 0")


def fixed_point_constants(graph):
    """Every integer constant of a model's fixed-point forward, by node of its lowered
    ``graph``: the front end's lowering forms them with the layers' own quantization
    methods (no tensor is computed)."""
    return {node.name: {k: v for k, v in node.attrs.items()
                        if isinstance(v, (int, torch.Tensor)) and not isinstance(v, bool)}
            for node in graph}


def _check_fixed_point(path, params):
    """Bound every fixed-point constant, so hardware widths stay bounded. (Worst-case
    intermediates against int64 are the compiler's range analysis: ``build`` and
    ``verify`` refuse a network whose integer forward could wrap.)"""
    limit = 1 << MAX_CONSTANT_BITS
    for layer, entry in params.items():
        for key, value in entry.items():
            peak = int(value.abs().max()) if isinstance(value, torch.Tensor) and value.numel() \
                else abs(int(value)) if not isinstance(value, torch.Tensor) else 0
            if peak > limit:
                name = f"{layer}.{key}" if key else layer
                raise CheckpointError(f"{path}: fixed-point constant {name} reaches "
                                      f"2**{peak.bit_length() - 1}; allowed at most "
                                      f"2**{MAX_CONSTANT_BITS} (weights, BN statistics or quant "
                                      "settings are too extreme)")


def load_checkpoint(path, *, with_graph=False):
    """Load and validate a checkpoint; returns ``(model in eval mode, payload dict)``,
    and with ``with_graph`` the model lowered to the integer graph as a third item (the
    validation lowers it to bound its constants: a build need not lower it again).

    Nothing is allocated in proportion to what the checkpoint *declares* before it
    is checked against what the file *holds* (see the module docstring).

    Raises
    ------
    CheckpointError
        missing file, not a checkpoint, oversized or zip-bomb archive, pickled
        objects, foreign format, unknown family, invalid or out-of-range architecture
        or quant settings, non-JSON metadata, architecture/weights mismatch,
        non-finite or extreme weights, fixed-point constants beyond 2**40.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CheckpointError(f"{path}: is a directory, expected a .pt checkpoint")
    file_size = _check_archive(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = " ".join(str(exc).split()[:20]) or "unsafe content"
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise CheckpointError(f"{path}: refuses to load pickled Python objects "
                                  "(only tensors and plain values are accepted)") from None
        raise CheckpointError(f"{path}: not a readable checkpoint ({first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: corrupted or not a PyTorch checkpoint ({msg})") from None
    except Exception as exc:  # torch raises assorted types for malformed archives
        raise CheckpointError(f"{path}: corrupted or not a PyTorch checkpoint "
                              f"({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"{path}: not a groupnet-hw checkpoint (format "
                              f"{show_value(found)}, expected {FORMAT!r}); create one with "
                              "`groupnet-hw train`")
    known = _REQUIRED + (_FAMILY,) + _METADATA
    for key in payload:
        if key not in known:
            raise CheckpointError(f"{path}: unknown top-level entry {show_value(key)}; allowed: "
                                  f"{', '.join(known)}")
    for key in _REQUIRED:
        if key not in payload:
            raise CheckpointError(f"{path}: {key} is missing; a checkpoint needs "
                                  f"{', '.join(_REQUIRED)}")
    budget = [MAX_META_ITEMS]
    for key in _METADATA:
        value = payload.get(key, {})
        if not isinstance(value, dict):
            raise CheckpointError(f"{path}: {key} = {show_value(value)} has type "
                                  f"{type(value).__name__}; allowed a dict of JSON values")
        _check_plain(value, f"{path}: {key}", 0, budget)

    family = payload.get(_FAMILY, _DEFAULT_FAMILY)
    if not isinstance(family, str) or family not in FAMILIES:
        raise CheckpointError(f"{path}: family = {show_value(family)} is not one of: "
                              f"{', '.join(FAMILIES)}")
    config_cls, network_cls = FAMILIES[family]
    sections = {}
    for key, cls in (("config", config_cls), ("quant", QuantConfig)):
        try:
            sections[key] = cls.from_dict(payload[key])
        except ConfigError as exc:
            name = f"{key}.{exc.field}" if exc.field else key
            raise CheckpointError(f"{path}: {name} {exc.problem}") from None
    config, quant = sections["config"], sections["quant"]

    state = payload["state_dict"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: state_dict = {show_value(state)} has type "
                              f"{type(state).__name__}; allowed a dict of tensors")
    for name, value in state.items():
        if not isinstance(name, str):
            raise CheckpointError(f"{path}: state_dict has the key {show_value(name)}; "
                                  "allowed tensor names (strings)")
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided \
                or value.device.type != "cpu" or value.is_quantized or value.is_nested:
            what = "a tensor of another kind" if isinstance(value, torch.Tensor) \
                else f"type {type(value).__name__}"
            raise CheckpointError(f"{path}: {show_value(name, 80)} has {what}; "
                                  "allowed a dense CPU tensor")
    # The declared architecture on the meta device: names, shapes and dtypes
    # without allocating a byte of weights.
    with torch.device("meta"):
        model = network_cls(config, quant)
    expected = model.state_dict()
    _check_tensors(path, state, expected, file_size)
    # The checked weights become the model's own (assigned, not copied into randomly
    # initialised ones: a full-size ResNet-34's initialisation took 2 s), each a fresh
    # contiguous tensor of the architecture's dtype, as a copy would make it.
    owned = {name: value.to(dtype=expected[name].dtype, memory_format=torch.contiguous_format,
                            copy=True) for name, value in state.items()}
    try:
        model.load_state_dict(owned, assign=True)
    except (RuntimeError, ValueError) as exc:  # checked above; kept one line regardless
        raise CheckpointError(f"{path}: weights do not load ({' '.join(str(exc).split())[:200]})") \
            from None
    model.eval()
    for name, module in model.named_modules():
        if isinstance(module, BatchNorm):
            frac = int(module.out_frac)
            if not 0 <= frac <= MAX_ACT_FRAC:
                raise CheckpointError(f"{path}: {name}.out_frac = {frac} is out of range; "
                                      f"allowed 0..{MAX_ACT_FRAC}")
    from ..compiler.frontend import lower
    try:
        # a constant that cannot be formed (non-finite, int64 overflow) raises here,
        # its message starting with the layer
        graph = lower(model)
    except (ValueError, OverflowError) as exc:
        raise CheckpointError(f"{path}: fixed-point constants cannot be formed: "
                              f"{' '.join(str(exc).split())}") from None
    _check_fixed_point(path, fixed_point_constants(graph))
    return (model, payload, graph) if with_graph else (model, payload)
