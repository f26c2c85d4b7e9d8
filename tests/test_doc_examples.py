"""Every code block of README.rst and docs/ runs, so a documented example cannot fail.

The rules are in ``tests/doc_examples.py`` and README.rst ("Documentation examples").
One test per page: a failure names the page and the line of the block.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import textwrap
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from flask import Flask

from examples.reference.app import create_app
from flask_authflow.testing._users import add_user
from tests import doc_examples
from tests.doc_examples import (
    PASSWORD,
    REPO,
    Block,
    Command,
    Plan,
    RunResult,
    output_matches,
    parse_blocks,
    parse_console,
    plan_page,
    run_plan,
    run_plans,
    run_pytest,
)

PAGES = list(doc_examples.iter_pages())
PASSED = re.compile(r"^(\d+) passed in [\d.]+s", re.MULTILINE)


def _page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


#: Pages per runner process: a runner forks a child per page (and per ``flask`` command), so a
#: page still starts from a fresh interpreter's state without paying for one.
PAGES_PER_RUNNER = 8


class PageRuns:
    """The pages' runs of this session, made a batch at a time: the first test of a batch runs
    it and the others read their page's result."""

    def __init__(self, selected: list[Path], folders: pytest.TempPathFactory) -> None:
        self.selected = selected
        self.folders = folders
        self.results: dict[Path, tuple[Path, RunResult]] = {}

    def run(self, page: Path, plan: Plan) -> tuple[Path, RunResult]:
        if page not in self.results:
            self._run_batch(page, plan)
        return self.results[page]

    def _run_batch(self, page: Path, plan: Plan) -> None:
        jobs: list[tuple[Path, Plan]] = [(page, plan)]
        following = self.selected[self.selected.index(page) + 1 :] if page in self.selected else []
        for other in following:
            if len(jobs) == PAGES_PER_RUNNER:
                break
            other_plan = plan_page(other)
            if other not in self.results and other_plan.steps and not other_plan.errors:
                jobs.append((other, other_plan))
        folders = [self.folders.mktemp(_page_id(p).replace("/", "-")) / "page" for p, _ in jobs]
        results = run_plans([(p, folder) for (_, p), folder in zip(jobs, folders, strict=True)])
        for (done, _), folder, result in zip(jobs, folders, results, strict=True):
            self.results[done] = (folder, result)


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> PageRuns:
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_page_examples_run"
    ]
    return PageRuns(selected, tmp_path_factory)


@pytest.mark.slow  # a subprocess per batch of pages and a child per page and per command
@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_examples_run(page: Path, page_runs: PageRuns) -> None:
    plan = plan_page(page)
    assert plan.errors == [], "\n".join(plan.errors)
    if not plan.steps:
        assert not plan.test_files
        return
    folder, result = page_runs.run(page, plan)
    assert result.failure is None, result.failure
    assert result.completed == len(plan.steps), result.output[-4000:]
    if plan.test_files:
        expected = sum(plan.test_files.values())
        run = run_pytest(folder)
        assert run.returncode == 0, (
            f"{plan.page}: the page's tests fail:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
        )
        summary = PASSED.search(run.stdout)
        assert summary is not None, run.stdout[-2000:]
        assert int(summary.group(1)) == expected, (
            f"{plan.page}: {summary.group(0)}, the page defines {expected}"
        )


def test_every_page_is_checked() -> None:
    """No page is left out: every .rst of the repository root and of docs/, subfolders included."""
    checked = {_page_id(page) for page in doc_examples.iter_pages()}
    assert {"README.rst", "docs/index.rst", "docs/quickstart.rst"} <= checked
    pages = {_page_id(path) for path in REPO.glob("*.rst")}
    pages |= {_page_id(path) for path in (REPO / "docs").rglob("*.rst") if "_build" not in path.parts}
    assert pages == checked


# -- the harness's rules, on pages written for these tests -----------------------------------------


