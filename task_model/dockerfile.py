"""Reading a published task's `environment/Dockerfile`: the files twin lays out, and what it honours.

twin reads what decides the agent's files — COPY and ADD (from the build context),
WORKDIR and ENV, with ARG and ENV expansion — and lays the same files out in its own
sandbox. Every other instruction is either harmless to skip (one note), or cannot be
honoured without docker (one-line refusal, `DockerfileError`). When the docker sandbox
built the task's image (`ground/sandboxes/task_image.py`), `read_dockerfile` is given it
and every RUN is honoured by the image, with a note. What is accepted without an image:

| instruction | how |
|---|---|
| `FROM` (one stage) | noted: twin runs with its own interpreter, not the base image |
| `COPY`/`ADD` of local paths | each source is laid out at its destination, read-only |
| `WORKDIR`, `ENV`, `ARG` | kept; `$VAR`/`${VAR}` expanded |
| `RUN pip install P…`, `RUN apt-get install P…` | accepted with a note when every P is installed here |
| `RUN mkdir …`, `true`, `echo …` | accepted (nothing to do) |
| `LABEL`, `EXPOSE`, `CMD`, `ENTRYPOINT`, `USER`, `SHELL`, `HEALTHCHECK`, … | noted and skipped |

Refused: a second `FROM` (multi-stage), `COPY --from`, `ADD` of a URL or an
archive, a source outside the build context, `VOLUME`, `ONBUILD`, unknown
instructions, and any other `RUN` (unless the settings say `ignore_run = true`).
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from dockerfile_parse import DockerfileParser
from dockerfile_parse.util import WordSplitter, extract_key_values

from ground.boundary import SECRET_NAME
from task_model.model import EnvironmentLayout, LaidOut, TaskError

SKIPPED = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "USER", "SHELL", "HEALTHCHECK", "STOPSIGNAL",
           "MAINTAINER"}  # fmt: skip
SANDBOX_OWNED_ENV = {"PATH", "HOME", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV",
                     "TMPDIR", "PYTHONUSERBASE"}  # fmt: skip
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".txz", ".tbz2")
NOOP_COMMANDS = {"mkdir", "true", "echo", ":"}
PIP_VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c",
                     "--constraint", "--trusted-host", "--target", "-t", "--prefix", "--root",
                     "--platform", "--python-version", "--implementation", "--abi", "--progress-bar",
                     "--cache-dir", "--src", "--upgrade-strategy"}  # fmt: skip


class DockerfileError(TaskError):
    """The Dockerfile asks for something twin cannot lay out without docker."""

    def prefixed(self, prefix: str) -> DockerfileError:
        """The same refusal, its line starting with `prefix` (e.g. `task T`)."""
        return type(self)(f"{prefix}: {self}")


class RunRefused(DockerfileError):
    """A RUN twin cannot honour without docker; an image built from the Dockerfile honours it."""


def read_dockerfile(
    path: Path,
    *,
    ignore_run: bool = False,
    image: str | None = None,
    honoured: dict[str, LaidOut | None] | None = None,
) -> EnvironmentLayout:
    """Read a Dockerfile into the files it lays out, its WORKDIR, ENV and notes.

    Args:
        path: the Dockerfile; its directory is the build context.
        ignore_run: accept a RUN twin cannot honour, with a note, instead of refusing it.
        image: the image built from this Dockerfile, which honours every RUN (with a note).
        honoured: RUN texts (`normalized_run`) twin honours itself, each with what it lays out:
            the fetch of the original the task declares (`distribution_install.dockerfile_fetch_run`),
            and (None: nothing laid out) the install of its reference environment's lock.

    Raises:
        DockerfileError: an instruction twin cannot honour (one line, with the line number);
            `RunRefused` for a RUN.
    """
    context = path.parent.resolve()
    try:
        parser = DockerfileParser(fileobj=open(path, "rb"), env_replace=True)
        structure = parser.structure
    except (OSError, ValueError) as exc:
        raise DockerfileError(f"cannot read {path}: {exc}") from None
    layout = EnvironmentLayout(dockerfile=path.resolve())
    args: dict[str, str] = {}
    stages = 0
    for item in structure:
        instruction, value = item["instruction"].upper(), item["value"]
        where = f"{path.name}:{item['startline'] + 1}"
        if instruction == "COMMENT":
            continue
        if instruction == "FROM":
            stages += 1
            if stages > 1:
                raise DockerfileError(f"{where}: multi-stage builds (a second FROM) need docker")
            if image is None:
                layout.notes.append(f"{where}: FROM {value}: twin runs with its own environment")
            else:
                layout.notes.append(
                    f"{where}: FROM {value}: built as {image}; commands run in it with twin's own interpreter"
                )
        elif instruction == "ARG":
            for key, val in extract_key_values(True, args, layout.env, value):
                args.setdefault(key, val)
        elif instruction == "ENV":
            for key, val in extract_key_values(True, args, layout.env, value):
                if SECRET_NAME.search(key):
                    layout.notes.append(f"{where}: ENV {key} not passed on (looks like a secret)")
                elif key in SANDBOX_OWNED_ENV:
                    layout.notes.append(f"{where}: ENV {key} not passed on (twin's sandbox sets it)")
                else:
                    layout.env[key] = val
        elif instruction == "WORKDIR":
            words = _words(value, args, layout.env)
            layout.workdir = _absolute(words[0] if words else "/", layout.workdir)
        elif instruction in ("COPY", "ADD"):
            layout.copies += _copy(instruction, value, args, layout, context, where)
        elif instruction == "RUN" and normalized_run(value) in (honoured or {}):
            laid = (honoured or {})[normalized_run(value)]
            if laid is None:
                layout.notes.append(f"{where}: RUN installs the original's dependencies: its reference environment")
            else:
                layout.copies.append(laid)
                layout.notes.append(f"{where}: RUN lays out the declared original at {laid.inside} (hash checked)")
        elif instruction == "RUN":
            _run(value, args, layout, context, where, ignore_run, image)
        elif instruction in SKIPPED:
            layout.notes.append(f"{where}: {instruction} skipped (no effect on the files laid out)")
        else:
            raise DockerfileError(f"{where}: {instruction} is not supported without docker")
    if stages == 0:
        raise DockerfileError(f"{path}: no FROM instruction (not a Dockerfile)")
    return layout


def normalized_run(text: str) -> str:
    """A RUN's text with line continuations and runs of blanks folded, for comparison."""
    return " ".join(text.replace("\\\n", " ").split())


