"""Run the code blocks of README.rst and docs/*.rst (used by ``tests/test_doc_examples.py``).

The rules, as README.rst's "Documentation examples" section states them for authors:

* Every ``.. code-block:: LANG``, ``.. code:: LANG`` and ``::`` literal block is collected.
  A ``::`` block is a console transcript when a line starts with ``$ ``, Python when it
  compiles, and an error otherwise (it must say what it is).
* Python blocks of one page run in order, in one namespace (a module named ``__main__``
  whose file is in the page's temporary folder, so ``Flask(__name__)`` puts its instance
  folder there), with ``-W error``, in a process of its own whose working directory is a
  fresh temporary folder holding a copy of the repository's ``examples/``: a runner
  subprocess (:func:`run_plans`, several pages) forks one child per page before any page
  ran, so each page starts from the state of a fresh interpreter that imported
  :data:`PRELOADED`; a page is killed at its timeout and a crash fails that page alone.
* ``.. doc-example: file NAME`` before a block writes the block to ``NAME`` in that folder
  instead of running it. When a page wrote ``test_*.py`` files, pytest runs on the folder
  after the page and must pass with one test per ``test_*`` function.
* Console blocks: each ``$ `` command (``\\`` continues a line; leading ``NAME=value``
  words set the environment) whose program is ``flask`` or ``.venv/bin/flask`` runs in the
  page's folder through click's test runner, as a terminal would show it (hidden prompts
  get :data:`PASSWORD`), in a child forked for it by a process that no page touched. A
  command that loads ``app.py`` (``--app app``, or no app named)
  in a folder without one runs against :data:`DEFAULT_APP`, written there as ``app.py``.
  The output shown under the command must match (``...`` matches anything, trailing
  spaces are ignored; no output shown means it is not compared); the exit status must be
  0 unless the shown output has an ``Error:`` line.
* ``.. doc-example: skip REASON`` before a block skips it; a console block with a command
  that cannot run here (``flask run``, ``curl``, ``./scripts/test``, ``pip``) must have
  one, and the reason may not be empty.
* ``.. code-block:: text`` is shown, never run (directory layouts, HTTP transcripts).

Run as a script (``run BATCH``), this module is the page runner; it then imports only the
standard library and :data:`PRELOADED`.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HELPER = Path(__file__).resolve()
#: The password typed at every prompt of a documented command.
PASSWORD = "plum tuesday kettle orbit 47"

PYTHON_LANGUAGES = frozenset({"python", "py", "python3"})
CONSOLE_LANGUAGES = frozenset({"console", "shell-session"})
SHOWN_ONLY_LANGUAGES = frozenset({"text"})
FLASK_PROGRAMS = frozenset({"flask", ".venv/bin/flask"})
#: ``flask`` subcommands that serve or wait for a person: never run here.
INTERACTIVE_FLASK_COMMANDS = frozenset({"run", "shell"})

_DIRECTIVE = re.compile(r"^(\s*)\.\. (?:code-block|code|sourcecode)::\s*(\S*)\s*$")
_MARKER = re.compile(r"^\s*\.\. doc-example:\s*(\S*)\s*(.*?)\s*$")
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Block:
    """One code block of a page: ``line`` is the 1-based line of its first content line."""

    page: str
    line: int
    language: str
    text: str
    marker: str | None = None  # "file" or "skip"
    argument: str = ""  # the file name, or the skip reason


@dataclass(frozen=True)
class Command:
    """One ``$`` command of a console block and the output shown under it."""

    line: int
    text: str
    expected: str


@dataclass
class Plan:
    """What the page runner does for one page, in order."""

    page: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[Block] = field(default_factory=list)
    test_files: dict[str, int] = field(default_factory=dict)  # name -> number of tests


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(lines: list[str], start: int, parent_indent: int) -> tuple[int, int, str]:
    """The indented block at or after ``start`` deeper than ``parent_indent``.

    Returns (index of its first line, index after its last line, dedented text).
    """
    index = start
    while index < len(lines) and not lines[index].strip():
        index += 1
    first = index
    if first >= len(lines) or _indent(lines[first]) <= parent_indent:
        return first, first, ""
    end = first
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > parent_indent):
        end += 1
    while end > first and not lines[end - 1].strip():
        end -= 1
    return first, end, textwrap.dedent("\n".join(lines[first:end])) + "\n"


def _literal_language(text: str) -> str:
    """``::`` blocks: a console transcript when a line starts with ``$``, else Python if it
    compiles; anything else must say what it is."""
    if any(line.startswith("$ ") for line in text.splitlines()):
        return "console"
    try:
        compile(text, "<literal block>", "exec")
    except SyntaxError:
        return "literal"
    return "python"


def parse_blocks(path: Path, name: str | None = None) -> tuple[list[Block], list[str]]:
    """The code blocks of one RST file, and what is wrong with its markers."""
    page = name or path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    errors: list[str] = []
    marker: tuple[int, str, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        found = _MARKER.match(line)
        if found is not None:
            kind, argument = found.groups()
            if marker is not None:
                errors.append(f"{page}:{marker[0]}: doc-example marker not followed by a code block")
            marker = (index + 1, kind, argument)
            index += 1
            continue
        directive = _DIRECTIVE.match(line)
        literal = (
            directive is None
            and line.rstrip().endswith("::")
            and not line.lstrip().startswith(".. ")
            and not line.lstrip().startswith("..\t")
        )
        if directive is None and not literal:
            index += 1
            continue
        parent = _indent(line)
        start = index + 1
        if directive is not None:
            language = directive.group(2).lower()
            while (
                start < len(lines) and lines[start].strip().startswith(":") and _indent(lines[start]) > parent
            ):
                start += 1  # directive options (:caption:, :linenos:)
        first, end, text = _content(lines, start, parent)
        if directive is None:
            if not text:  # a directive-like line with nothing under it (``.. contents::`` is excluded above)
                index += 1
                continue
            language = _literal_language(text)
        if not language:
            errors.append(f"{page}:{index + 1}: a code block without a language")
        kind, argument = (None, "")
        if marker is not None:
            _, kind, argument = marker
            marker = None
        blocks.append(Block(page, first + 1, language, text, kind, argument))
        index = max(end, index + 1)
    if marker is not None:
        errors.append(f"{page}:{marker[0]}: doc-example marker not followed by a code block")
    return blocks, errors


def parse_console(block: Block) -> list[Command]:
    """The ``$`` commands of a console block with the output shown under each."""
    commands: list[Command] = []
    lines = block.text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            if line.strip() and not commands:
                raise ValueError(f"{block.page}:{block.line + index}: output before the first $ command")
            index += 1
            continue
        start = index
        text = line[2:]
        while text.endswith("\\") and index + 1 < len(lines):
            index += 1
            text = text[:-1].rstrip() + " " + lines[index].strip()
        index += 1
        expected: list[str] = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        commands.append(Command(block.line + start, text.strip(), "\n".join(expected).strip("\n")))
    return commands


def flask_invocation(command: Command) -> tuple[dict[str, str], list[str]] | None:
    """``(environment, arguments)`` when the command is a ``flask`` command the harness runs."""
    try:
        words = shlex.split(command.text)
    except ValueError:
        return None
    env: dict[str, str] = {}
    while words and _ENV_WORD.match(words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if (
        not words
        or words[0] not in FLASK_PROGRAMS
        or any(word in {"|", ">", "<", "&&", ";"} for word in words)
    ):
        return None
    arguments = words[1:]
    # the first positional word after the options is the subcommand (``--app X`` takes a value)
    values_of = {"--app", "-A", "--env-file", "-e"}
    subcommand = None
    skip_next = False
    for word in arguments:
        if skip_next:
            skip_next = False
            continue
        if word in values_of:
            skip_next = True
            continue
        if not word.startswith("-"):
            subcommand = word
            break
    if subcommand is None or subcommand in INTERACTIVE_FLASK_COMMANDS:
        return None
    return env, arguments


def output_matches(expected: str, actual: str) -> bool:
    """``actual`` matches ``expected`` where ``...`` stands for anything; trailing spaces do
    not count, nor do blank lines around the output."""
    wanted = "\n".join(line.rstrip() for line in expected.strip("\n").splitlines())
    got = "\n".join(line.rstrip() for line in actual.splitlines()).strip("\n")
    pattern = ".*?".join(re.escape(part) for part in wanted.split("..."))
    return re.fullmatch(pattern, got, re.DOTALL) is not None


def count_tests(source: str) -> int:
    """The ``test_*`` functions a documented test file defines (one test each)."""
    tree = ast.parse(source)
    return sum(
        1
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    )


def plan_page(path: Path, name: str | None = None) -> Plan:
    """Check a page's blocks against the rules and list what the runner does."""
    if name is not None:
        page = name
    else:
        page = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
    blocks, errors = parse_blocks(path, page)
    plan = Plan(page=page, errors=errors)
    for block in blocks:
        where = f"{page}:{block.line}"
        if block.marker not in (None, "file", "skip"):
            plan.errors.append(
                f"{where}: unknown doc-example marker {block.marker!r} (file NAME or skip REASON)"
            )
            continue
        if block.marker == "skip":
            if not block.argument:
                plan.errors.append(f"{where}: doc-example: skip needs a reason")
            plan.skipped.append(block)
            continue
        if block.marker == "file":
            name_ = block.argument
            if not name_ or name_.startswith(("/", "~")) or ".." in Path(name_).parts:
                plan.errors.append(f"{where}: doc-example: file needs a relative file name, got {name_!r}")
                continue
            plan.steps.append({"kind": "file", "where": where, "name": name_, "text": block.text})
            if Path(name_).name.startswith("test_") and name_.endswith(".py"):
                try:
                    plan.test_files[name_] = count_tests(block.text)
                except SyntaxError as exc:
                    plan.errors.append(f"{where}: {name_} does not parse: {exc}")
            continue
        if block.language in SHOWN_ONLY_LANGUAGES:
            continue
        if block.language in PYTHON_LANGUAGES:
            plan.steps.append({"kind": "python", "where": where, "line": block.line, "text": block.text})
            continue
        if block.language in CONSOLE_LANGUAGES:
            try:
                commands = parse_console(block)
            except ValueError as exc:
                plan.errors.append(str(exc))
                continue
            if not commands:
                plan.errors.append(f"{where}: a console block without a $ command")
            for command in commands:
                invocation = flask_invocation(command)
                if invocation is None:
                    plan.errors.append(
                        f"{page}:{command.line}: cannot run `{command.text}` in a test: run only flask "
                        "commands here, or put `.. doc-example: skip REASON` before the block"
                    )
                    continue
                env, arguments = invocation
                plan.steps.append(
                    {
                        "kind": "flask",
                        "where": f"{page}:{command.line}",
                        "env": env,
                        "args": arguments,
                        "expected": command.expected,
                    }
                )
            continue
        if block.language == "literal":
            plan.errors.append(
                f"{where}: a `::` block that is neither Python nor a console transcript: use "
                "`.. code-block:: console` with `$ ` commands, `.. code-block:: text` for what is "
                "not code, or put `.. doc-example: skip REASON` before it"
            )
            continue
        plan.errors.append(
            f"{where}: a {block.language!r} block cannot run: use python, console or text, "
            "or put `.. doc-example: skip REASON` before it"
        )
    plan.errors.sort(key=_error_line)
    return plan


