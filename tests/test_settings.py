"""Option defaults from the project's pyproject.toml ([tool.sdpa_bench.<command>], sdpa_impls.settings): read from
the folder a command runs in upwards, the command line wins, and every mistake is one line, exit 2."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import shutil
from pathlib import Path

import pytest

from sdpa_impls import settings
from sdpa_impls.cli import COMMANDS, main
from sdpa_impls.cli import continuous as continuous_cli


def parsed(tmp_path: Path, toml: str, argv: list[str]) -> argparse.Namespace:
    """`sdpa-bench continuous ARGV` parsed as the program parses it, with `toml` as the project's pyproject."""
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "sub").mkdir(exist_ok=True)
    top = argparse.ArgumentParser(prog="sdpa-bench")
    sub = top.add_subparsers(dest="command")
    parser = sub.add_parser("continuous")
    continuous_cli.add_arguments(parser)
    full = ["continuous", *argv]
    args = top.parse_args(full)
    settings.apply(top, parser, full, args, "continuous", COMMANDS, start=tmp_path / "sub")
    return args


def test_a_table_sets_defaults_and_the_command_line_wins(tmp_path: Path) -> None:
    toml = ('[tool.sdpa_bench.continuous]\nimpl = ["naive", "fused"]\nrounds = 6\n"adaptive-budget" = 120\n'
            'preset = "smoke"\n[tool.sdpa_bench.gate]\ntime = "median:10%"\n')
    args = parsed(tmp_path, toml, [])
    assert (args.impl, args.rounds, args.adaptive_budget, args.preset) == (["naive", "fused"], 6, 120.0, "smoke")
    given = parsed(tmp_path, toml, ["--impl", "chunked", "--rounds", "4", "--preset", "ci"])
    assert (given.impl, given.rounds, given.preset) == (["chunked"], 4, "ci")  # 4 is the default, given on purpose
    assert given.adaptive_budget == 120.0
    # "auto" (and no value at all) leaves the budget to the comparison: continuous.comparison.choose_budget
    assert parsed(tmp_path, '[tool.sdpa_bench.continuous]\nadaptive_budget = "auto"\n', []).adaptive_budget is None
    assert parsed(tmp_path, toml, ["--adaptive-budget", "auto"]).adaptive_budget is None
    assert parsed(tmp_path, "", []).adaptive_budget is None


@pytest.mark.parametrize("toml, words", [
    ('[tool.sdpa_bench.continuous]\nround = 6\n', "'round' is not an option of `sdpa-bench continuous`"),
    ('[tool.sdpa_bench.continuous]\nrounds = "six"\n', "rounds: should be an integer"),
    ('[tool.sdpa_bench.continuous]\npreset = "nope"\n', "'nope' is not one of"),
    ('[tool.sdpa_bench.continuous]\nimpl = "naive"\n', "impl: should be a list of strings"),
    ('[tool.sdpa_bench.continuous]\nadaptive_budget = "long"\n', "should be a number of seconds or 'auto'"),
    ('[tool.sdpa_bench.contnuous]\nrounds = 6\n', "[tool.sdpa_bench.contnuous] names no command"),
    ('[tool.sdpa_bench]\npreset = "ci"\n', "holds tables only"),
    ('[tool.sdpa_bench.continuous\n', "not valid TOML"),
    ('[tool.sdpa-bench.continuous]\nrounds = 6\n', "[tool.sdpa-bench] is not read: the table is [tool.sdpa_bench]"),
    ('[tool.sdpa_bench.run]\npreset = "ci"\n[tool.sdpa-bench.continuous]\nrounds = 6\n',
     "[tool.sdpa-bench] is not read"),
])
def test_a_mistake_in_the_table_is_one_line_exit_2(tmp_path: Path, toml: str, words: str) -> None:
    (tmp_path / "pyproject.toml").write_text(toml)
    err = io.StringIO()
    here = Path.cwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stderr(err):
            code = main(["continuous", "--rounds", "2"])
    finally:
        os.chdir(here)
    assert code == 2 and words in err.getvalue() and err.getvalue().count("\n") == 1, err.getvalue()
    assert "pyproject.toml" in err.getvalue()


