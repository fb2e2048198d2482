"""The allow-list unpickler every model file goes through.

Model files are untrusted: a full (not weights-only) torch load of a whole-module pickle runs whatever
callables the pickle names. We read zip-format files with torch's own restricted unpickler
(``torch.load(weights_only=True)``), which by default builds only tensors, storages and plain
containers, and legacy-format files (torch <= 1.5) with our own reader and an unpickler holding the
same allow-list; never ``torch.load`` with full unpickling. We extend the allow-list by exactly the
classes a TrojAI Round 5/6 classifier pickle names (``model_factories.*`` and the ``torch.nn`` layers
inside them).

Those classes are not the real ones: each name maps to an inert :class:`PickledModule` stand-in that
only records the pickled ``__dict__``. No torch or project code runs while unpickling, not even
``nn.Module.__setstate__``; :mod:`trojanscope.models.trojai_format` then reads the recorded weights and
sizes and copies them into a freshly built trojanscope head. Any other global stops the load before
anything is called, with an :class:`~trojanscope.errors.UnsafeModelFileError` that names it.
"""

from __future__ import annotations

import _compat_pickle
import pickle
import re
import threading
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

from trojanscope.errors import ModelFileError, UnsafeModelFileError

# The classes (by pickled name) a TrojAI text-classifier pickle may contain, beyond torch's default
# tensor allow-list (tensor rebuild functions, storages, OrderedDict, set, Parameter).
MODEL_FACTORIES_CLASSES = ("GruLinearModel", "LstmLinearModel", "FCLinearModel", "LinearModel")
TORCH_LAYER_CLASSES = (
    "torch.nn.modules.rnn.GRU",
    "torch.nn.modules.rnn.LSTM",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.dropout.Dropout",
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.activation.ReLU",
)
ALLOWED_MODULE_CLASSES = tuple(f"model_factories.{n}" for n in MODEL_FACTORIES_CLASSES) + TORCH_LAYER_CLASSES

_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")
# torch's safe_globals list is process-wide; serialise our loads so two threads never race on it.
_LOCK = threading.Lock()


class PickledModule:
    """Inert stand-in for one pickled ``nn.Module``: its pickled class name and ``__dict__``, no behaviour."""

    pickled_name: ClassVar[str] = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledModule:  # NEWOBJ passes the pickled args
        return object.__new__(cls)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots) form of BUILD
            state = state[0]
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"state of {self.pickled_name} is {type(state).__name__}, not a dict")
        self.state = state

    def __repr__(self) -> str:
        return f"<pickled {self.pickled_name}>"


def _stand_in(full_name: str) -> type[PickledModule]:
    return type(full_name.rsplit(".", 1)[1], (PickledModule,), {"pickled_name": full_name})


_STAND_INS: dict[str, type[PickledModule]] = {name: _stand_in(name) for name in ALLOWED_MODULE_CLASSES}


def file_format(path: Path) -> str:
    """``"zip"`` for torch's zip container (torch >= 1.6 default), else ``"legacy"``."""
    return "zip" if zipfile.is_zipfile(path) else "legacy"