def _error_line(error: str) -> int:
    found = re.match(r"^[^:]*:(\d+):", error)
    return int(found.group(1)) if found else 0


# -- running -------------------------------------------------------------------------------------


@dataclass
class RunResult:
    completed: int
    failure: str | None
    output: str


def clean_environment() -> dict[str, str]:
    """The environment of a reader's shell: none of the test run's pytest, Flask or
    flask-authflow settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "FLASK_", "AUTHFLOW_", "COV_"))
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def python_executable() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def prepare_folder(folder: Path) -> None:
    """A fresh folder holding a copy of ``examples/``, as a checkout's root would."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        REPO / "examples",
        folder / "examples",
        # flask_login_migration: an app with a test suite of its own (run by
        # tests/test_example_flask_login_migration.py), which pytest on a page's files would collect
        ignore=shutil.ignore_patterns("instance", "__pycache__", "*.db", "flask_login_migration"),
    )


#: The files of a page's run, beside its folder: what to run, how it ended, what it printed.
RUN_FILES = ("plan.json", "result.json", "log")


def run_plan(plan: Plan, folder: Path, *, timeout: float = 180) -> RunResult:
    """Run one page's plan in a runner subprocess whose page child works in ``folder``."""
    return run_plans([(plan, folder)], timeout=timeout)[0]


