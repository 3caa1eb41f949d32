"""A counterfactual reference run: the probe's component swapped for a stand-in that changes what it gives.
Standalone: imports nothing from twin.

The driver (`probes/driver.py`) loads this file next to itself, by path, for a reference run whose
config names a `counterfactual` component. Whether a probe's compared output comes from the original's
component is decided by what its outputs do when that component gives something else: the same
reference, same inputs and seed, is run again with every function of the component answering through a
stand-in, and twin compares the two runs' outputs on the host (`probes.dependence`). Unchanged outputs
mean the probe computed them some other way (it called the component and dropped the result).

The stand-in is installed on the function object itself (its code is swapped for a trampoline), so
every way of reaching it, however the probe or the original bound it, goes through the stand-in. It
works in one of two modes:

- `perturb`: it calls the original's own code and changes the result by far more than any tolerance:
  floats `x * -1.5 + 0.25` (flips an argmax, moves every value), integers `+ 7`, booleans negated,
  strings marked; containers element by element, generators item by item; an object the component
  built (a class's `__init__`, a torch module): its numbers, parameters and buffers, in place; a value
  none of that applies to: a poisoned stand-in (`Poisoned`) that raises `CounterfactualValue` as soon as
  it is used, so a probe that drops it runs unchanged and one that uses it stops;
- `skip`: it does nothing at all and gives a poisoned value (a constructor: nothing). Outputs made
  during the component's work or from what it left behind (files it wrote, state it changed, a hook
  it ran) change or stop; a probe that merely called it runs unchanged. twin makes this run for a
  procedure (the reference saw it return only None) and where a `perturb` run left the outputs as
  they were (`probes.dependence`).
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import sys
import types

SCALE, SHIFT, INT_SHIFT = -1.5, 0.25, 7
MARK = "\u2063counterfactual"
MAX_DEPTH = 8
_COUNTER = itertools.count()


class CounterfactualValue(RuntimeError):
    """Raised by a poisoned stand-in: the probe used a value of the component that cannot be perturbed."""


class Poisoned:
    """Stands in for a value that cannot be perturbed: any use of it raises `CounterfactualValue`."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def _raise(self, *_args, **_kwargs):
        raise CounterfactualValue(f"counterfactual stand-in for a {object.__getattribute__(self, '_what')}")

    __getattr__ = __setattr__ = __call__ = __iter__ = __len__ = __getitem__ = __setitem__ = _raise
    __bool__ = __index__ = __int__ = __float__ = __str__ = __repr__ = __eq__ = __hash__ = __contains__ = _raise
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __matmul__ = _raise
    __lt__ = __le__ = __gt__ = __ge__ = __ne__ = __neg__ = __enter__ = __array__ = __fspath__ = _raise


# ---- perturbing values -----------------------------------------------------------------------------------
def perturbed(value, depth: int = 0):
    """`value` changed by far more than any tolerance (see the module docstring); objects in place."""
    if depth > MAX_DEPTH:
        return Poisoned(type(value).__qualname__)
    if value is None:
        return None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + INT_SHIFT
    if isinstance(value, (float, complex)):
        return value * SCALE + SHIFT
    if isinstance(value, str):
        return value + MARK
    if isinstance(value, bytes):
        return value + MARK.encode()
    array = _perturbed_array(value)
    if array is not None:
        return array
    if inspect.isgenerator(value):
        return (perturbed(item, depth + 1) for item in value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(perturbed(v, depth + 1) for v in value))
    if isinstance(value, (list, tuple)):
        items = [perturbed(v, depth + 1) for v in value]
        return _rebuilt(value, items)
    if isinstance(value, dict):
        return _rebuilt(value, {k: perturbed(v, depth + 1) for k, v in value.items()})
    if perturb_in_place(value, depth + 1):
        return value
    return Poisoned(type(value).__qualname__)


def _rebuilt(value, items):
    try:
        return type(value)(items)
    except Exception:  # noqa: BLE001 - a container type that cannot be rebuilt from its items
        return items if isinstance(value, (list, dict)) else tuple(items)