def _page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.rst"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_parser_finds_every_kind_of_block(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        Title
        =====

        .. code-block:: python

            x = 1

        .. code:: console

            $ flask --app app authflow users list

        A literal block::

            y = x + 1

        * In a list item::

              $ flask routes

        .. doc-example: skip not code

        .. code-block:: ini
           :caption: a caption

           [pytest]

        .. code-block:: text

            a/
              b
        """,
    )
    blocks, errors = parse_blocks(page)
    assert errors == []
    assert [(b.line, b.language, b.text.strip(), b.marker) for b in blocks] == [
        (6, "python", "x = 1", None),
        (10, "console", "$ flask --app app authflow users list", None),
        (14, "python", "y = x + 1", None),
        (18, "console", "$ flask routes", None),
        (25, "ini", "[pytest]", "skip"),
        (29, "text", "a/\n  b", None),
    ]
    assert blocks[4].argument == "not code"


def test_unrunnable_unmarked_blocks_and_reasonless_skips_are_errors(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        .. code-block:: console

            $ curl http://127.0.0.1:5000/

        .. code-block:: console

            $ flask --app app run

        .. doc-example: skip

        .. code-block:: console

            $ ./scripts/test

        .. code-block:: yaml

            a: 1

        .. doc-example: file

        .. code-block:: python

            x = 1

        Install it::

            pip install flask-authflow

        .. doc-example: skip trailing marker
        """,
    )
    plan = plan_page(page, "page.rst")
    assert plan.errors == [
        "page.rst:3: cannot run `curl http://127.0.0.1:5000/` in a test: run only flask commands here, "
        "or put `.. doc-example: skip REASON` before the block",
        "page.rst:7: cannot run `flask --app app run` in a test: run only flask commands here, "
        "or put `.. doc-example: skip REASON` before the block",
        "page.rst:13: doc-example: skip needs a reason",
        "page.rst:17: a 'yaml' block cannot run: use python, console or text, "
        "or put `.. doc-example: skip REASON` before it",
        "page.rst:23: doc-example: file needs a relative file name, got ''",
        "page.rst:27: a `::` block that is neither Python nor a console transcript: use "
        "`.. code-block:: console` with `$ ` commands, `.. code-block:: text` for what is not code, "
        "or put `.. doc-example: skip REASON` before it",
        "page.rst:29: doc-example marker not followed by a code block",
    ]


def test_console_output_is_compared_loosely() -> None:
    block = Block(
        "p.rst",
        10,
        "console",
        "$ flask --app app authflow create-user \\\n    alice\nPassword:\ncreated user 'alice' (id ...)\n"
        "$ FLASK_DEBUG=1 flask --app app authflow users list\n",
    )
    first, second = parse_console(block)
    assert first == Command(
        10, "flask --app app authflow create-user alice", "Password:\ncreated user 'alice' (id ...)"
    )
    assert second.expected == ""
    assert doc_examples.flask_invocation(second) == (
        {"FLASK_DEBUG": "1"},
        ["--app", "app", "authflow", "users", "list"],
    )
    assert output_matches(first.expected, "Password: \ncreated user 'alice' (id 3f9a)\n\n")
    assert not output_matches(first.expected, "Password: \ncreated user 'bob' (id 3f9a)\n")
    assert not output_matches("created", "created user")
    assert output_matches("...\nlast line", "first\nsecond\nlast line")


@pytest.mark.slow  # a page runner subprocess
def test_a_failing_block_is_reported_with_its_page_and_line(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        .. code-block:: python

            total = 1

        .. code-block:: python

            assert total == 2, "the example is wrong"
        """,
    )
    plan = plan_page(page, "page.rst")
    result = run_plan(plan, tmp_path / "run")
    assert result.completed == 1
    assert result.failure is not None
    assert result.failure.startswith("page.rst:7: python block failed:")
    assert "the example is wrong" in result.failure


@pytest.mark.slow  # a page runner subprocess
def test_a_command_whose_output_differs_fails(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        .. code-block:: console

            $ flask --app app authflow users list
            nobody here
        """,
    )
    result = run_plan(plan_page(page, "page.rst"), tmp_path / "run")
    assert result.failure is not None
    assert result.failure.startswith("page.rst:3: flask --app app authflow users list printed:")
    assert "alice" in result.failure  # the default app's user


