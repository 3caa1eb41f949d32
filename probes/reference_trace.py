"""What a probe's reference function ran of the original. Standalone: imports nothing from twin.

The driver (`probes/driver.py`) loads this file next to itself, by path, on the reference side
only, and wraps the reference function's call in a `ReferenceTrace`. A profile hook
(`sys.setprofile`, and `threading.setprofile` for threads started meanwhile) records:

- every code object of the original's files (under the source root) that was entered: which of
  the original's functions the reference executed. Deciding where a code object lives is done
  once per code object, so the hook costs one dictionary look-up per call;
- every Python function of a framework (a package that is neither the original, the probe nor
  Python's standard library) that the original's code or the probe file called directly, named
  once per call site from the call's own expression: `optimizer.step()` on an AdamW is
  `torch.optim.AdamW.step`, `F.cross_entropy(...)` is `torch.nn.functional.cross_entropy`.
  Localization reads these to place a divergence inside a framework function the original
  delegates to. Builtin (C) functions, such as a tensor operation, are not followed.

`report(names)` then says, for each component a probe names (`component` and `uses`), whether the
reference ran it: True, False (a name of the original whose code never ran: the reference
re-implements it; or a framework's function it never called), or None (neither a name of the
original nor of a framework it imported: a component only the candidate has). It also names the
components that ran but only ever returned None (`procedures`: a counterfactual run replaces such a
component by one that does nothing, `probes/counterfactual.py`), and says whether the hook was still
in place when the reference returned (`intact`): a probe that removed or replaced it (`sys.setprofile`)
leaves a record twin does not believe. Whether the compared output came from the component is not
decided here: code in the probe's process can edit anything in it; twin decides it on the host from a
counterfactual run's outputs (`probes.dependence`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import linecache
import os
import sys
import threading
import types

MAX_CALLS = 200
"""Framework calls kept per run (first seen first); the rest are counted."""
PROBE = "probe"
"""The caller of a framework call made by the probe file's own code."""
ORIGINAL, OUTSIDE = "original", ""
_PLACES: dict[tuple[str, str, str], str] = {}
"""(root, probe file, code file) -> where that file lives, for every trace of this process."""


def for_run(config: dict) -> ReferenceTrace | None:
    """The driver's hook: the trace of a reference run whose config names `trace_components`, else None."""
    if config.get("trace_components") is None:
        return None
    return ReferenceTrace(config["roots"]["source"], config["probe_file"], list(config["trace_components"]))