def _perturbed_array(value):
    """A numpy, torch or jax array changed by its kind (floats scaled and shifted, integers shifted,
    booleans negated); None when `value` is no array. Autograd sees through a torch tensor's change."""
    module = type(value).__module__ or ""
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        return None
    if not module.startswith(("numpy", "torch", "jax", "jaxlib")):
        return None
    kind = _kind(value)
    if kind == "f":
        return value * SCALE + SHIFT
    if kind == "i":
        return value + INT_SHIFT
    if kind == "b":
        return ~value
    return None


def _kind(value) -> str:
    dtype = value.dtype
    if getattr(dtype, "is_floating_point", False) or getattr(dtype, "is_complex", False):
        return "f"
    if str(dtype) in ("torch.bool", "bool"):
        return "b"
    if str(dtype).startswith(("torch.int", "torch.uint")):
        return "i"
    numpy_kind = getattr(dtype, "kind", "")
    return {"f": "f", "c": "f", "i": "i", "u": "i", "b": "b"}.get(numpy_kind, "")


def perturb_in_place(obj, depth: int = 0) -> bool:
    """Change an object's numbers and arrays where it keeps them (a torch module: its parameters and
    buffers); whether anything was changed."""
    if _is_module(obj):
        import torch

        changed = False
        with torch.no_grad():
            for tensor in itertools.chain(obj.parameters(), obj.buffers()):
                kind = _kind(tensor)
                if kind == "f":
                    tensor.mul_(SCALE).add_(SHIFT)
                elif kind == "i":
                    tensor.add_(INT_SHIFT)
                changed = changed or kind in ("f", "i")
        return changed
    changed = False
    for name, value in list(getattr(obj, "__dict__", {}).items()):
        if value is None or name.startswith("__") or isinstance(value, (type, types.ModuleType)):
            continue
        if _is_module(value):
            changed = perturb_in_place(value, depth + 1) or changed
            continue
        if callable(value) and not hasattr(value, "dtype"):
            continue
        new = perturbed(value, depth + 1)
        if new is value:  # changed in place
            changed = True
            continue
        if isinstance(new, Poisoned):
            continue
        try:
            object.__setattr__(obj, name, new)
            changed = True
        except Exception:  # noqa: BLE001 - an attribute that cannot be set stays as it is
            continue
    return changed


def _is_module(value) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


# ---- stand-ins --------------------------------------------------------------------------------------------
def for_run(config: dict) -> StandIns | None:
    """The driver's hook: the stand-ins of a reference run whose config names a `counterfactual`, else None."""
    asked = config.get("counterfactual")
    if not isinstance(asked, dict):
        return None
    return StandIns(str(asked["component"]), config["roots"]["source"], str(asked.get("mode") or "perturb"))


class StandIns:
    """A context manager inside which a component's functions answer through stand-ins (`install`)."""

    def __init__(self, component: str, root: str, mode: str) -> None:
        self.component, self.root, self.mode = component, root, mode
        self.count, self.undo = 0, []

    def __enter__(self) -> StandIns:
        try:
            self.count, self.undo = install(self.component, self.root, self.mode)
        except Exception:  # noqa: BLE001 - a component twin cannot stand in for: the run says none was installed
            self.count, self.undo = 0, []
        return self

    def __exit__(self, *_exc: object) -> None:
        for step in reversed(self.undo):
            step()

    def result(self) -> dict:
        """What the driver writes into the run's manifest: how many functions answered through a stand-in."""
        return {"counterfactual": {"stand_ins": self.count, "mode": self.mode}}


def install(component: str, root: str, mode: str) -> tuple[int, list]:
    """Give every function of `component` (a function or method of the original under `root`, or a class:
    its constructor and its own public methods, `forward` and `__call__`) a stand-in.

    Args:
        mode: `perturb` or `skip` (see the module docstring).

    Returns:
        How many functions got a stand-in (0: the name is no function or class of the original, e.g. a
        module), and the undo of each.
    """
    undo = []
    for func, how, caches in _targets(component, os.path.realpath(root).rstrip("/") + "/"):
        try:
            undo.append(_swap(func, how, caches, skip=mode == "skip"))
        except (TypeError, ValueError, AttributeError):  # a function whose code cannot be swapped keeps it
            continue
    return len(undo), undo


