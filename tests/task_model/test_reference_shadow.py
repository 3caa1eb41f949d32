"""A reference environment is read by its installed files: torch under any name is found and its shipper named.

Each test lays out a site-packages by hand (a dist-info with the RECORD pip writes at install);
`tests/task_model/test_reference_env.py` builds one from a wheel with pip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from task_model.reference_shadow import BASE_PTH, holds_torch, module_name, shadowing

BASE = ["/opt/twin/site-packages"]


def site_with(tmp_path: Path, files: dict[str, str], *, shipper: str = "innocent") -> Path:
    """A site-packages holding twin's own `.pth`, and `files` installed by the distribution `shipper`."""
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / BASE_PTH).write_text("".join(f"{line}\n" for line in BASE))
    info = site / f"{shipper}-1.0.dist-info"
    info.mkdir()
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    rows = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{row},,\n" for row in rows))
    return site


@pytest.mark.parametrize(
    ("entry", "module"),
    [
        ("torch", "torch"),
        ("torch.py", "torch"),
        ("torch.cpython-311-x86_64-linux-gnu.so", "torch"),
        ("torch.abi3.so", "torch"),
        ("torchmetrics", "torchmetrics"),
        ("torch-2.0.dist-info", None),
        ("torch.libs", None),
        ("zz.pth", None),
    ],
)
def test_an_entry_is_known_by_the_module_it_imports_as(entry, module):
    assert module_name(entry) == module


def test_an_environment_of_ordinary_packages_passes(tmp_path):
    site = site_with(tmp_path, {"torchmetrics/__init__.py": "", "extra.pth": "innocent_extra\n"})
    (site / "innocent_extra").mkdir()
    assert shadowing(site, BASE) is None


@pytest.mark.parametrize(
    "files",
    [
        {"torch.py": "FAKE = True\n"},
        {"torch/__init__.py": "FAKE = True\n"},
        {"torch/nn.py": ""},  # a namespace package
        {"torch.cpython-311-x86_64-linux-gnu.so": ""},
    ],
)
def test_a_top_level_torch_is_refused_naming_its_distribution(tmp_path, files):
    why = shadowing(site_with(tmp_path, files, shipper="sneaky"), BASE)
    assert why is not None and why.startswith("distribution sneaky installs a top-level torch"), why


@pytest.mark.parametrize("name", ["sitecustomize.py", "usercustomize.py"])
def test_a_start_up_hook_is_refused(tmp_path, name):
    why = shadowing(site_with(tmp_path, {name: "import sys\n"}, shipper="sneaky"), BASE)
    assert why == f"distribution sneaky installs {name}, which Python runs at every start"


def test_a_pth_that_runs_code_is_refused(tmp_path):
    site = site_with(tmp_path, {"zz.pth": "# a comment\nimport shim; shim.put_first()\n"}, shipper="sneaky")
    why = shadowing(site, BASE)
    assert why is not None and why.startswith("distribution sneaky installs zz.pth: its line 'import shim;")
    assert "runs code at every start" in why


def test_a_pth_line_to_a_torch_inside_the_environment_is_refused(tmp_path):
    site = site_with(tmp_path, {"zz.pth": "hidden\n", "hidden/torch/__init__.py": ""}, shipper="sneaky")
    assert holds_torch(site / "hidden") == "torch"
    assert shadowing(site, BASE) == "distribution sneaky installs zz.pth: its line 'hidden' puts torch on the path"


@pytest.mark.parametrize("line", ["/tmp", "../../../../.."])
def test_a_pth_line_leading_outside_the_environment_is_refused(tmp_path, line):
    why = shadowing(site_with(tmp_path, {"zz.pth": f"{line}\n"}, shipper="sneaky"), BASE)
    outside = "puts a folder outside the environment on the path"
    assert why == f"distribution sneaky installs zz.pth: its line {line!r} {outside}"


def test_twin_s_own_pth_must_stay_as_twin_wrote_it(tmp_path):
    site = site_with(tmp_path, {})
    assert shadowing(site, BASE) is None
    (site / BASE_PTH).write_text(f"{BASE[0]}\n/elsewhere/with/a/torch\n")
    assert shadowing(site, BASE) == (
        f"a distribution whose RECORD does not list it installs {BASE_PTH}: it is not the file twin wrote"
    )


def test_an_entry_no_record_lists_is_still_refused(tmp_path):
    site = site_with(tmp_path, {})
    (site / "torch.py").write_text("")
    assert shadowing(site, BASE) == (
        "a distribution whose RECORD does not list it installs a top-level torch.py, which imports as torch"
    )


# Lines an interpreter reads otherwise than a plain strip-and-split would: each put a torch on the
# path (or ran code) under Python 3.11 or 3.13 while the check passed the environment.
def _hidden_torch(site: Path, folder: str) -> None:
    (site / folder / "torch").mkdir(parents=True)
    (site / folder / "torch" / "__init__.py").write_text("FAKE = True\n")


@pytest.mark.parametrize(
    ("folder", "pth", "why"),
    [
        (" t", b" t\n", "puts torch on the path"),  # the leading space is kept: the folder is ' t'
        ("t\x0bx", b"t\x0bx\n", "holds a character an interpreter may read as a line break"),
        (None, b"\xef\xbb\xbfimport shim\n", "runs code at every start"),  # 3.13 drops the mark
        (None, b"  import shim\n", "runs code at every start"),
        (None, b"x\x0cimport shim\n", "holds a character an interpreter may read as a line break"),
        (None, b"x\x85import shim\n", "is not UTF-8 text"),
    ],
)
def test_a_pth_line_read_otherwise_by_an_interpreter_is_refused(tmp_path, folder, pth, why):
    site = site_with(tmp_path, {}, shipper="sneaky")
    if folder is not None:
        _hidden_torch(site, folder)
    (site / "zz.pth").write_bytes(pth)
    found = shadowing(site, BASE)
    assert found is not None and why in found, found


