"""`dlfeed --help` and `dlfeed COMMAND --help`: asking for help succeeds (exit 0,
on stdout); a missing or unknown command is a usage error (exit 2)."""
import re

import pytest


def commands(dlfeed):
    """The commands `dlfeed --help` lists."""
    out = dlfeed.run("--help").stdout
    names = re.findall(r"^  (\w+) ", out.split("Commands:\n", 1)[1], flags=re.M)
    assert {"run", "generate", "inspect", "order", "calibrate"} <= set(names), out
    return names


def test_the_overview_exits_0_and_lists_the_commands(dlfeed):
    for args in (["--help"], ["-h"], ["help"]):
        proc = dlfeed.run(*args)
        assert proc.returncode == 0 and "Usage: dlfeed <command>" in proc.stdout and proc.stderr == ""
    bare = dlfeed.run(check=False)  # no command at all: a usage error, the overview on stderr
    assert bare.returncode == 2 and "Usage: dlfeed <command>" in bare.stderr
    unknown = dlfeed.run("frobnicate", "--help", check=False)
    assert unknown.returncode == 2 and "unknown command 'frobnicate'" in unknown.stderr


@pytest.mark.parametrize("spelling", ["--help", "-h", "--helpshort", "--helpfull"])
def test_every_commands_help_exits_0(dlfeed, spelling):
    for name in commands(dlfeed):
        proc = dlfeed.run(name, spelling, check=False)
        assert proc.returncode == 0, f"dlfeed {name} {spelling}: exit {proc.returncode}\n{proc.stderr}"
        assert proc.stderr == "", proc.stderr
        assert f"Usage: dlfeed {name} [flags]" in proc.stdout
        assert re.search(r"^    --[a-z][a-z0-9-]* \(", proc.stdout, flags=re.M), proc.stdout
        # Help wins over everything else on the line: nothing runs, nothing is written.
        assert dlfeed.run(name, "--out", "/nonexistent/x", "no-such-path", spelling).returncode == 0


def test_a_commands_help_lists_its_own_flags_and_not_anothers(dlfeed):
    run = dlfeed.run("run", "--help").stdout
    assert "--compute-ms (" in run and "--epochs (" in run and "--strategy (" in run
    assert "--dump-sample (" not in run  # inspect's
    full = dlfeed.run("run", "--helpfull").stdout
    assert "--dump-sample (" in full  # every command's flags
    gen = dlfeed.run("help", "generate").stdout  # `dlfeed help CMD` is `dlfeed CMD --help`
    assert "Usage: dlfeed generate [flags]" in gen and "--compute-ms (" not in gen


def test_help_matching_a_name_lists_only_those_flags(dlfeed):
    proc = dlfeed.run("run", "--help=compute")
    flags = re.findall(r"^    --([a-z][a-z0-9-]*) \(", proc.stdout, flags=re.M)
    assert flags == ["compute-ms", "compute-stdev-ms"], proc.stdout
    assert dlfeed.run("run", "--helpmatch=compute-stdev").stdout.count("\n    --") == 1


def test_help_after_double_dash_is_an_argument(dlfeed, tmp_path):
    # After "--" everything is a path: "--help" there is a (missing) dataset, not a request for help.
    err = dlfeed.error("inspect", "--", "--help")
    assert "--help" in err


def test_unknown_flags_still_fail(dlfeed):
    proc = dlfeed.run("run", "--no-such-flag", check=False)
    assert proc.returncode != 0 and "no_such_flag" in proc.stderr.replace("-", "_")