@pytest.mark.parametrize("toml, argv, words", [
    ('[tool.sdpa_bench.run]\npreset = "nope"\nmin_reps = 3\n', ["run"], "unknown preset 'nope'"),
    ('[tool.sdpa_bench.continuous]\nbase-env = "./no-such-env"\n', ["continuous"], "no such interpreter"),
])
def test_a_value_the_command_refuses_names_the_table_that_set_it(tmp_path: Path, monkeypatch, capsys,
                                                                  toml: str, argv: list[str], words: str) -> None:
    """A value the table sets and the command refuses later (not argparse: an unknown preset, an environment that
    does not exist) is traced to the file, the table and the keys, not blamed on a command line that lacks it."""
    (tmp_path / "pyproject.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    table = f"{tmp_path / 'pyproject.toml'} [tool.sdpa_bench.{argv[0]}]"
    error = [line for line in err.splitlines() if "error:" in line]  # continuous prints its seed first
    assert len(error) == 1 and words in error[0] and f"(defaults in effect from {table}: " in error[0], err
    if argv == ["run"]:  # the command line's preset wins: the table is named with the one key it still set
        assert main(["run", "--preset", "nope2"]) == 2
        err = capsys.readouterr().err
        assert "unknown preset 'nope2'" in err and err.rstrip().endswith(f"from {table}: min_reps)"), err


def test_a_pruning_option_is_a_default_in_the_table_and_needs_prune_when_typed(tmp_path: Path, monkeypatch,
                                                                              capsys) -> None:
    """`envs` lists with the table's `older-than` set (a default for when it prunes); typed without --prune, it
    would remove nothing, so it is refused, naming --prune."""
    (tmp_path / "pyproject.toml").write_text('[tool.sdpa_bench.envs]\nolder-than = 7\nmax-gb = 1\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDPA_BENCH_ENV_CACHE", str(tmp_path / "cache"))
    assert main(["envs"]) == 0
    for typed in (["--older-than", "3"], ["--max-gb", "2"]):
        assert main(["envs", *typed]) == 2
        assert f"{typed[0]} applies to --prune: give --prune too" in capsys.readouterr().err


def test_a_key_is_the_long_options_name_even_where_argparse_keeps_it_under_another(tmp_path: Path) -> None:
    """`run --budget` is kept in `budget_s` and `--no-memory` in `memory`: the table takes `budget` and `no-memory`,
    as the options read, and refuses the inner names (`memory = true` would have switched memory off)."""
    from sdpa_impls.cli import run as run_cli

    def run_args(toml: str) -> argparse.Namespace:
        (tmp_path / "pyproject.toml").write_text(toml)
        top = argparse.ArgumentParser(prog="sdpa-bench")
        parser = top.add_subparsers(dest="command").add_parser("run")
        run_cli.add_arguments(parser)
        args = top.parse_args(["run"])
        settings.apply(top, parser, ["run"], args, "run", COMMANDS, start=tmp_path)
        return args

    args = run_args('[tool.sdpa_bench.run]\nbudget = 60\nno-memory = true\nmin-sample = 0.002\n')
    assert (args.budget_s, args.memory, args.min_sample_s) == (60.0, False, 0.002)
    for inner in ("budget_s = 60", "memory = true"):
        with pytest.raises(settings.UsageError, match="is not an option of `sdpa-bench run`; the options a table "
                                                      "may set: .*budget") as refused:
            run_args(f"[tool.sdpa_bench.run]\n{inner}\n")
        assert "resume" not in str(refused.value) and "overwrite" not in str(refused.value)  # refused in a table


def test_a_flag_a_table_sets_is_undone_on_the_command_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """An option on the command line wins over the table, a flag's "off" too: `no-memory = true` is undone by
    --memory, `separate-processes = true` by --no-separate-processes (there was no way but editing the file). The
    opposites are the command line's only, and `prune = true`, which made every listing of `envs` remove
    environments, is refused as --resume and --overwrite are."""
    def parsed_with(command: str, toml: str, argv: list[str]) -> argparse.Namespace:
        (tmp_path / "pyproject.toml").write_text(toml)
        top = argparse.ArgumentParser(prog="sdpa-bench")
        parser = top.add_subparsers(dest="command").add_parser(command)
        importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
        settings.add_opposites(parser)
        args = top.parse_args([command, *argv])
        settings.apply(top, parser, [command, *argv], args, command, COMMANDS, start=tmp_path)
        return args

    table = "[tool.sdpa_bench.run]\nno-memory = true\nno-plots = true\n"
    assert (parsed_with("run", table, []).memory, parsed_with("run", table, []).no_plots) == (False, True)
    undone = parsed_with("run", table, ["--memory", "--plots"])
    assert (undone.memory, undone.no_plots) == (True, False)
    assert parsed_with("run", "", ["--no-flush-l2"]).flush_l2 is False  # the default's value, as typed
    table = "[tool.sdpa_bench.continuous]\nseparate-processes = true\n"
    assert parsed_with("continuous", table, ["--no-separate-processes"]).separate_processes is False
    assert parsed_with("continuous", table, []).separate_processes is True
    with pytest.raises(settings.UsageError, match="'memory' is not an option"):  # the table sets the flag itself
        parsed_with("run", "[tool.sdpa_bench.run]\nmemory = false\n", [])
    (tmp_path / "pyproject.toml").write_text("[tool.sdpa_bench.envs]\nprune = true\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDPA_BENCH_ENV_CACHE", str(tmp_path / "cache"))
    assert main(["envs"]) == 2
    assert "'prune' decides what one run does" in capsys.readouterr().err
    assert main(["envs", "--prune"]) == 2  # the table is refused whatever the command line says


def test_a_toml_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """TOML is UTF-8: a pyproject.toml above the working folder in another encoding (an author's name in Latin-1),
    or a --config file so written, is the file's name and the byte, exit 2, in every command that reads it."""
    (tmp_path / "pyproject.toml").write_bytes(b'[project]\nname = "x"\nauthors = [{name = "Jos\xe9"}]\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert err == (f"sdpa-bench list: error: {tmp_path / 'pyproject.toml'}: not UTF-8 text (invalid continuation "
                   "byte at byte 44), as TOML must be\n"), err
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "gate.toml").write_bytes(b'time = "median:5%" # \xe9\n')
    assert main(["gate", "--candidate", "cand.json", "--config", "../gate.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sdpa-bench gate: error: ../gate.toml: not UTF-8 text (") and err.count("\n") == 1, err
    (tmp_path / "gate.toml").write_bytes(b'\xef\xbb\xbftime = "median:5%"\n')  # saved "UTF-8 with BOM"
    assert main(["gate", "--candidate", "cand.json", "--config", "../gate.toml"]) == 2
    assert capsys.readouterr().err == (  # was: Invalid statement (at line 1, column 1)
        "sdpa-bench gate: error: ../gate.toml: starts with a byte order mark (EF BB BF), which Python's TOML reader "
        "(tomllib) does not take: save it as UTF-8 without one\n")


@pytest.mark.parametrize("argv, toml, words", [
    (["compare", "a", "b"], "[tool.sdpa_bench.compare]\nconfig = true\n", "config: takes a value, not true"),
    (["run"], "[tool.sdpa_bench.run]\nseed = true\n", "run]: seed: takes a value, not true"),  # was 'True', a text
    (["compare", "a", "b"], "[tool.sdpa_bench.compare]\nconfig = 5\n", "compare]: config: should be a string, got 5"),
    (["compare", "a", "b"], "[tool.sdpa_bench.compare]\nmarkdown = 5\n", "markdown: should be a string, got 5"),
    (["run"], "[tool.sdpa_bench.run]\nshard = 2\n", "run]: shard: should be a string, got 2"),
    (["run"], "[tool.sdpa_bench.run]\npreset = 1.5\n", "run]: preset: should be a string, got 1.5"),
])
def test_an_option_that_takes_text_takes_only_a_toml_string(tmp_path: Path, monkeypatch, capsys, argv: list[str],
                                                            toml: str, words: str) -> None:
    """A number or a boolean for an option that takes text (a file, a shard's I/N, a preset) is the file, the table
    and the key, exit 2: it reached the command as it was (a TypeError, no `split` on an int, a file named 5)."""
    (tmp_path / "pyproject.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sdpa-bench {argv[0]}: error: {tmp_path / 'pyproject.toml'} [tool.sdpa_bench.")
    assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "5").exists()


def test_a_relative_path_in_the_table_is_from_its_pyproject_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    """`compare`'s `config = "gate.toml"` and `markdown = "cmp.md"` name files beside the pyproject.toml, so the
    command finds and writes them from a subfolder too (it looked for gate.toml in the working folder)."""
    from sdpa_impls.bench.grid import PRESETS
    from sdpa_impls.bench.result import Result
    from sdpa_impls.report import results as store

    case = PRESETS["smoke"][0]
    (tmp_path / "a").mkdir()
    store.save(tmp_path / "a", store.Sweep(
        {"preset": "smoke", "device": "cpu", "impls": ["naive"], "case_ids": [case.id], "options": {}, "machine": {}},
        [Result("naive", case, "cpu", "ok", median_s=1e-3, samples=(1e-3,) * 5, max_error=0.0, error_tolerance=1e-3)]))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "pyproject.toml").write_text('[tool.sdpa_bench.compare]\nconfig = "gate.toml"\nmarkdown = "cmp.md"\n')
    (tmp_path / "gate.toml").write_text('time = "median:10%"\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert main(["compare", "../a", "../b"]) == 0, capsys.readouterr().err
    assert f"config: {tmp_path.resolve() / 'gate.toml'}, over" in capsys.readouterr().out
    assert (tmp_path / "cmp.md").is_file() and not (tmp_path / "sub" / "cmp.md").exists()
    assert main(["compare", "../a", "../b", "--markdown", "mine.md"]) == 0  # the command line's: from here
    assert (tmp_path / "sub" / "mine.md").is_file()


def test_which_keys_are_paths_and_which_only_look_like_one(tmp_path: Path) -> None:
    """Every option that names a file or folder (FILE, DIR, a pathlib.Path) is resolved from the table's folder; an
    absolute path and the command line's are kept, a `~` one is expanded (as a shell does on the command line), and
    `shard = "1/2"` or an environment's SPEC is no path."""
    import importlib

    def parser_of(command: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
        top = argparse.ArgumentParser(prog="sdpa-bench")
        parser = top.add_subparsers(dest="command").add_parser(command)
        importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
        return top, parser

    def names(is_path: bool) -> set[str]:
        return {flag[2:].replace("-", "_") for command in set(COMMANDS) - settings.NOT_OPTIONS
                for a in parser_of(command)[1]._actions if (a.type is Path or a.metavar in ("FILE", "DIR")) == is_path
                for flag in a.option_strings if flag.startswith("--")}

    assert names(True) - settings.ONE_RUN_ONLY == settings.PATH_OPTIONS
    assert not names(False) & settings.PATH_OPTIONS  # no command has an option of that name that is no path

    def applied(command: str, toml: str, argv: list[str]) -> argparse.Namespace:
        (tmp_path / "pyproject.toml").write_text(toml)
        (tmp_path / "sub").mkdir(exist_ok=True)
        top, parser = parser_of(command)
        args = top.parse_args([command, *argv])
        settings.apply(top, parser, [command, *argv], args, command, COMMANDS, start=tmp_path / "sub")
        return args

    run = applied("run", '[tool.sdpa_bench.run]\nout = "res/x"\nshard = "1/2"\n', [])
    assert (run.out, run.shard) == (tmp_path.resolve() / "res" / "x", "1/2")
    assert applied("run", '[tool.sdpa_bench.run]\nout = "res/x"\n', ["--out", "here"]).out == Path("here")
    toml = ('[tool.sdpa_bench.continuous]\nenv-cache = "~/envs"\njson = "/tmp/v.json"\nkeep_runs = "runs"\n'
            'markdown = "../up.md"\nbase-env = "./venv"\n')
    args = applied("continuous", toml, [])
    assert (args.env_cache, args.json, args.keep_runs, args.markdown, args.base_env) == (
        str(Path.home() / "envs"), "/tmp/v.json", str(tmp_path.resolve() / "runs"), str(tmp_path.resolve() / ".." / "up.md"), "./venv")