class ReferenceTrace:
    """A context manager that records what the code run inside it executed of the original.

    Args:
        root: the original's root as this process sees it (on `sys.path`).
        probe_file: the probe file's path (its own calls into a framework are recorded too).
        names: the components `result()` reports on.
    """

    def __init__(self, root: str, probe_file: str, names: list[str] | None = None) -> None:
        self.names = list(names or [])
        self.root = os.path.realpath(root).rstrip("/") + "/"
        self.probe_file = os.path.realpath(probe_file)
        self.where: dict[types.CodeType, str] = {}
        self.executed: set[types.CodeType] = set()
        self.sites: dict[tuple[types.CodeType, int], tuple[str, str] | None] = {}
        self.calls: dict[tuple[str, str], int] = {}
        self.valued: set[types.CodeType] = set()
        """The original's code objects that returned something other than None."""
        self.intact = False
        self._saved: tuple = (None, None)
        self._installed = None

    # ---- the hook -----------------------------------------------------------------------------------
    def __enter__(self) -> ReferenceTrace:
        self._saved = (sys.getprofile(), threading.getprofile())
        hook = self._installed = self._hook()
        threading.setprofile(hook)
        sys.setprofile(hook)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.intact = sys.getprofile() is self._installed
        sys.setprofile(self._saved[0])
        threading.setprofile(self._saved[1])

    def _place(self, code: types.CodeType) -> str:
        """Where a code object lives: the original, the probe file, or outside both (decided once per code
        object, and once per file for the whole process: a probe file's later runs pay nothing again)."""
        where = self.where.get(code)
        if where is None:
            key = (self.root, self.probe_file, code.co_filename)
            where = _PLACES.get(key)
            if where is None:
                name = code.co_filename
                path = os.path.realpath(name) if name[:1] == "/" else name
                where = ORIGINAL if path.startswith(self.root) else PROBE if path == self.probe_file else OUTSIDE
                _PLACES[key] = where
            self.where[code] = where
        return where

    def _hook(self):
        """The profile function: its common path is one dictionary look-up (locals bound once, for speed);
        a call from the original or the probe into a framework costs a look-up of its call site."""
        where_of, place, executed, sites, site = self.where, self._place, self.executed.add, self.sites, self._site
        valued = self.valued.add

        def hook(frame, event, arg) -> None:
            if event == "call":
                code = frame.f_code
                where = where_of.get(code)
                if where is None:
                    where = place(code)
                if where is ORIGINAL:
                    executed(code)
                elif where is OUTSIDE:
                    caller = frame.f_back
                    # a caller not yet placed began before the trace (the driver): never the original's
                    if caller is not None and where_of.get(caller.f_code):
                        key = (caller.f_code, caller.f_lasti)
                        if key not in sites:
                            site(key, caller, frame)
            elif event == "return" and arg is not None and where_of.get(frame.f_code) is ORIGINAL:
                valued(frame.f_code)

        return hook

    def _site(self, key: tuple, caller, callee) -> None:
        """Name a call site from the original or the probe into a framework, the first time it calls."""
        try:
            named = self._name(caller, callee)
        except Exception:  # noqa: BLE001 - naming a call must never disturb the reference
            named = None
        self.sites[key] = None if named is None else (named, self._caller_name(caller.f_code))
        if named is not None:
            found = self.sites[key]
            self.calls[found] = self.calls.get(found, 0) + 1

    # ---- naming ---------------------------------------------------------------------------------------
    def _caller_name(self, code: types.CodeType) -> str:
        return PROBE if self._place(code) == PROBE else self.dotted(code)

    def dotted(self, code: types.CodeType) -> str:
        """`pkg.mod.Class.method` of a code object of the original (nested code: its enclosing definition)."""
        rel = os.path.relpath(os.path.realpath(code.co_filename), self.root)
        module = rel[: -len(".py")] if rel.endswith(".py") else rel
        parts = [p for p in module.split(os.sep) if p]
        if parts and parts[-1] == "__init__":
            parts.pop()
        qualname = code.co_qualname.split(".<locals>", 1)[0]
        return ".".join(parts + ([] if qualname == "<module>" else [qualname]))

    def _name(self, caller, callee) -> str | None:
        """The public name of what a call site calls, or None when it is no call of a framework's."""
        value, name = _evaluate_callee(caller)
        if name is None:
            return None
        if not name:  # a call whose callee is no plain chain: name the function entered
            name = _code_name(callee)
        if value is not None and self._defined_here(value):
            return None
        top = (name or "").split(".", 1)[0]
        if not name or top in sys.stdlib_module_names or top in ("builtins", "twin_probe_file", "__main__"):
            return None
        return name

    def _defined_here(self, value) -> bool:
        """Whether a called object (or the class of a called instance) belongs to the original or the probe."""
        target = inspect.unwrap(value) if callable(value) and not isinstance(value, type) else value
        if not isinstance(target, (type, types.FunctionType, types.MethodType, types.ModuleType)):
            target = type(target)
        target = getattr(target, "__func__", target)
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        path = getattr(module, "__file__", None) or getattr(target, "__file__", None) or ""
        path = os.path.realpath(path) if path else ""
        return bool(path) and (path.startswith(self.root) or path == self.probe_file)

    # ---- the report -----------------------------------------------------------------------------------
    def result(self) -> dict:
        """What the driver writes into the run's manifest: `reference_trace`, the report on `names`."""
        return {"reference_trace": self.report(self.names)}

    def report(self, names: list[str]) -> dict:
        """Whether the reference ran each named component, and the framework calls it made."""
        calls = [
            {"name": name, "caller": caller, "count": count}
            for (name, caller), count in list(self.calls.items())[:MAX_CALLS]
        ]
        ran = {name: self.ran(name) for name in dict.fromkeys(names) if name}
        return {
            "ran": ran,
            "procedures": [name for name, value in ran.items() if value and self.procedure(name)],
            "intact": self.intact,
            "calls": calls,
            "calls_left_out": max(0, len(self.calls) - MAX_CALLS),
            "functions": len({self.dotted(code) for code in self.executed}),
        }

    def ran(self, name: str) -> bool | None:
        """Whether the reference executed component `name` (see the module docstring)."""
        module, rest = self._module_of(name)
        if module is None:
            called = {called for called, _ in self.calls}
            top = name.split(".", 1)[0]
            if top in sys.modules and not self._defined_here(sys.modules[top]):
                return any(_same_call(name, c) for c in called)
            return None
        loaded = sys.modules.get(module)
        if loaded is None:
            return False  # never imported: none of its code ran
        if not rest:
            return any(self._place(c) == ORIGINAL and self.dotted(c).startswith(name + ".") for c in self.executed)
        codes = self._codes_of(loaded, rest)
        if codes is None:
            return None
        return any(code in self.executed for code in codes)

    def procedure(self, name: str) -> bool:
        """Whether component `name` of the original ran and only ever returned None."""
        module, rest = self._module_of(name)
        loaded = sys.modules.get(module) if module else None
        codes = self._codes_of(loaded, rest) if loaded is not None and rest else None
        ran = codes & self.executed if codes else set()
        return bool(ran) and not ran & self.valued

    def _module_of(self, name: str) -> tuple[str | None, str]:
        """The longest prefix of `name` that is a module file of the original, and the rest."""
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            base = os.path.join(self.root, *parts[:n])
            if os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py")):
                return ".".join(parts[:n]), ".".join(parts[n:])
        return None, ""

    def _codes_of(self, module, rest: str) -> set | None:
        """The original's code objects of `module.rest`: a function's, or every method of a class (its bases'
        included); a name the module lacks that some class of it has as a method counts as that method."""
        obj = module
        for part in rest.split("."):
            obj = _static(obj, part)
            if obj is None:
                break
        if obj is None and "." not in rest:
            methods = [_static(c, rest) for c in vars(module).values() if isinstance(c, type)]
            found = set().union(*(self._codes(m) for m in methods if m is not None))
            return found or None
        return None if obj is None else self._codes(obj)

    def _codes(self, obj) -> set:
        obj = getattr(obj, "__func__", obj)
        if isinstance(obj, property):
            return set().union(*(self._codes(f) for f in (obj.fget, obj.fset, obj.fdel) if f is not None))
        if isinstance(obj, type):
            found: set = set()
            for cls in obj.__mro__:
                for member in vars(cls).values():
                    if isinstance(member, (types.FunctionType, staticmethod, classmethod, property)):
                        found |= self._codes(member)
            return found
        code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
        return {code} if isinstance(code, types.CodeType) and self._place(code) == ORIGINAL else set()


