"""The probe-file format read without running it: what a file states is read, or refused by name."""

from __future__ import annotations

import pytest

from probes.probe_format import ACCEPTED_FORMS, ProbeFileError, read_probe_file, stated_ids

PAIR = "def reference_fwd(env):\n    return {}\n\n\ndef candidate_fwd(env):\n    return {}\n"


def _file(tmp_path, text: str, name: str = "probe_x.py"):
    path = tmp_path / name
    path.write_text(text)
    return read_probe_file(path)


@pytest.mark.parametrize(
    ("extra", "named", "how"),
    [
        ("probe_logits = make_probe('logits')\n", "probe_logits (line 7", "not a recognised probe function"),
        ("def probe_logits(env):\n    return {}\n", "probe_logits (line 7", "not a recognised probe function"),
        ("reference_loss = _make('loss')\ncandidate_loss = _make('loss')\n", "reference_loss (line 7", "assigned"),
        ("candidate_fwd = _wrap(candidate_fwd)\n", "candidate_fwd (line 7", "assigned"),
        ("from helpers import check_grads\n", "check_grads (line 7", "imported"),
        ("check_jit: object = _jit_check\n", "check_jit (line 7", "assigned"),
        ("class check_tree:\n    pass\n", "check_tree (line 7", "a class"),
    ],
)
def test_a_probe_in_another_form_is_refused_by_name_with_the_accepted_forms(tmp_path, extra, named, how):
    file = _file(tmp_path, PAIR + extra)
    for checks in (False, True):
        with pytest.raises(ProbeFileError) as caught:
            file.names(checks=checks)
        message = str(caught.value)
        assert named in message and how in message
        assert ACCEPTED_FORMS in message and "\n" not in message
    assert stated_ids(file.path) == set()  # a refused file states nothing


def test_helpers_constants_and_aliased_inputs_are_read_as_before(tmp_path):
    text = (
        "import numpy as np\nREFERENCE_DTYPE = 'float32'\ncheckpoint_path = 'x'\n_probe = 1\n"
        "def _helper(env):\n    return {}\n\n"
        "def inputs_fwd(env):\n    return {}\n\ninputs = inputs_fwd\n"
        + PAIR
        + "def reference(env):\n    return {}\n\ndef candidate(env):\n    return {}\n"
        + "def check_live(env):\n    return {}\n"
    )
    file = _file(tmp_path, text)
    assert file.unrecognised() == []
    assert set(file.names()) == {"", "fwd"}
    assert set(file.names(checks=True)) == {"live"}


def test_inputs_without_their_pair_are_refused(tmp_path):
    file = _file(tmp_path, PAIR + "def inputs_fw(env):\n    return {}\n")
    with pytest.raises(ProbeFileError, match=r"inputs_fw \(line 7\) has no reference/candidate pair"):
        file.names()


def test_metadata_for_a_probe_the_file_lacks_is_refused(tmp_path):
    good = _file(
        tmp_path,
        "PROBES = {'fwd': {'level': 2}, 'check_live': {}, 'probe_x': {}}\n"
        + PAIR
        + "def check_live(env):\n    return {}\n\n\ndef check(env):\n    return {}\n",
    )
    assert good.names() == {"fwd": {"level": 2}}
    assert set(good.names(checks=True)) == {"", "live"}
    typo = _file(tmp_path, "PROBES = {'fw': {'level': 2}}\n" + PAIR, name="typo.py")
    with pytest.raises(
        ProbeFileError, match=r"PROBES names 'fw', which the file defines no probe for \(its probes: 'fwd';"
    ):
        typo.names()
    unnamed = _file(tmp_path, "PROBES = {'': {'level': 2}}\n" + PAIR.replace("_fwd", ""), name="fwd.py")
    with pytest.raises(ProbeFileError, match=r"PROBES names '', .*\(its probes: 'fwd'; an unsuffixed .* name, 'fwd'\)"):
        unnamed.names()
