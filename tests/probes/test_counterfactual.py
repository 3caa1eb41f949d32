"""The counterfactual run's stand-ins: values changed beyond any tolerance, installed on the function itself."""

from __future__ import annotations

import collections
import dataclasses
import sys
import textwrap

import numpy as np
import pytest

from probes import counterfactual
from probes.counterfactual import CounterfactualValue, Poisoned, install, perturbed

ORIGINAL = """
    import functools


    def scale(x, factor=2.0, *, offset=0.0):
        return x * factor + offset


    @functools.lru_cache(maxsize=None)
    def table(n):
        return tuple(range(n))


    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper


    @logged
    def word(n):
        return "w" * n


    class Base:
        def __init__(self, start):
            self.count = start


    class Counter(Base):
        def __init__(self, start):
            super().__init__(start)  # a method with a cell (__class__): its code is swapped all the same
            self.items = [start]

        def add(self, n):
            self.count += n
            return self.count

        def _private(self):
            return 1


    def fill(rows):
        rows.append(1)
"""


@pytest.fixture
def original(tmp_path, monkeypatch):
    (tmp_path / "orig").mkdir()
    (tmp_path / "orig" / "__init__.py").write_text("")
    (tmp_path / "orig" / "things.py").write_text(textwrap.dedent(ORIGINAL))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == "orig"]:
        monkeypatch.delitem(sys.modules, name)
    import orig.things

    return tmp_path, orig.things


def _undo(undo):
    for step in reversed(undo):
        step()


Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass(frozen=True)
class Frozen:
    rate: float
    name: str


def test_values_are_moved_by_far_more_than_any_tolerance():
    assert perturbed(2.0) == -2.75 and perturbed(3) == 10 and perturbed(True) is False
    assert perturbed("up") != "up" and perturbed("up").startswith("up") and perturbed(b"x") != b"x"
    assert perturbed(None) is None
    x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    moved = perturbed(x)
    assert moved.dtype == np.float32 and np.all(np.abs(moved - x) >= 0.25)
    assert np.argmax(moved) != np.argmax(x)  # a greedy choice over it changes too
    assert perturbed(np.arange(3)).tolist() == [7, 8, 9] and perturbed(np.array([True])).tolist() == [False]
    assert perturbed([1, (2.0, "a")]) == [8, (-2.75, "a" + counterfactual.MARK)]
    assert perturbed(Pair(1, 2)) == Pair(8, 9) and perturbed({"k": 1}) == {"k": 8}
    assert list(perturbed(i for i in (1, 2))) == [8, 9]


def test_an_object_is_changed_in_place_and_a_value_without_numbers_is_poisoned():
    frozen = Frozen(0.5, "f")
    assert perturbed(frozen) is frozen and frozen.rate == -0.5 and frozen.name != "f"
    poisoned = perturbed(lambda x: x)  # a function: nothing to move
    assert isinstance(poisoned, Poisoned)
    for use in (lambda p: p(1), lambda p: p + 1, lambda p: p.attr, lambda p: list(p), lambda p: str(p)):
        with pytest.raises(CounterfactualValue):
            use(poisoned)


def test_a_torch_tensor_and_module_are_changed_and_autograd_sees_through():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    (perturbed(x).sum()).backward()
    assert x.grad.tolist() == [-1.5, -1.5]
    assert perturbed(torch.tensor([1, 2])).tolist() == [8, 9]
    layer = torch.nn.Linear(2, 1)
    before = layer.weight.detach().clone()
    assert perturbed(layer) is layer and torch.allclose(layer.weight, before * -1.5 + 0.25)


def test_every_holder_of_a_function_reaches_its_stand_in_and_the_undo_restores_it(original):
    root, things = original
    bound = things.scale  # bound before the stand-in, as a probe's `from ... import` is
    count, undo = install("orig.things.scale", str(root), "perturb")
    assert count == 1
    assert bound(1.0) == things.scale(1.0) == (1.0 * 2.0) * -1.5 + 0.25  # defaults still apply
    assert bound(1.0, offset=1.0) == 3.0 * -1.5 + 0.25
    _undo(undo)
    assert bound(1.0) == 2.0 and "__twin_counterfactual" not in " ".join(vars(things))


def test_a_decorated_and_a_cached_function_get_a_stand_in_inside(original):
    root, things = original
    assert things.table(3) == (0, 1, 2)  # cached before the counterfactual run
    _, undo = install("orig.things.table", str(root), "perturb")
    _, undo_word = install("orig.things.word", str(root), "perturb")
    assert things.table(3) == (7, 8, 9) and things.word(2) == "ww" + counterfactual.MARK
    _undo(undo + undo_word)
    assert things.table(3) == (0, 1, 2) and things.word(2) == "ww"


def test_a_class_gets_its_constructor_and_public_methods_stood_in(original):
    root, things = original
    count, undo = install("orig.things.Counter", str(root), "perturb")
    assert count == 2  # __init__ and add; not _private
    counter = things.Counter(3)
    assert counter.count == 10 and counter.items == [10]  # the instance it built, changed after it
    assert counter.add(1) == 18  # 10 + 1, then moved
    _undo(undo)
    assert things.Counter(3).add(1) == 4


def test_skipped_components_do_nothing(original):
    root, things = original
    _, undo = install("orig.things.fill", str(root), "skip")
    rows = []
    assert isinstance(things.fill(rows), Poisoned) and rows == []
    _, undo_class = install("orig.things.Counter", str(root), "skip")
    assert not hasattr(things.Counter(3), "count")
    _undo(undo + undo_class)
    things.fill(rows)
    assert rows == [1]


def test_what_is_no_function_or_class_of_the_original_gets_no_stand_in(original):
    root, _ = original
    assert install("orig.things", str(root), "perturb")[0] == 0  # a module
    assert install("orig.things.nothing", str(root), "perturb")[0] == 0
    assert install("numpy.tanh", str(root), "perturb")[0] == 0  # not the original's