def _targets(component: str, root: str) -> list[tuple[types.FunctionType, str, list]]:
    parts = component.split(".")
    for n in range(len(parts), 0, -1):
        base = os.path.join(root, *parts[:n])
        if os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py")):
            module, rest = importlib.import_module(".".join(parts[:n])), parts[n:]
            break
    else:
        return []
    if not rest:
        return []
    found = module
    for part in rest:
        found = inspect.getattr_static(found, part, None)
        if found is None:
            break
    if found is None and len(rest) == 1:  # a method by its last name, as the trace reads it
        owners = [c for c in vars(module).values() if isinstance(c, type)]
        found_all = [inspect.getattr_static(c, rest[0], None) for c in owners]
        return [t for f in found_all if f is not None for t in _function_targets(f, root)]
    if isinstance(found, type):
        return _class_targets(found, root)
    return [] if found is None else _function_targets(found, root)


def _class_targets(cls: type, root: str) -> list:
    """A class's constructor (its instance changed after it) and its own public methods, `forward`, `__call__`."""
    targets = []
    for name, member in vars(cls).items():
        func = getattr(member, "__func__", member)
        if not isinstance(func, types.FunctionType):
            continue
        if name == "__init__":
            targets.append((func, "instance", []))
        elif (name in ("forward", "__call__") or not name.startswith("_")) and _under(func, root):
            targets.append((func, "value", []))
    return targets


def _function_targets(obj, root: str) -> list:
    """The original's function inside `obj` (a decorator's wrappers unwrapped), with the caches on the way."""
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)
    caches, layer = [], obj
    while layer is not None:
        if callable(getattr(layer, "cache_clear", None)):
            caches.append(layer.cache_clear)
        if isinstance(layer, types.FunctionType) and _under(layer, root):
            return [(layer, "value", caches)]
        layer = getattr(layer, "__wrapped__", None)
    return []


def _under(func: types.FunctionType, root: str) -> bool:
    name = func.__code__.co_filename
    return name[:1] == "/" and os.path.realpath(name).startswith(root)


def _swap(func: types.FunctionType, how: str, caches: list, *, skip: bool):
    """Swap `func`'s code for a trampoline to its stand-in (every holder of `func` reaches it); returns the undo."""
    code = func.__code__
    real = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    real.__kwdefaults__ = func.__kwdefaults__
    name = f"__twin_counterfactual_{next(_COUNTER)}"

    def stand_in(args, kwargs):
        if skip:
            return None if how == "instance" else Poisoned(f"result of {func.__qualname__}, which did not run")
        result = real(*args, **kwargs)
        if how == "instance":
            if args:
                perturb_in_place(args[0])
            return result
        return perturbed(result)

    for clear in caches:
        clear()
    func.__globals__[name] = stand_in
    func.__code__ = _trampoline(name, len(func.__closure__ or ()))

    def undo() -> None:
        func.__code__ = code
        func.__globals__.pop(name, None)
        for clear in caches:
            clear()

    return undo


def _trampoline(name: str, free: int) -> types.CodeType:
    """Code that hands its arguments to global `name`, with as many free variables as the function it replaces
    has cells (a function's code can only be swapped for code with the same number)."""
    cells = [f"_twin_cell{i}" for i in range(free)]
    text = "def _outer():\n" + "".join(f"    {c} = None\n" for c in cells)
    text += "    def _stand_in(*_twin_args, **_twin_kwargs):\n"
    text += f"        if False:\n            ({', '.join(cells)},)\n" if cells else ""
    text += f"        return {name}(_twin_args, _twin_kwargs)\n    return _stand_in\n"
    scope: dict = {}
    exec(compile(text, "<twin counterfactual>", "exec"), scope)  # noqa: S102 - twin's own fixed text
    return scope["_outer"]().__code__
