# SPDX-License-Identifier: Apache-2.0
"""`dlfeed --help` and `dlfeed COMMAND --help`: asking for help succeeds (exit 0,
on stdout) and lists exactly the flags the command reads; a missing or unknown
command, or a flag the command does not read, is a usage error (exit 2)."""
import pathlib
import re

import pytest

from conftest import ROOT

HELP_FLAG = re.compile(r"^    --([a-z][a-z0-9-]*) \(", flags=re.M)


def help_flags(dlfeed, name):
    """The flags `dlfeed NAME --help` lists, with underscores."""
    return {f.replace("-", "_") for f in HELP_FLAG.findall(dlfeed.run(name, "--help").stdout)}


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
    assert dlfeed.run("run", "--helpfull").stdout == run  # Abseil's spellings give the same list
    gen = dlfeed.run("help", "generate").stdout  # `dlfeed help CMD` is `dlfeed CMD --help`
    assert gen == dlfeed.run("generate", "-h").stdout
    assert "Usage: dlfeed generate [flags] [DIR]" in gen and "--compute-ms (" not in gen
    # report reads three flags of its own and none of the shared ones.
    assert help_flags(dlfeed, "report") == {"out_dir", "python", "script"}
    assert help_flags(dlfeed, "workloads") == {"scale"}
    unknown = dlfeed.run("help", "frobnicate", check=False)
    assert unknown.returncode == 2 and "unknown command 'frobnicate'" in unknown.stderr


def test_help_never_names_source_files(dlfeed):
    for name in commands(dlfeed):
        for args in ([name, "--help"], [name, "--helpfull"], [name, "--help=e"]):
            out = dlfeed.run(*args).stdout
            assert not re.search(r"\w\.(cc|h)\b|tools/dlfeed/|Flags from", out), out
            # Each flag once, with its help text and default.
            flags = HELP_FLAG.findall(out)
            assert len(flags) == len(set(flags)), out
            defaults = len(re.findall(r"\);\s+default:\s", out))
            assert defaults == len(flags) and (flags or "--help=" in args[1]), out


def test_positional_arguments_are_in_the_usage_line(dlfeed):
    assert "Usage: dlfeed inspect [flags] PATH...\n" in dlfeed.run("inspect", "--help").stdout
    assert "Usage: dlfeed run [flags] [PATH...]\n" in dlfeed.run("run", "--help").stdout
    assert "Usage: dlfeed order [flags]\n" in dlfeed.run("order", "--help").stdout


def test_help_matching_a_name_lists_only_those_flags(dlfeed):
    proc = dlfeed.run("run", "--help=compute")
    flags = re.findall(r"^    --([a-z][a-z0-9-]*) \(", proc.stdout, flags=re.M)
    assert flags == ["compute-ms", "compute-stdev-ms"], proc.stdout
    assert dlfeed.run("run", "--helpmatch=compute-stdev").stdout.count("\n    --") == 1


def test_help_after_double_dash_is_an_argument(dlfeed, tmp_path):
    # After "--" everything is a path: "--help" there is a (missing) dataset, not a request for help.
    err = dlfeed.error("inspect", "--", "--help")
    assert "--help" in err


def test_unknown_flags_are_usage_errors(dlfeed):
    proc = dlfeed.run("run", "--no-such-flag", check=False)
    assert proc.returncode == 2 and "unknown flag --no-such-flag" in proc.stderr
    assert "see `dlfeed run --help`" in proc.stderr


