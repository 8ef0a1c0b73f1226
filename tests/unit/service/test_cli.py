"""The ``novikoff`` command line: --help everywhere, offline commands end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from service.cli import main as cli
from service.cli.main import build_parser, main
from service.cli.synthetic import SyntheticStream
from service.settings import Settings

COMMANDS = ["serve", "produce", "fit", "demo"]


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert f"novikoff {command}" in out
    assert "--config" in out


def test_missing_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([])
    assert exited.value.code == 2


def test_console_script_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service", "produce", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "--noise" in result.stdout


def test_bad_settings_are_reported_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[http]\nport = 'eighty'\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "http.port" in err
    assert "Traceback" not in err


def test_produce_writes_the_synthetic_stream(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    argv = ["produce", "--dim", "3", "--seed", "4", "--noise", "0.1", "--count", "50"]
    assert main([*argv, "--output", str(out), "--no-progress"]) == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) == 50
    stream = SyntheticStream(dim=3, seed=4, noise=0.1)
    X, y = stream.arrays(50)
    events = [orjson.loads(line) for line in lines]
    assert [e["features"] for e in events] == X.tolist()
    assert [e["label"] for e in events] == y.astype(int).tolist()
    assert len({e["id"] for e in events}) == 50


def test_produce_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["produce", "--dim", "2", "--seed", "9", "--print-reference"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[[bound.references]]")
    weights = SyntheticStream(dim=2, seed=9).reference.tolist()
    assert f"weights = [{', '.join(repr(w) for w in weights)}]" in out


def test_fit_prints_epochs_and_the_pla_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "pla.jsonl"
    events.write_bytes(b'{"features": [2], "label": -1}\n{"features": [-0.25], "label": 1}\n')
    config = tmp_path / "pla.toml"
    config.write_text("[model]\ndim = 1\n")
    assert main(["fit", "--config", str(config), str(events), "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "epoch 1: 2 updates" in out
    assert "bias=0, x1=-2.25" in out


def test_fit_reads_csv_and_skips_invalid_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "data.csv"
    events.write_text("a,b,label\n1,2,1\n-1,-2,-1\n3,4,maybe\n")
    config = tmp_path / "c.toml"
    config.write_text("[model]\ndim = 2\n")
    assert main(["fit", "--config", str(config), str(events), "--epochs", "5"]) == 0
    captured = capsys.readouterr()
    assert "2 events from" in captured.out
    assert "unknown_label" in captured.err


@pytest.mark.parametrize(
    ("argv", "role"),
    [([], "learner"), (["--role", "replica"], "replica"), (["--role", "learner"], "learner")],
)
def test_serve_role_overrides_the_setting(
    argv: list[str], role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[Settings] = []
    monkeypatch.setattr(cli, "run_service", lambda settings: served.append(settings) or 0)
    for name in [n for n in os.environ if n.startswith("NOVIKOFF_")]:
        monkeypatch.delenv(name)
    assert main(["serve", *argv]) == 0
    assert served[0].service.role == role


def test_serve_refuses_an_unknown_role(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--role", "standby"])
    assert exited.value.code == 2
    assert "invalid choice: 'standby'" in capsys.readouterr().err