def run_plans(jobs: list[tuple[Plan, Path]], *, timeout: float = 180) -> list[RunResult]:
    """Run several pages' plans, in order, in one runner subprocess: each page runs in a child
    forked from it before any page ran (a fresh namespace and folder, ``timeout`` seconds)."""
    batch = []
    for plan, folder in jobs:
        prepare_folder(folder)
        files = {kind: folder.parent / f"{folder.name}-{kind}" for kind in RUN_FILES}
        files["plan.json"].write_text(json.dumps({"page": plan.page, "steps": plan.steps}))
        batch.append({"folder": str(folder), "timeout": timeout, **{k: str(v) for k, v in files.items()}})
    batch_file = jobs[0][1].parent / f"{jobs[0][1].name}-batch.json"
    batch_file.write_text(json.dumps(batch))
    try:
        process = subprocess.run(
            [python_executable(), "-P", "-W", "error", str(HELPER), "run", str(batch_file)],
            cwd=jobs[0][1].parent,
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=timeout * len(jobs) + 60,
            check=False,
        )
        crashed = f"the page runner crashed:\n{(process.stdout + process.stderr)[-4000:]}"
    except subprocess.TimeoutExpired:
        crashed = "the page runner did not finish"
    return [_page_result(plan, job, crashed) for (plan, _), job in zip(jobs, batch, strict=True)]