@pytest.mark.slow  # a page runner subprocess
def test_pages_of_one_runner_do_not_see_each_other(tmp_path: Path) -> None:
    """Two pages in one runner: the second starts without the first's names, modules,
    environment, folder or signal handlers, and a flask command starts fresh too."""
    first = _page(
        tmp_path,
        """\
        .. doc-example: file helper_module.py

        .. code-block:: python

            VALUE = 1

        .. code-block:: python

            import os, signal, helper_module
            leftover = helper_module.VALUE
            os.environ["LEFT_BY_FIRST_PAGE"] = "1"
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        """,
    )
    first_plan = plan_page(first, "first.rst")
    second = tmp_path / "second.rst"
    second.write_text(
        textwrap.dedent(
            """\
            .. code-block:: python

                import os, signal, sys
                from pathlib import Path
                assert "leftover" not in globals() and "helper_module" not in sys.modules
                assert "LEFT_BY_FIRST_PAGE" not in os.environ
                assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
                assert not Path("helper_module.py").exists()

            .. code-block:: console

                $ flask --app app authflow users list
                ...alice...
            """
        )
    )
    results = run_plans([(first_plan, tmp_path / "one"), (plan_page(second, "second.rst"), tmp_path / "two")])
    assert [(r.completed, r.failure) for r in results] == [(2, None), (2, None)]


@pytest.mark.slow  # page runner subprocesses
def test_a_page_that_hangs_or_dies_is_reported_and_the_next_page_runs(tmp_path: Path) -> None:
    hangs = _page(tmp_path, ".. code-block:: python\n\n    import time\n    time.sleep(60)\n")
    dies = tmp_path / "dies.rst"
    exits = "    import os\n    os._exit(3)\n"
    dies.write_text(f".. code-block:: python\n\n    x = 1\n\n.. code-block:: python\n\n{exits}")
    fine = tmp_path / "fine.rst"
    fine.write_text(".. code-block:: python\n\n    assert 1 + 1 == 2\n")
    jobs = [(plan_page(hangs, "hangs.rst"), tmp_path / "a"), (plan_page(dies, "dies.rst"), tmp_path / "b")]
    jobs.append((plan_page(fine, "fine.rst"), tmp_path / "c"))
    hung, died, ran = run_plans(jobs, timeout=2)
    assert (hung.completed, hung.failure) == (0, "hangs.rst:3: did not finish within 2 s")
    assert died.completed == 1
    assert died.failure is not None
    assert died.failure.startswith("dies.rst:7: the page runner crashed (status 3)")
    assert (ran.completed, ran.failure) == (1, None)


