"""The reference side's trace: which of the original's components ran, and its calls into a framework."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

from probes import reference_trace
from probes.reference_trace import ReferenceTrace

ORIGINAL = {
    "shop/__init__.py": "",
    "shop/nets.py": """
        import fw
        from fw import functional as F


        class Base:
            def shared(self, x):
                return x + 1


        class Scorer(Base):
            def __init__(self):
                self.opt = fw.Adam()

            def score(self, x):
                return self.shared(x) * 2

            def train(self, x):
                loss = F.mse(x, 0)
                self.opt.step()
                return loss


        def helper(x):
            return x


        def unused(x):
            return x
    """,
}
FRAMEWORK = {
    "fw/__init__.py": "from fw.adam import Adam\nfrom fw import functional\n",
    "fw/adam.py": """
        class Optimizer:
            def __init__(self):
                self.lr = 1

            def step(self):
                return self._update()

            def _update(self):
                return 1


        class Adam(Optimizer):
            pass
    """,
    "fw/functional.py": "def mse(a, b):\n    return (a - b) ** 2\n",
}
PROBE = """
def reference(env):
    from shop.nets import Scorer

    scorer = Scorer()
    return {"score": scorer.score(3), "loss": scorer.train(2)}


def reference_copy(env):
    return {"score": (3 + 1) * 2}
"""


def _write(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


@pytest.fixture
def sides(tmp_path, monkeypatch):
    """An original (`shop`), a framework it uses (`fw`, importable, outside the original) and a probe file."""
    source, site = tmp_path / "source", tmp_path / "site"
    _write(source, ORIGINAL)
    _write(site, FRAMEWORK)
    (tmp_path / "probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(source))
    for name in [m for m in sys.modules if m.split(".")[0] in ("shop", "fw")]:
        monkeypatch.delitem(sys.modules, name)
    spec = importlib.util.spec_from_file_location("twin_probe_file", tmp_path / "probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return source, tmp_path / "probe.py", probe


def _traced(sides, function: str, names: list[str]) -> dict:
    source, probe_file, probe = sides
    trace = ReferenceTrace(str(source), str(probe_file))
    with trace:
        getattr(probe, function)(None)
    return trace.report(names)


def test_the_components_a_reference_ran_are_told_from_those_it_did_not(sides):
    names = [
        "shop.nets.Scorer",  # a class: any of its methods ran
        "shop.nets.Scorer.score",
        "shop.nets.Base.shared",  # inherited, ran through Scorer
        "shop.nets.helper",  # never called
        "shop.nets.score",  # not in the module: a method of it by its last name
        "shop.nets",  # a module: some function of it ran
        "shop.nets.nothing",  # no such name: cannot tell
        "converter",  # a name only a candidate has: cannot tell
        "fw.Adam.step",  # a framework's function the original called
        "fw.functional.mse",
        "fw.Adam.zero_grad",  # a framework's function nobody called
    ]
    ran = _traced(sides, "reference", names)["ran"]
    assert ran == {
        "shop.nets.Scorer": True,
        "shop.nets.Scorer.score": True,
        "shop.nets.Base.shared": True,
        "shop.nets.helper": False,
        "shop.nets.score": True,
        "shop.nets": True,
        "shop.nets.nothing": None,
        "converter": None,
        "fw.Adam.step": True,
        "fw.functional.mse": True,
        "fw.Adam.zero_grad": False,
    }


def test_a_reference_that_re_implements_its_component_ran_none_of_it(sides):
    ran = _traced(sides, "reference_copy", ["shop.nets.Scorer.score", "shop.nets"])["ran"]
    assert ran == {"shop.nets.Scorer.score": False, "shop.nets": False}


def test_calls_into_a_framework_are_named_by_their_public_name_and_their_caller(sides):
    calls = {(c["name"], c["caller"]): c["count"] for c in _traced(sides, "reference", [])["calls"]}
    assert calls == {
        ("fw.Adam", "shop.nets.Scorer.__init__"): 1,  # fw.adam.Adam, reached as fw.Adam
        ("fw.functional.mse", "shop.nets.Scorer.train"): 1,
        ("fw.Adam.step", "shop.nets.Scorer.train"): 1,  # not fw.adam.Optimizer.step: the object's class
    }


def test_the_trace_leaves_the_profile_function_as_it_found_it(sides):
    source, probe_file, probe = sides
    before = sys.getprofile()
    with ReferenceTrace(str(source), str(probe_file)):
        assert sys.getprofile() is not before
    assert sys.getprofile() is before


def test_a_name_of_the_same_function_under_another_module_path_is_the_same_call():
    assert reference_trace._same_call("torch.optim.adamw.AdamW.step", "torch.optim.AdamW.step")
    assert not reference_trace._same_call("torch.optim.SGD.step", "torch.optim.AdamW.step")


def test_a_trace_whose_hook_the_code_removed_or_replaced_is_not_intact(sides):
    source, probe_file, probe = sides
    with ReferenceTrace(str(source), str(probe_file)) as kept:
        probe.reference(None)
    assert kept.report([])["intact"] is True
    with ReferenceTrace(str(source), str(probe_file)) as removed:
        sys.setprofile(None)
        probe.reference(None)
    assert removed.report(["shop.nets.Scorer.score"])["intact"] is False
    with ReferenceTrace(str(source), str(probe_file)) as replaced:
        sys.setprofile(lambda *args: None)
    assert replaced.report([])["intact"] is False


def test_a_component_that_ran_and_returned_only_none_is_a_procedure(sides):
    source, probe_file, probe = sides
    trace = ReferenceTrace(str(source), str(probe_file))
    with trace:
        from shop.nets import Scorer

        Scorer()  # __init__ returns None; score, train return values
        Scorer().score(1)
    report = trace.report(["shop.nets.Scorer.__init__", "shop.nets.Scorer.score", "shop.nets.helper"])
    assert report["procedures"] == ["shop.nets.Scorer.__init__"]  # helper never ran: no procedure either