def _words(value: str, args: dict[str, str], env: dict[str, str]) -> list[str]:
    """Split an instruction's arguments (JSON exec form or shell words), expanding variables."""
    words = _exec_form(value)
    if words is not None:
        return [" ".join(WordSplitter(w, args=args, envs=env).split()) for w in words]
    return list(WordSplitter(value, args=args, envs=env).split())


def _exec_form(value: str) -> list[str] | None:
    """The words of an instruction in JSON exec form (`RUN ["a", "b"]`), else None."""
    stripped = value.strip()
    if not stripped.startswith("["):
        return None
    try:
        words = json.loads(stripped)
    except ValueError:
        return None
    return words if isinstance(words, list) and all(isinstance(w, str) for w in words) else None


def _absolute(dest: str, workdir: str) -> str:
    return os.path.normpath(dest if dest.startswith("/") else f"{workdir}/{dest}")


def _copy(instruction, value, args, layout, context: Path, where: str) -> list[LaidOut]:
    """The files one COPY/ADD lays out (Docker's rules: a directory's contents go to the target)."""
    words = _words(value, args, layout.env)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        raise DockerfileError(f"{where}: {instruction} --from (another stage or image) needs docker")
    if flags:
        layout.notes.append(f"{where}: {' '.join(flags)} ignored (files are laid out read-only)")
    if len(paths) < 2:
        raise DockerfileError(f"{where}: {instruction} needs a source and a destination")
    *sources, dest = paths
    into_dir = dest.endswith("/") or len(sources) > 1
    target = _absolute(dest, layout.workdir)
    out: list[LaidOut] = []
    for source in sources:
        if instruction == "ADD" and (re.match(r"^[a-z]+://", source) or source.endswith(ARCHIVES)):
            raise DockerfileError(f"{where}: ADD {source} (a URL or an archive to unpack) needs docker")
        matches = sorted(glob.glob(str(context / source))) if glob.has_magic(source) else [str(context / source)]
        if not matches:
            raise DockerfileError(f"{where}: {instruction} source {source} not found in the build context")
        for match in matches:
            named = f"{source} ({Path(match).name})" if glob.has_magic(source) else source
            host = _contained(Path(match), context, f"{where}: {instruction} source {named}")
            if not host.exists():
                raise DockerfileError(f"{where}: {instruction} source {source} not found in the build context")
            if host == context:
                # the whole context: each entry at the target, except the Dockerfile's own files
                skip = {"Dockerfile", ".dockerignore"}
                out += [
                    LaidOut(host=_contained(c, context, f"{where}: {instruction} {source}: {c.name}"),
                            inside=f"{target}/{c.name}")
                    for c in sorted(context.iterdir()) if c.name not in skip
                ]  # fmt: skip
            elif host.is_dir():
                out.append(LaidOut(host=host, inside=target))
            else:
                inside = f"{target}/{host.name}" if into_dir or glob.has_magic(source) else target
                out.append(LaidOut(host=host, inside=os.path.normpath(inside)))
    return out


def _contained(path: Path, context: Path, what: str) -> Path:
    """`path` resolved (every link followed), refused unless it stays inside the build context.

    Every laid-out host path goes through here, the entries of a whole-context copy
    (`COPY . /app/`) included: a link in the context to a host directory or to another
    task's tests would otherwise be mounted where it points.

    Raises:
        DockerfileError: one line saying what leads where.
    """
    host = path.resolve()
    if host == context or context in host.parents:
        return host
    shown = f" (a link to {os.readlink(path)})" if path.is_symlink() else ""
    raise DockerfileError(f"{what}{shown} lies outside the build context")