def test_a_pth_line_to_an_archive_holding_torch_is_refused(tmp_path):
    import zipfile

    site = site_with(tmp_path, {"zz.pth": "t.zip\n"}, shipper="sneaky")
    with zipfile.ZipFile(site / "t.zip", "w") as archive:
        archive.writestr("torch/__init__.py", "FAKE = True\n")
    assert shadowing(site, BASE) == (
        "distribution sneaky installs zz.pth: its line 't.zip' puts a file on the path,"
        " whose archive could hold a torch"
    )


def test_a_pth_past_what_is_read_of_it_is_refused(tmp_path):
    padding = "# padding\n" * ((1 << 20) // 10 + 1)
    site = site_with(tmp_path, {"zz.pth": padding + "import shim\n"}, shipper="sneaky")
    found = shadowing(site, BASE)
    assert found is not None and "larger than 1 MiB" in found, found


def test_pth_lines_as_pip_writes_them_still_pass(tmp_path):
    site = site_with(tmp_path, {"zz.pth": "# comment\r\ninnocent_extra   \r\n\r\n"})
    (site / "innocent_extra").mkdir()
    assert shadowing(site, BASE) is None


def test_the_interpreter_puts_a_leading_space_folder_and_an_archive_on_its_path(tmp_path):
    """The control: this interpreter's own `site` does put both torches on the path as the check reads them."""
    import subprocess
    import sys
    import zipfile

    site = site_with(tmp_path, {"zz.pth": " t\nt.zip\n"})
    _hidden_torch(site, " t")
    with zipfile.ZipFile(site / "t.zip", "w") as archive:
        archive.writestr("torch/__init__.py", "FAKE = True\n")
    code = f"import site, sys; site.addsitedir({str(site)!r}); print(sys.path)"
    shown = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"{site}/ t'" in shown and f"{site}/t.zip'" in shown, shown
    assert shadowing(site, BASE) is not None


@pytest.mark.parametrize("files", [{"json/__init__.py": "import sys\n"}, {"typing.py": ""}, {"pathlib.py": ""}])
def test_a_top_level_module_of_the_standard_library_is_refused(tmp_path, files):
    """First on PYTHONPATH, it is what everything imports by that name: one put a fake torch in sys.modules."""
    entry = next(iter(files)).split("/")[0]
    why = shadowing(site_with(tmp_path, files, shipper="sneaky"), BASE)
    assert why is not None and why.startswith(f"distribution sneaky installs a top-level {entry}, which imports"), why


def test_a_standard_library_name_on_pythonpath_stands_in_for_torch(tmp_path):
    """The control: a `json` first on PYTHONPATH runs before `import torch` and can answer for it."""
    import subprocess
    import sys

    fake = "import sys, types\nsys.modules['torch'] = types.ModuleType('f')\n"
    site = site_with(tmp_path, {"json/__init__.py": fake})
    code = "import json, torch; print(torch.__name__)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(site)})
    assert shown.stdout.strip() == "f", shown
    assert shadowing(site, BASE) is not None


def _script_wheel(folder: Path, scripts: list[str]) -> Path:
    """A wheel whose console scripts take `scripts`' names (what a dependency of the original could ship)."""
    import base64
    import hashlib
    import zipfile

    files = {
        "shim.py": "def main():\n    print('NOT-PYTHON')\n",
        "shim-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: shim\nVersion: 1.0\n",
        "shim-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "shim-1.0.dist-info/entry_points.txt": "[console_scripts]\n" + "".join(f"{n} = shim:main\n" for n in scripts),
    }
    rows = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(text.encode())}")
    wheel = folder / "shim-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("shim-1.0.dist-info/RECORD", "\n".join([*rows, "shim-1.0.dist-info/RECORD,,"]) + "\n")
    return wheel


@pytest.mark.parametrize(("scripts", "refused"), [(["python"], "python"), (["sh"], "sh"), (["shim-cli"], None)])
def test_a_console_script_named_like_the_interpreter_or_a_shell_is_refused(tmp_path, scripts, refused):
    """pip writes it over the venv's own `bin/python` (and, in the image, in front of the system's)."""
    import subprocess
    import sys
    import venv

    from task_model.reference_shadow import command_shadowing

    root = tmp_path / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    pip = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "--quiet", "--no-deps"]
    pip += ["--disable-pip-version-check", "--root-user-action=ignore", str(_script_wheel(tmp_path, scripts))]
    subprocess.run(pip, check=True, capture_output=True)
    site = next((root / "lib").glob("python*/site-packages"))
    why = command_shadowing(root, site)
    if refused is None:
        assert why is None
        return
    assert why == f"distribution shim installs a script {refused}, run in place of the system's"
    if refused == "python":  # the control: the venv's interpreter is the dependency's script now
        assert not (root / "bin" / "python").is_symlink()
        for info in site.glob("*.dist-info"):
            (info / "RECORD").write_text("")  # a RECORD that hides it: the replaced link still shows
        assert command_shadowing(root, site) == "its bin/python is no longer the interpreter's link"