def safe_unpickle(path: Path | str) -> Any:
    """Unpickle a torch file allowing only tensors, plain containers and TrojAI classifier classes.

    Returns tensors and containers as torch builds them, and :class:`PickledModule` stand-ins where
    the file pickles a module. Raises :class:`UnsafeModelFileError` naming the first other global
    (nothing from the file has run), or :class:`ModelFileError` for a truncated or malformed file.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: model file not found")
    if path.stat().st_size == 0:
        raise ModelFileError(f"{path}: file is empty; re-copy or re-export it")
    safe = [(cls, name) for name, cls in _STAND_INS.items()]
    try:
        if file_format(path) == "zip":
            with _LOCK, torch.serialization.safe_globals(safe):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=False)
        # torch's weights_only unpickler refuses the legacy format's ("module", cls, ...) persistent ids that
        # whole-module pickles carry (checked with torch 2.13, safe_globals given): we read that format ourselves.
        return _load_legacy(path)
    except ModelFileError:
        raise
    except pickle.UnpicklingError as exc:
        raise _refusal(path, str(exc)) from None
    except MemoryError:
        raise ModelFileError(f"{path}: file declares more tensor data than can be allocated; it is corrupt") from None
    except Exception as exc:  # noqa: BLE001 - any failure on untrusted bytes is a ModelFileError
        raise ModelFileError(f"{path}: truncated or corrupt model file ({_short(exc)})") from None


_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER
_LEGACY_PROTOCOL = 1001  # torch.serialization.PROTOCOL_VERSION


def _load_legacy(path: Path) -> Any:
    """Read torch's legacy (pre-zip, torch <= 1.5) format with the restricted unpickler; no ``torch.load``.

    The layout: pickled magic number, protocol version and system info; the main pickle, whose persistent
    ids name storages (``("storage", type, key, location, numel, view)``) and module classes
    (``("module", cls, source_file, source)``); the pickled list of storage keys; then each storage's
    bytes in that order, as an int64 element count followed by the raw little-endian data. Storages are
    allocated on the CPU and filled in place, so the tensors rebuilt by the main pickle see their data.
    """
    # Long because it follows the legacy format record by record (magic, protocol, sys info, main pickle,
    # storage keys, raw storages), one step after the other; pieces would share all of that state.
    import struct
    import tarfile

    import torch

    if tarfile.is_tarfile(path):
        raise ModelFileError(f"{path}: torch's pre-1.0 tar format is not supported; re-save the model with "
                             "torch >= 1.6 (torch.save writes the zip format)")
    size = path.stat().st_size
    storages: dict[Any, Any] = {}
    declared = 0

    def persistent_load(pid: Any) -> Any:
        nonlocal declared
        if not isinstance(pid, tuple) or not pid:
            raise pickle.UnpicklingError(f"persistent id {type(pid).__name__} is not a tuple")
        kind, data = torch.serialization._maybe_decode_ascii(pid[0]), pid[1:]
        if kind == "module" and data:
            return data[0]  # a stand-in class, already through find_class; the pickled source is ignored
        if kind != "storage" or len(data) != 5:
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        storage_type, root_key, _location, numel, view = data
        if not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError(f"storage size {numel!r} is not a count")
        dtype = storage_type.dtype
        element = torch._utils._element_size(dtype)
        if root_key not in storages:
            declared += numel * element
            if declared > size:  # refused before torch allocates anything
                raise pickle.UnpicklingError("storages declare more bytes than the file holds")
            storages[root_key] = torch.storage.TypedStorage(
                wrap_storage=torch.UntypedStorage(numel * element), dtype=dtype, _internal=True)
        root = storages[root_key]
        if view is None:
            return root
        view_key, offset, view_size = view
        if view_key not in storages:
            storages[view_key] = torch.storage.TypedStorage(
                wrap_storage=root._untyped_storage[offset * element:(offset + view_size) * element],
                dtype=dtype, _internal=True)
        return storages[view_key]

    unpickler = _restricted_unpickler()
    with open(path, "rb") as f:
        if unpickler(f).load() != _LEGACY_MAGIC:
            raise ModelFileError(f"{path}: not a torch model file (no zip container, no legacy magic number)")
        if (protocol := unpickler(f).load()) != _LEGACY_PROTOCOL:
            raise ModelFileError(f"{path}: legacy torch protocol {protocol!r} is not supported")
        unpickler(f).load()  # system info (endianness, type sizes)
        main = unpickler(f)
        main.persistent_load = persistent_load
        result = main.load()
        keys = unpickler(f).load()
        if not isinstance(keys, list):
            raise pickle.UnpicklingError("the storage key list is not a list")
        for key in keys:
            if key not in storages:
                raise pickle.UnpicklingError(f"storage key {key!r} was never declared")
            storage = storages[key]._untyped_storage
            (numel,) = struct.unpack("<q", f.read(8))
            nbytes = numel * torch._utils._element_size(storages[key].dtype)
            if nbytes != storage.nbytes():
                raise ModelFileError(f"{path}: storage {key!r} holds {nbytes} bytes, declared {storage.nbytes()}")
            data = f.read(nbytes)
            if len(data) != nbytes:
                raise ModelFileError(f"{path}: file ends inside storage {key!r}; it is truncated")
            if nbytes:
                target = torch.empty(0, dtype=torch.uint8).set_(storage)
                target.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    return result


def _restricted_unpickler() -> type[pickle.Unpickler]:
    """An unpickler class that resolves only allow-listed globals.

    It allows torch's own weights-only globals (tensor rebuild functions, storages, dtypes,
    OrderedDict, set) plus the stand-ins, and sets state (BUILD) only on tensors and the stand-ins.
    """
    import torch

    allowed = {**torch._weights_only_unpickler._get_allowed_globals(), **_STAND_INS}
    buildable = {torch.Tensor, torch.nn.Parameter, OrderedDict, *_STAND_INS.values()}

    # The pure-Python unpickler keeps its memo in a dict; the C one sizes an array by the largest memo
    # index in the file, so one corrupted LONG_BINPUT made it allocate gigabytes (found by fuzzing).
    class RestrictedUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
        def find_class(self, module: str, name: str) -> Any:
            # Protocol-2 pickles name Python-2 modules (__builtin__.set); pickle's own find_class
            # maps them, and overriding it means doing the same mapping here.
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
            full = f"{module}.{name}"
            if full in allowed:
                return allowed[full]
            raise pickle.UnpicklingError(f"GLOBAL {full} is not allowed")

        def load_build(self) -> None:
            # As torch's weights_only unpickler: BUILD (set an object's state) only on these types.
            inst = self.stack[-2] if len(self.stack) >= 2 else None
            if type(inst) not in buildable:
                raise pickle.UnpicklingError(f"cannot set the state of a {type(inst).__name__} from a model file")
            pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]

        # _Unpickler dispatches through this table, not through method lookup.
        dispatch = {**pickle._Unpickler.dispatch, pickle.BUILD[0]: load_build}  # type: ignore[attr-defined]

    return RestrictedUnpickler


def _refusal(path: Path, message: str) -> ModelFileError:
    match = _GLOBAL_RE.search(message)
    if match:
        name = match.group(1)
        if "." not in name:  # torch strips the "builtins." prefix from its message
            name = f"builtins.{name}"
        return UnsafeModelFileError(
            f"{path}: refusing to load {name}: model files may only name torch tensors, the torch.nn layers of "
            "a TrojAI classifier and model_factories classes (nothing from the file was run)"
        )
    return ModelFileError(f"{path}: malformed or disallowed pickle content ({_short_text(message)})")


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_short_text(str(exc))}" if str(exc).strip() else type(exc).__name__


def _short_text(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    # torch appends a long multi-paragraph explanation of weights_only; keep the first sentence.
    line = line.split(" Please file an issue")[0].split(" WeightsUnpickler error: ")[-1]
    return line if len(line) <= limit else line[: limit - 3] + "..."