def test_another_commands_flag_is_a_usage_error_naming_its_commands(dlfeed, tmp_path):
    # --strategy is order's, run's and calibrate's; report would have ignored it silently.
    proc = dlfeed.run("report", "--strategy", "global_shuffle", tmp_path / "s.json", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "unknown flag --strategy (a flag of calibrate, order, run, not of report)" in proc.stderr
    assert "see `dlfeed report --help`" in proc.stderr
    # Either spelling, and the --noFLAG form of a boolean, name the flag as the help does.
    proc = dlfeed.run("inspect", "--no_coalesce", tmp_path, check=False)
    assert proc.returncode == 2 and "unknown flag --no-coalesce (a flag of dlio, run, not of inspect)" in proc.stderr
    proc = dlfeed.run("order", "--nodirect", check=False)
    assert proc.returncode == 2 and "unknown flag --nodirect (a flag of dlio, run, not of order)" in proc.stderr


def test_flag_values_are_parsed_as_abseil_does(dlfeed):
    ids = lambda *a: dlfeed.run("order", "--files", "2", "--samples-per-file", "3", *a).stdout.split()
    assert ids() == ["0", "1", "2", "3", "4", "5"]
    assert ids("--limit=2") == ids("--limit", "2") == ids("-limit", "2") == ["0", "1"]
    assert ids("--world-size=2", "--rank=1") == ids("--world_size", "2", "--rank", "1") == ["1", "3", "5"]
    # Booleans: --flag, --flag=false, --noflag; --noflag takes no value.
    assert ids("--world-size=4", "--drop-last", "--rank=3") == ["3"]
    assert ids("--world-size=4", "--drop-last", "--nodrop-last", "--rank=3") == ["3", "1"]
    for args, msg in ((["--limit"], "--limit needs a value"),
                      (["--limit=x"], "--limit: "),
                      (["--nodrop-last=1"], "takes no value"),
                      (["--nostats=true"], "takes no value")):
        proc = dlfeed.run("order", *args, check=False)
        assert proc.returncode == 2 and msg in proc.stderr and "see `dlfeed order --help`" in proc.stderr, proc.stderr


# --- The flag lists match the sources --------------------------------------
#
# Each command declares the flags it reads (DLFEED_COMMAND's flag list); help
# and parsing use only that list, so a flag the command reads but does not list
# could never be set. This reads tools/dlfeed/*.cc, follows the calls from each
# command's entry point (a call resolves to functions of the same file or of a
# file whose header it includes) and collects absl::GetFlag(FLAGS_x) and
# flag_given("x"), then compares with the command's --help.

SRC = ROOT / "tools" / "dlfeed"
TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])+\'', re.S)
KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"}


def _blank(m):
    """Comments and literals out (a plain word in quotes stays: flag_given("epochs"))."""
    t = m.group(0)
    if t.startswith('"') and re.fullmatch(r'"\w+"', t):
        return t
    return re.sub(r"[^\n]", " ", t)


def _functions(text):
    """{name: [body, ...]} of the function bodies outside other function bodies."""
    out, i = {}, 0
    while (i := text.find("{", i)) >= 0:
        head = text[:i].rstrip()
        head = re.sub(r"(\s*(const|override|noexcept|final|->\s*[\w:<>,\s*&]+?))*$", "", head)
        name = None
        if head.endswith(")"):
            depth, j = 0, len(head) - 1
            while j >= 0:
                depth += {")": 1, "(": -1}.get(head[j], 0)
                if depth == 0:
                    break
                j -= 1
            m = re.search(r"(\w+)\s*$", head[:j])
            if m and m.group(1) not in KEYWORDS:
                name = m.group(1)
        if name is None:  # a namespace, class or initializer: look inside
            i += 1
            continue
        depth, j = 0, i
        while True:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        out.setdefault(name, []).append(text[i:j + 1])
        i = j + 1
    return out


def _sources():
    files = {}
    for path in sorted(SRC.glob("*.cc")):
        raw = path.read_text()
        includes = {pathlib.Path(h).stem for h in re.findall(r'#include "([\w/]+)\.h"', raw)}
        text = TOKEN.sub(_blank, raw)
        files[path.stem] = (includes, _functions(text), text)
    return files


def _flags_read_by_commands():
    files = _sources()
    reads = {}
    for stem, (_, _, text) in files.items():
        for m in re.finditer(r"DLFEED_COMMAND\((\w+),(.*?);", text, re.S):
            entry = [a.strip() for a in m.group(2).split(",")][-2]
            seen, todo, flags = set(), [(stem, entry)], set()
            while todo:
                where, fn = todo.pop()
                includes, _, _ = files[where]
                for f in [where, *sorted(includes & files.keys())]:
                    for body in files[f][1].get(fn, []):
                        if (f, fn) in seen:
                            continue
                        seen.add((f, fn))
                        flags |= set(re.findall(r"GetFlag\(\s*FLAGS_(\w+)\s*\)", body))
                        flags |= set(re.findall(r'\b(?:flag_)?given\(\s*"(\w+)"\s*\)', body))
                        todo += [(f, c) for c in re.findall(r"\b(\w+)\s*\(", body) if c not in KEYWORDS]
            reads[m.group(1)] = flags
    return reads


def test_each_commands_flag_list_is_the_flags_it_reads(dlfeed):
    reads = _flags_read_by_commands()
    assert set(reads) == set(commands(dlfeed))
    assert {"compute_ms", "mpi", "workload", "strategy", "no_verify_crc"} <= reads["run"]  # the walk reaches helpers
    for name, flags in reads.items():
        listed = help_flags(dlfeed, name)
        assert listed - flags == set(), f"dlfeed {name} --help lists flags it never reads"
        assert flags - listed == set(), f"dlfeed {name} reads flags its DLFEED_COMMAND list leaves out"