def _page_result(plan: Plan, job: dict[str, Any], crashed: str) -> RunResult:
    log = Path(job["log"])
    output = log.read_text(errors="replace") if log.exists() else ""
    result_file = Path(job["result.json"])
    if not result_file.exists():
        return RunResult(0, f"{plan.page}: {crashed}", output)
    result = json.loads(result_file.read_text())
    return RunResult(result["completed"], result["failure"], output)


#: pytest plugins of this test environment that neither a page's tests nor an example app's
#: suite use, and that a reader's environment does not have: a pytest run in a subprocess
#: starts without them (Hypothesis and Schemathesis alone cost about 2 s of CPU to import).
#: flask-authflow's plugin stays: it is part of what those runs check.
UNUSED_PLUGINS = ("hypothesispytest", "schemathesis", "requests_mock", "xdist", "xdist.looponfail")


def without_unused_plugins() -> list[str]:
    """The ``-p no:NAME`` options for :data:`UNUSED_PLUGINS`."""
    return [option for plugin in UNUSED_PLUGINS for option in ("-p", f"no:{plugin}")]


def run_pytest(folder: Path, *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """pytest on the files a page wrote, as its reader would run them."""
    return subprocess.run(
        [
            python_executable(),
            "-m",
            "pytest",
            "-W",
            "error",
            "-p",
            "no:cacheprovider",
            *without_unused_plugins(),
            "-q",
            "--rootdir",
            ".",
        ],
        cwd=folder,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- the default app of console blocks -------------------------------------------------------------

#: The ``app.py`` that ``flask`` commands of a page that wrote none run against: SQLite in the
#: page's folder, a fixed signing key, an issuer (for ``mint`` and ``rotate-key``) and one
#: user, ``alice`` in tenant ``default`` with :data:`PASSWORD`. ``TESTING`` lets the fast
#: Argon2 parameters through: test-only settings.
DEFAULT_APP = f"""
from pathlib import Path

from flask import Flask

from flask_authflow import AuthFlow
from flask_authflow.errors import UserExists

folder = Path(__file__).resolve().parent
app = Flask(__name__, instance_path=str(folder / "instance"))
app.config.update(
    TESTING=True,
    AUTHFLOW_SIGNING_KEY="doc-examples-signing-key-0123456789abcdef",
    AUTHFLOW_DATABASE_URL=f"sqlite:///{{folder / 'authflow.db'}}",
    AUTHFLOW_ARGON2_TIME_COST=1,
    AUTHFLOW_ARGON2_MEMORY_COST=1024,
    AUTHFLOW_ARGON2_PARALLELISM=1,
    AUTHFLOW_ISSUER="https://issuer.example",
)
authflow = AuthFlow(app)
with app.app_context():
    try:
        authflow.accounts.create("alice", {PASSWORD!r})
    except UserExists:
        pass
"""


# -- the subprocess side ---------------------------------------------------------------------------


def _uses_app_py(env: dict[str, str], args: list[str]) -> bool:
    """The command loads ``app.py`` of the folder: ``--app app`` or no app named at all."""
    named = env.get("FLASK_APP")
    for index, arg in enumerate(args):
        if arg in {"--app", "-A"} and index + 1 < len(args):
            named = args[index + 1]
        elif arg.startswith("--app="):
            named = arg.partition("=")[2]
    return named in (None, "app", "app.py")


def _run_flask_step(step: dict[str, Any]) -> str | None:
    folder = Path.cwd()
    env = clean_environment()
    env.update(step["env"])
    if _uses_app_py(step["env"], step["args"]) and not (folder / "app.py").exists():
        (folder / "app.py").write_text(DEFAULT_APP)
    request = folder.parent / f"{folder.name}-flask.json"
    outcome_file = folder.parent / f"{folder.name}-flask-outcome.json"
    log = folder.parent / f"{folder.name}-flask.log"
    outcome_file.unlink(missing_ok=True)
    request.write_text(json.dumps({"args": step["args"]}))
    job = {"cwd": str(folder), "env": env, "request": str(request), "outcome": str(outcome_file)}
    status = _COMMANDS.run({**job, "log": str(log)})
    if status != 0 or not outcome_file.exists():
        return f"the flask command runner crashed (status {status}):\n{log.read_text(errors='replace')}"
    outcome = json.loads(outcome_file.read_text())
    shown = step["expected"]
    expects_error = any(line.startswith("Error:") for line in shown.splitlines())
    if outcome["exception"]:
        return f"flask {' '.join(step['args'])} raised:\n{outcome['exception']}"
    if (outcome["exit_code"] != 0) != expects_error:
        return (
            f"flask {' '.join(step['args'])} exited with {outcome['exit_code']}; output:\n{outcome['output']}"
        )
    if shown and not output_matches(shown, outcome["output"]):
        return f"flask {' '.join(step['args'])} printed:\n{outcome['output']}\nthe page shows:\n{shown}"
    return None


def _main_module(folder: Path) -> types.ModuleType:
    module = types.ModuleType("__main__")
    module.__file__ = str(folder / "doc_example.py")
    module.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = module
    return module


def _run_page(plan_path: Path, result_path: Path) -> None:
    plan = json.loads(plan_path.read_text())
    folder = Path.cwd()
    sys.path.insert(0, str(folder))  # as `python` started in the reader's project folder
    module = _main_module(folder)
    completed = 0
    failure = None
    page_file = REPO / plan["page"]
    for step in plan["steps"]:
        # Written before each step: a page killed at its timeout is reported at this step.
        progress = {"completed": completed, "failure": None, "running": step["where"]}
        result_path.write_text(json.dumps(progress))
        print(f"step {step['where']}", flush=True)
        try:
            if step["kind"] == "file":
                target = folder / step["name"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(step["text"])
            elif step["kind"] == "python":
                code = compile("\n" * (step["line"] - 1) + step["text"], str(page_file), "exec")
                exec(code, module.__dict__)  # running the documented example is the point
            else:
                problem = _run_flask_step(step)
                if problem is not None:
                    failure = f"{step['where']}: {problem}"
        except BaseException:  # noqa: BLE001 - any failure of an example is reported, with its traceback
            failure = f"{step['where']}: {step['kind']} block failed:\n{traceback.format_exc()}"
        if failure is not None:
            break
        completed += 1
    result_path.write_text(json.dumps({"completed": completed, "failure": failure}))


def _run_flask(request_path: Path, outcome_path: Path) -> None:
    from click.testing import CliRunner
    from flask.cli import cli

    request = json.loads(request_path.read_text())
    runner = CliRunner()
    result = runner.invoke(cli, request["args"], input=f"{PASSWORD}\n" * 4, prog_name="flask")
    exception = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exception = "".join(traceback.format_exception(result.exception))
    outcome = {"exit_code": result.exit_code, "output": result.output, "exception": exception}
    outcome_path.write_text(json.dumps(outcome))


# -- the runner: pages and commands in forked children ----------------------------------------------

#: What the runner imports before it forks anything, so that no page or command pays for it
#: again: a child starts as a fresh ``python -P -W error`` that has imported these.
PRELOADED = ("flask", "flask.cli", "click.testing", "flask_authflow")


def _wait(pid: int, timeout: float) -> int | None:
    """The exit status of child ``pid`` (negative: killed by that signal); ``None`` when it
    did not end within ``timeout`` seconds (it is killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)


def _in_child(work: Callable[[], None], cwd: str, log: str) -> None:
    """In a forked child: run ``work()`` in ``cwd`` with its output to ``log``, then exit."""
    status = 1
    try:
        os.chdir(cwd)
        with open(log, "wb") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
        work()
        status = 0
    except BaseException:  # noqa: BLE001 - reported in the log, the status says it failed
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


class _CommandServer:
    """A process forked from the runner before any page ran, which forks one child per
    ``flask`` command of a page: every command starts as a fresh interpreter would, in the
    page's folder with the command's environment, however far its page has gone."""

    def __init__(self) -> None:
        self.requests: Any = None
        self.replies: Any = None

    def start(self) -> None:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        if os.fork() == 0:
            os.close(request_write)
            os.close(reply_read)
            self._serve(os.fdopen(request_read), os.fdopen(reply_write, "w"))
        os.close(request_read)
        os.close(reply_write)
        self.requests = os.fdopen(request_write, "w")
        self.replies = os.fdopen(reply_read)

    def run(self, job: dict[str, Any]) -> int | None:
        """Run one command (see ``_serve``) and return its exit status."""
        self.requests.write(json.dumps(job) + "\n")
        self.requests.flush()
        status: int | None = json.loads(self.replies.readline())
        return status

    def _serve(self, requests: Any, replies: Any) -> None:
        for line in requests:
            job = json.loads(line)
            pid = os.fork()
            if pid == 0:
                os.environ.clear()
                os.environ.update(job["env"])
                command = functools.partial(_run_flask, Path(job["request"]), Path(job["outcome"]))
                _in_child(command, job["cwd"], job["log"])
            replies.write(json.dumps(_wait(pid, 120)) + "\n")
            replies.flush()
        os._exit(0)


_COMMANDS = _CommandServer()


def _run_batch(batch_path: Path) -> None:
    """Run each page of the batch in a child forked from this (untouched) process."""
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    _COMMANDS.start()
    for job in json.loads(batch_path.read_text()):
        plan, result = Path(job["plan.json"]), Path(job["result.json"])
        pid = os.fork()
        if pid == 0:
            _in_child(functools.partial(_run_page, plan, result), job["folder"], job["log"])
        status = _wait(pid, job["timeout"])
        if status == 0 and "running" not in json.loads(result.read_text() if result.exists() else "{}"):
            continue
        _record_lost_page(job, status)


def _record_lost_page(job: dict[str, Any], status: int | None) -> None:
    """A page child that was killed at its timeout, or died without its result."""
    result = Path(job["result.json"])
    progress = json.loads(result.read_text()) if result.exists() else {"completed": 0}
    where = progress.get("running", json.loads(Path(job["plan.json"]).read_text())["page"])
    if status is None:
        failure = f"{where}: did not finish within {job['timeout']:.0f} s"
    else:
        log = Path(job["log"]).read_text(errors="replace")
        failure = f"{where}: the page runner crashed (status {status}):\n{log[-4000:]}"
    result.write_text(json.dumps({"completed": progress["completed"], "failure": failure}))


def iter_pages() -> Iterator[Path]:
    """README.rst (and the other top-level pages), then every page of docs/."""
    yield from sorted(REPO.glob("*.rst"))
    yield from sorted((REPO / "docs").glob("*.rst"))


def _entry(argv: list[str]) -> None:
    if argv[:1] == ["run"] and len(argv) == 2:
        _run_batch(Path(argv[1]))
    else:
        raise SystemExit("usage: doc_examples.py run BATCH")


__all__ = [
    "PASSWORD",
    "Block",
    "Command",
    "Plan",
    "RunResult",
    "count_tests",
    "flask_invocation",
    "iter_pages",
    "output_matches",
    "parse_blocks",
    "parse_console",
    "plan_page",
    "run_plan",
    "run_plans",
    "run_pytest",
]

if __name__ == "__main__":
    _entry(sys.argv[1:])