def test_documented_test_files_are_counted(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        .. doc-example: file test_thing.py

        .. code-block:: python

            import pytest

            def test_one():
                assert True

            async def test_two():
                pass

            def helper():
                pass
        """,
    )
    plan = plan_page(page, "page.rst")
    assert plan.test_files == {"test_thing.py": 2}
    assert [step["kind"] for step in plan.steps] == ["file"]


# -- the README tour's curl steps, replayed with the test client -----------------------------------


class _Curl:
    """Enough of curl for the README tour: -c/-b cookie jar files, -H, -d, -X, -i."""

    def __init__(self, app: Flask) -> None:
        self.client = app.test_client(use_cookies=False)
        self.jars: dict[str, dict[str, str]] = {}

    def run(self, line: str) -> str:
        words = shlex.split(line)
        if words[0] == "cp":
            self.jars[words[2]] = dict(self.jars[words[1]])
            return ""
        assert words[0] == "curl", line
        method, headers, body, read, write, include, url = "GET", {}, None, None, None, False, None
        words = words[1:]
        while words:
            word = words.pop(0)
            if word == "-c":
                write = words.pop(0)
            elif word == "-b":
                read = words.pop(0)
            elif word == "-H":
                name, _, value = words.pop(0).partition(":")
                headers[name.strip()] = value.strip()
            elif word == "-d":
                body = words.pop(0).replace("…", PASSWORD)  # the password typed at create-user
                method = "POST" if method == "GET" else method
            elif word == "-X":
                method = words.pop(0)
            elif word == "-i":
                include = True
            else:
                url = word
        assert url is not None, line
        jar = dict(self.jars.get(read, {})) if read else {}
        headers["User-Agent"] = "curl/8.5.0"
        if jar:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in jar.items())
        response = self.client.open(urlsplit(url).path, method=method, headers=headers, data=body)
        if write:
            for header in response.headers.getlist("Set-Cookie"):
                cookie = SimpleCookie()
                cookie.load(header)
                for name, morsel in cookie.items():
                    expired = morsel["max-age"] == "0" or "1970" in morsel["expires"]
                    if expired:
                        jar.pop(name, None)
                    else:
                        jar[name] = morsel.value
            self.jars[write] = jar
        text = response.get_data(as_text=True)
        if include:
            head = "\n".join(f"{name}: {value}" for name, value in response.headers.items())
            text = f"HTTP/1.1 {response.status}\n{head}\n\n{text}"
        return text


def _tour_blocks() -> tuple[Block, Block]:
    blocks, _ = parse_blocks(REPO / "README.rst")
    console = [block for block in blocks if block.language == "console"]
    create = next(
        block for block in console if "create-user alice" in block.text and "examples/reference" in block.text
    )
    curl = next(block for block in console if "$ curl" in block.text)
    return create, curl


def test_readme_tour_curl_steps(tmp_path: Path) -> None:
    """The README tour after create-user, against the reference app (as the skip marker says)."""
    create, curl = _tour_blocks()
    assert curl.marker == "skip" and "test_readme_tour_curl_steps" in curl.argument
    assert create.marker is None  # the harness runs the create-user step itself
    app = create_app(instance_path=str(tmp_path / "instance"))  # as served: the development key
    with app.app_context():
        add_user(app.extensions["authflow"].backend, "default", "alice", PASSWORD)
    curl_client = _Curl(app)
    commands = parse_console(curl)
    assert [command.text.split()[0] for command in commands] == ["curl", "curl", "cp", "curl", "curl"]
    for command in commands:
        output = curl_client.run(command.text)
        assert output_matches(command.expected, output), f"README.rst:{command.line}: {output!r}"


def test_readme_app_maps_login_outcomes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's "In your own app" program, imported as app.py: login and the protected route."""
    blocks, _ = parse_blocks(REPO / "README.rst")
    (program,) = [block for block in blocks if block.marker == "file" and block.argument == "app.py"]
    (tmp_path / "app.py").write_text(program.text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTHFLOW_SIGNING_KEY", raising=False)
    spec = importlib.util.spec_from_file_location("readme_app", tmp_path / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "readme_app", module)  # Flask finds its folder through it
    spec.loader.exec_module(module)
    app = module.app
    assert Path(app.instance_path) == tmp_path / "instance"
    with app.app_context():
        module.authflow.accounts.create("alice", PASSWORD)
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = "readme-test/1.0"
    assert client.get("/dashboard").status_code == 401
    wrong = client.post("/login", json={"username": "alice", "password": "not it"})
    assert wrong.status_code == 401
    right = client.post("/login", json={"username": "alice", "password": PASSWORD})
    assert right.status_code == 200
    page = client.get("/dashboard")
    assert page.status_code == 200
    assert "alice" in page.get_data(as_text=True)