def _run(
    value: str, args, layout: EnvironmentLayout, context: Path, where: str, ignore_run: bool, image: str | None
) -> None:
    """Accept a RUN twin's environment already satisfies (pip install, mkdir) or `image` honours, else refuse it."""
    exec_form = _exec_form(value)
    try:
        tokens = exec_form if exec_form is not None else shlex.split(value.replace("\\\n", " "))
    except ValueError:
        tokens = None
    commands: list[list[str]] = [[]]
    for token in tokens or []:
        if token in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(token)
    commands = [c for c in commands if c]
    problems: list[str] = []
    present: list[str] = []
    if tokens is None:
        problems.append("cannot be split into commands")
    for command in commands:
        try:
            packages = _pip_packages(command, layout, context, where)
        except RunRefused:
            if image is None:
                raise
            packages = None  # a requirements file an earlier RUN made: the image has it
        system = _apt_packages(command)
        if system is not None:
            for name in system:
                if _system_installed(name):
                    present.append(name)
                else:
                    problems.append(f"system package {name} is not installed on this machine")
        elif packages is not None:
            for name in packages:
                if _installed(name):
                    present.append(name)
                else:
                    problems.append(f"pip package {name} is not installed in twin's environment")
        elif command[0] not in NOOP_COMMANDS:
            problems.append(f"`{' '.join(command)[:60]}` cannot run without docker")
    if image is not None:
        installed = [p for p in problems if "is not installed" in p]
        if installed:  # installed into the image, whose interpreter twin's own covers
            layout.notes.append(
                f"{where}: RUN ran in {image}, but commands use twin's interpreter and system directories: "
                f"{installed[0]}"
            )
        elif problems:
            layout.notes.append(f"{where}: RUN honoured in {image}")
    elif problems and not ignore_run:
        raise RunRefused(
            f"{where}: RUN {problems[0]} (use a docker sandbox, install it, or set ignore_run = true in --settings)"
        )
    elif problems:
        layout.notes.append(f"{where}: RUN not honoured (ignore_run): {problems[0]}")
    if present:
        layout.notes.append(f"{where}: RUN install accepted: {', '.join(present)} already in twin's environment")


def _pip_packages(command: list[str], layout: EnvironmentLayout, context: Path, where: str) -> list[str] | None:
    """The distribution names a `pip install` command asks for (None: not a pip install)."""
    words = command
    if len(words) >= 3 and re.fullmatch(r"python[\d.]*", words[0]) and words[1:3] == ["-m", "pip"]:
        words = ["pip", *words[3:]]
    if len(words) < 2 or not re.fullmatch(r"pip[\d.]*", words[0]) or words[1] != "install":
        return None
    names: list[str] = []
    rest = iter(words[2:])
    for word in rest:
        if word in ("-r", "--requirement"):
            names += _requirements_file(next(rest, ""), layout, context, where)
        elif word in PIP_VALUE_OPTIONS:
            next(rest, None)
        elif not word.startswith("-"):
            names.append(_distribution_name(word))
    return names


def _apt_packages(command: list[str]) -> list[str] | None:
    """The packages an `apt-get install` asks for ([] for `apt-get update`; None: not apt)."""
    if not command or command[0] not in ("apt-get", "apt"):
        return None
    if command[1:2] in (["update"], ["clean"]) or command[1:3] == ["autoremove", "-y"]:
        return []
    if "install" not in command:
        return None
    after = command[command.index("install") + 1 :]
    return [w.split("=")[0] for w in after if not w.startswith("-")]


def _system_installed(name: str) -> bool:
    """Whether a Debian package is installed here (dpkg says so), or a program of that name exists."""
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, timeout=20)
        if proc.returncode == 0 and "install ok installed" in proc.stdout:
            return True
    except (OSError, subprocess.SubprocessError):
        pass
    return shutil.which(name) is not None


def _requirements_file(inside: str, layout: EnvironmentLayout, context: Path, where: str) -> list[str]:
    """Requirement names of a requirements file the Dockerfile copied in (or one in the context)."""
    inside = _absolute(inside, layout.workdir)
    host = None
    for copy in reversed(layout.copies):
        pure, inside_pure = PurePosixPath(copy.inside), PurePosixPath(inside)
        if inside_pure == pure or pure in inside_pure.parents:
            host = copy.host / inside_pure.relative_to(pure) if copy.host.is_dir() else copy.host
            break
    if host is None or not host.is_file():
        raise RunRefused(f"{where}: RUN pip install -r {inside}: the file is not laid out by a COPY before it")
    lines = [line.split("#")[0].strip() for line in host.read_text().splitlines()]
    return [_distribution_name(line) for line in lines if line and not line.startswith("-")]


def _distribution_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
