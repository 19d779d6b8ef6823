"""Shared pytest set-up: headless Qt, the fixtures in tests/fixtures, and the ``--update-golden`` option."""

import contextlib
import importlib.util
import io
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"

UPDATE_GOLDEN = pytest.StashKey[bool]()

# Without PySide6 (no `gui` extra) the GUI tests cannot run; everything else must (DESIGN §1).
HAS_QT = importlib.util.find_spec("PySide6") is not None
collect_ignore = [] if HAS_QT else ["gui"]


def run_cli(*args) -> tuple[int, str]:
    """``dcstudio ARGS`` in this process: its exit code and what it printed."""
    from studio.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in args])
    return code, out.getvalue()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden snapshot files from the current output instead of comparing against them",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[UPDATE_GOLDEN] = bool(config.getoption("--update-golden"))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not HAS_QT and (REPO_ROOT / "tests" / "gui").is_dir():
        terminalreporter.write_line("tests/gui was not collected: PySide6 is not installed (bash .ci/setup-env gui)")


@pytest.fixture(autouse=True)
def _user_state_dir(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own ``$XDG_STATE_HOME`` (autosaves, crash markers): never the user's, never shared."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


@pytest.fixture(scope="session")
def update_golden(pytestconfig: pytest.Config) -> bool:
    """True when the run was started with ``--update-golden``."""
    return pytestconfig.stash[UPDATE_GOLDEN]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``tests/fixtures``: real training graphs made outside this project (provenance in its README)."""
    if not (FIXTURES / "README.md").is_file():
        pytest.fail(f"the fixtures folder {FIXTURES} is missing: it is part of the repository (git checkout it)")
    return FIXTURES


@pytest.fixture(scope="session")
def bert3_stack(tmp_path_factory) -> Path:
    """A 3-layer BERT-style training stack built here (``tests.peer.hf_style_models.save_bert_stack``): the
    model file the layer, transfer, lineage, ranking-class and outline tests share (read only)."""
    from tests.peer.hf_style_models import save_bert_stack
    path = tmp_path_factory.mktemp("stack") / "bert3.onnx"
    save_bert_stack(path, layers=3)
    return path