# ---- helpers (no state) -----------------------------------------------------------------------------------
def _static(obj, attr: str):
    """`obj.attr` without running a property or `__getattr__` (None where it is not plainly there)."""
    try:
        return inspect.getattr_static(obj, attr)
    except AttributeError:
        return None


def _public(obj) -> str | None:
    """The shortest importable name of a class or function: `torch.optim.AdamW`, not `torch.optim.adamw.AdamW`."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname:
        return None
    parts = module.split(".")
    head = qualname.split(".", 1)[0]
    for n in range(1, len(parts) + 1):
        prefix = ".".join(parts[:n])
        found = sys.modules.get(prefix)
        if found is not None and getattr(found, "__dict__", {}).get(head) is obj:
            return f"{prefix}.{qualname}"
        if found is not None and head != qualname and getattr(found, "__dict__", {}).get(head) is not None:
            owner = found.__dict__[head]
            if _static(owner, qualname.rsplit(".", 1)[1]) is not None:
                return f"{prefix}.{qualname}"
    return f"{module}.{qualname}"


def _code_name(frame) -> str:
    module = frame.f_globals.get("__name__", "?")
    return f"{module}.{frame.f_code.co_qualname}"


def _evaluate_callee(caller) -> tuple[object | None, str | None]:
    """What the call expression at the caller's current instruction calls, and its name.

    Only names and attribute chains are followed (`torch.optim.AdamW`, `self.optimizer.step`),
    looked up without running any property. (None, None) when the instruction is no call
    expression (an attribute read, an iteration, a `with` block: no delegation of the caller's);
    (None, "") when it is a call whose callee is not a plain chain (`super().__init__()`).
    """
    chain = _call_chain(caller.f_code, caller.f_lasti)
    if not chain:
        return None, chain
    head, *attrs = chain
    missing = object()
    value = caller.f_locals.get(head, missing)
    if value is missing:
        value = caller.f_globals.get(head, caller.f_builtins.get(head, missing))
    if value is missing:
        return None, ""
    owner = None
    for attr in attrs:
        owner, value = value, _attribute(value, attr)
        if value is None:
            return None, ""
    return value, _called_name(owner, attrs[-1] if attrs else None, value)


@functools.lru_cache(maxsize=4096)
def _call_chain(code: types.CodeType, lasti: int) -> tuple[str, ...] | str | None:
    """The names of the callee of the call expression at instruction `lasti` (`("self", "opt", "step")`),
    read from the source once per call site in the process; None where the instruction is no call
    expression, "" where the callee is no plain chain of names."""
    position = next(itertools.islice(code.co_positions(), lasti // 2, None), None)
    if position is None or None in position:
        return None
    line, end_line, col, end_col = position
    lines = linecache.getlines(code.co_filename)[line - 1 : end_line]
    if not lines:
        return None
    if len(lines) == 1:
        lines = [lines[0][col:end_col]]
    else:
        lines[0], lines[-1] = lines[0][col:], lines[-1][:end_col]
    try:
        node = ast.parse("".join(lines).strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call):
        return None
    chain: list[str] = []
    func = node.func
    while isinstance(func, ast.Attribute):
        chain.insert(0, func.attr)
        func = func.value
    return (func.id, *chain) if isinstance(func, ast.Name) else ""


def _attribute(owner, attr: str):
    """`owner.attr` without running a property; a class's own `__getattr__` answers what is not plainly there
    (a torch module's submodules live in its `_modules`)."""
    found = _static(owner, attr)
    if found is None and not isinstance(owner, (type, types.ModuleType)) and hasattr(type(owner), "__getattr__"):
        try:
            found = getattr(owner, attr)
        except Exception:  # noqa: BLE001 - an attribute that is not there names nothing
            return None
    return found


def _called_name(owner, attr: str | None, value) -> str | None:
    """The public name of a call: a module's function by its module path, a method by its object's class, a
    class (constructing it) by its own name, a callable object as `Class.__call__`."""
    value = getattr(value, "__func__", value) if isinstance(value, (staticmethod, classmethod)) else value
    if isinstance(value, type):
        return _public(value)
    if isinstance(owner, types.ModuleType) and callable(value) and not _is_instance_callable(value):
        return f"{owner.__name__}.{attr}"
    if owner is not None and not _is_instance_callable(value):
        return f"{_public(owner if isinstance(owner, type) else type(owner))}.{attr}"
    if _is_instance_callable(value):
        return f"{_public(type(value))}.__call__"
    return _public(inspect.unwrap(value) if isinstance(value, types.FunctionType) else value)


def _is_instance_callable(value) -> bool:
    """Whether `value` is an object called through its class's `__call__` (a torch module, a loss object)."""
    plain = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType)
    kinds = plain + (types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType)
    return not isinstance(value, kinds + (property, staticmethod, classmethod)) and callable(value)


def _same_call(name: str, called: str) -> bool:
    """Whether a component's name and a recorded call name the same framework function
    (`torch.optim.adamw.AdamW.step` and `torch.optim.AdamW.step`: same package, same last two names)."""
    if name == called:
        return True
    a, b = name.split("."), called.split(".")
    return a[0] == b[0] and a[-2:] == b[-2:]
