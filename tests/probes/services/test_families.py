from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from probes.context import make_context
from probes.services.families import find_app, infer_families, is_service, probe_families, sides_for
from task_model.loader import load_task

REPO = Path(__file__).resolve().parents[3]
BOOKSHOP = REPO / "tasks" / "flask-to-starlette"
MLP = REPO / "tasks" / "t2j-mini" / "mlp-train"


def test_declared_families_win_and_say_so():
    assert probe_families(load_task(BOOKSHOP)) == {"http": "declared in [metadata.twin] probes"}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"app.py": "from flask import Flask\napp = Flask(__name__)\n"}, {"http"}),
        ({"cli.py": "import argparse\n\ndef main():\n    pass\n"}, {"process", "python"}),
        ({"lib.py": "def parse(text):\n    return text\n"}, {"python"}),
        ({"_private.py": "X = 1\n"}, set()),
    ],
)
def test_families_are_inferred_from_the_source(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert set(infer_families(tmp_path)) == expected


def test_an_ml_repository_with_a_train_script_is_a_process_and_a_library():
    assert set(probe_families(load_task(MLP))) == {"process", "python"}


def test_a_service_declares_its_families_or_serves_http_and_a_model_task_is_none():
    bookshop, mlp = load_task(BOOKSHOP), load_task(MLP)
    assert is_service(bookshop, probe_families(bookshop))
    assert not is_service(mlp, probe_families(mlp))
    assert is_service(mlp, {"http": "app.py imports flask"})


def test_the_application_object_is_found_in_either_framework():
    assert find_app(BOOKSHOP / "environment" / "source") == ("app", "app", "wsgi")
    assert find_app(BOOKSHOP / "solution" / "app") == ("app", "app", "asgi")


def test_http_sides_come_from_the_task_or_from_the_code(tmp_path):
    task = tmp_path / "task"
    shutil.copytree(BOOKSHOP, task, ignore=shutil.ignore_patterns("solution"))
    bookshop = make_context(load_task(BOOKSHOP), BOOKSHOP / "solution" / "app", sandbox_kind="none")
    declared, _ = sides_for(bookshop, "http")
    assert declared["candidate"]["server"]["argv"][2:4] == ["uvicorn", "app:app"]
    toml = task / "task.toml"
    toml.write_text(toml.read_text().split("# How each side")[0] + "\n[verifier]\ntimeout_sec = 300.0\n")
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "server.py").write_text("from starlette.applications import Starlette\nweb = Starlette()\n")
    inferred, why = sides_for(make_context(load_task(task), cand, sandbox_kind="none"), "http")
    assert why == "" and inferred["candidate"]["server"]["argv"][2:4] == ["uvicorn", "server:web"]
    assert inferred["reference"]["server"]["argv"][2:5] == ["flask", "--app", "app:app"]
    (cand / "server.py").write_text("print('no app here')\n")
    none, why = sides_for(make_context(load_task(task), cand, sandbox_kind="none"), "http")
    assert none is None and "in the candidate" in why
    process = sides_for(make_context(load_task(task), cand, sandbox_kind="none"), "process")
    assert process[0] == {"reference": {}, "candidate": {}}


def test_the_originals_routes_and_parameters_make_a_request_space():
    from probes.services.families import route_space

    space = route_space(BOOKSHOP / "environment" / "source")
    assert space["methods"] == ["GET", "POST", "PUT"]
    assert {"/books", "/books/{int}", "/login", "/prefs"} <= set(space["paths"])
    assert "10" in space["query"]["limit"]["values"] and set(space["form"]) == {"password", "username"}
    assert set(space["cookies"]) == {"lang", "theme", "user"}


def test_a_web_task_without_stated_requests_gets_its_routes_searched(tmp_path):
    from probes.suite import task_probes

    task = tmp_path / "shop"
    shutil.copytree(BOOKSHOP, task, ignore=shutil.ignore_patterns("solution", "probes"))
    toml = task / "task.toml"
    text = toml.read_text().replace('name = "flask-to-starlette"', 'name = "shop"')
    toml.write_text("\n".join(line for line in text.splitlines() if not line.startswith("probe_files")) + "\n")
    assert [p.__name__ for p in task_probes(load_task(task))] == ["inferred:services"]
    assert task_probes(load_task(MLP)) and "inferred:services" not in [p.__name__ for p in task_probes(load_task(MLP))]
    assert [p.__name__ for p in task_probes(load_task(BOOKSHOP))] == ["http:services"]