def test_flags_appear_only_under_the_commands_that_read_them(dlfeed):
    owners = {}
    for name in commands(dlfeed):
        for flag in help_flags(dlfeed, name):
            owners.setdefault(flag, set()).add(name)
    assert owners["dump_sample"] == {"inspect"}
    assert owners["compute_ms"] == {"run"}
    assert owners["strategy"] == {"order", "run", "calibrate"}
    assert owners["format"] == {"generate", "inspect", "order", "run", "calibrate"}
    assert owners["out_dir"] == {"report"}
    # A flag of one command is refused by every other.
    for flag, names in owners.items():
        for other in set(commands(dlfeed)) - names:
            proc = dlfeed.run(other, f"--{flag}=1", check=False)
            assert proc.returncode == 2 and "unknown flag" in proc.stderr, (other, flag, proc.stderr)


# --- A flag's default is its field's ----------------------------------------
#
# A `dlfeed run` flag that sets a loader option (dlfeed._options.KEYWORDS names
# the flag of each keyword) defaults to the C++ default of that option, as
# dlfeed.Loader does: the command line and Python read the same data the same
# way unless told otherwise. A keyword's flag_default says where a flag's
# default differs on purpose, and why.

def help_defaults(text):
    """{flag: its default as the help prints it} of a command's --help."""
    out = {}
    for entry in re.split(r"^(?=    --[a-z])", text, flags=re.M)[1:]:
        flat = " ".join(entry.split())
        name = flat[2:flat.index(" ")]
        out[name] = flat[flat.rindex("; default: ") + len("; default: "):].split(";", 1)[0]
    return out


def field_value_of_flag_default(flag, printed, field_default):
    """The field's value that the flag's default sets (the units and spellings of the flags)."""
    text = printed[1:-1] if printed.startswith('"') else printed
    if isinstance(field_default, bool):
        on = text == "true" if text in ("true", "false") else text != ""  # --trace FILE: on when a file is named
        return not on if flag.startswith("no-") else on
    if isinstance(field_default, int):
        if text == "":  # a byte count given as text (--stage-limit 4G): empty keeps the field's default
            return field_default
        return int(text) << 20 if flag.endswith("-mb") else int(text)
    if field_default is None or field_default in ([], {}):
        return field_default if text == "" else text
    return text


def test_each_flags_default_is_its_fields_default(dlfeed):
    from dlfeed import _options
    printed = help_defaults(dlfeed.run("run", "--help").stdout)
    checked = []
    for keyword, k in _options.KEYWORDS.items():
        if k.flag is None or k.field is None:
            continue
        if k.flag_default is not None:  # its own default, declared as "VALUE: why" (or only why)
            declared = k.flag_default.split(":", 1)[0]
            if ":" in k.flag_default and declared.isdigit():
                assert printed[k.flag] == declared, (keyword, printed[k.flag], k.flag_default)
            continue
        assert k.flag in printed, f"{keyword}: `dlfeed run` has no --{k.flag}"
        want = _options.field_default(k.field)
        got = field_value_of_flag_default(k.flag, printed[k.flag], want)
        assert got == want, (f"--{k.flag} defaults to {printed[k.flag]}, which sets LoaderOptions.{k.field} to "
                             f"{got!r}; its C++ default (and dlfeed.Loader's) is {want!r}")
        checked.append(keyword)
    assert len(checked) >= 40, checked


def test_each_loader_flag_is_a_keywords_flag(dlfeed):
    """The other way round: every flag of `dlfeed run`'s loader, dataset and order groups sets a field
    named in the options' table (dlfeed._options.KEYWORDS), so the table is every knob of the command line."""
    from dlfeed import _options
    out = dlfeed.run("run", "--help").stdout
    parts = re.split(r"^  (\S[^\n]*flags):\n", out, flags=re.M)
    groups = {parts[i]: HELP_FLAG.findall(parts[i + 1]) for i in range(1, len(parts), 2)}
    named = {k.flag for k in _options.KEYWORDS.values() if k.flag}
    for group in ("Loader flags", "Dataset flags", "Order flags"):
        assert groups.get(group), f"no {group!r} in `dlfeed run --help`: {sorted(groups)}"
        unnamed = [f for f in groups[group] if f not in named]
        assert not unnamed, f"{group} without a keyword in python/dlfeed/_options.py: {unnamed}"
