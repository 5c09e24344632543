"""Plug-ins (docs/plugins.md): entry points found through installed metadata (a *.dist-info written
into a temporary directory on the path stands for `pip install`), plug-in files (--plugin,
NESTLAB_PLUGINS), -j workers, broken plug-ins, clashes with built-ins, the result contract."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

import nestlab
from analysis import plugins
from analysis.labels import BUILTINS as POLICY_BUILTINS
from analysis.labels import POLICIES
from analysis.variants import BUILTINS, SYSTEMS
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from tests.support.env import REPO
from tests.support.runs import make_run

EXAMPLE = REPO / "docs" / "examples" / "waiting_plugin.py"

GOOD = '''
from nestlab.plugin import simple_rule
def rule(cell):
    return "STALLED" if cell.counters.tm == 0 and cell.kind == "tcp" else "HEALTHY"
SYSTEM = simple_rule("tcpquiet", rule, summary="a TCP connection that moved nothing", contract=1)
'''
BROKEN = {
    "boom": ("raise RuntimeError('no luck')\n", "SYSTEM"),
    "notasystem": ("SYSTEM = 42\n", "SYSTEM"),
    "oldcontract": ("from nestlab.plugin import simple_rule\n"
                    "SYSTEM = simple_rule('oldcontract', lambda c: 'HEALTHY', contract=99)\n", "SYSTEM"),
    "flowdiagnoser": ("from nestlab.plugin import simple_rule\n"
                      "SYSTEM = simple_rule('flowdiagnoser', lambda c: 'HEALTHY', contract=1)\n", "SYSTEM"),
}


def install(site: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str],
            group: str = "nestlab.variants") -> Path:
    """What `pip install` leaves for importlib.metadata: the modules and a dist-info with entry points."""
    site.mkdir(parents=True, exist_ok=True)
    for name, text in modules.items():
        (site / f"{name}.py").write_text(text)
    info = site / f"{dist.replace('-', '_')}-0.3.dist-info"   # as a wheel names it (a '-' ends the name)
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    return site


@pytest.fixture
def fresh_registries(monkeypatch):
    """The registries and plug-in files as a new process has them, restored afterwards."""
    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.setattr(plugins, "_files", [])
    SYSTEMS.reload()
    POLICIES.reload()
    yield
    SYSTEMS.reload()
    POLICIES.reload()


def cli(*args: str, env: dict | None = None, pythonpath: list[Path] = ()) -> subprocess.CompletedProcess:
    e = {**os.environ, **(env or {})}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *map(str, pythonpath)])
    return subprocess.run([sys.executable, "-m", "nestlab.cli", *args], capture_output=True, text=True, env=e,
                          timeout=300, cwd=REPO)


def test_the_built_ins_are_the_projects_own_entry_points():
    eps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert eps["nestlab.variants"] == dict(BUILTINS)
    assert eps["nestlab.policies"] == dict(POLICY_BUILTINS)
    assert list(SYSTEMS)[:len(BUILTINS)] == [n for n, _ in BUILTINS]
    assert all(SYSTEMS.is_builtin(n) and SYSTEMS.origin(n) == "built-in" for n, _ in BUILTINS)


def test_an_install_without_the_projects_entry_points_loads_the_built_ins_and_says_so_once(
        fresh_registries, monkeypatch, capsys):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])   # an install older than them
    monkeypatch.setattr(plugins, "_said", set())
    assert list(SYSTEMS) == [n for n, _ in BUILTINS] and list(POLICIES) == ["impact", "window", "requests"]
    err = capsys.readouterr().err
    assert err.count("warning: the installed nestlab has no entry points for its built-in") == 1
    assert SYSTEMS.origin("peer") == "built-in"


def test_a_built_in_added_since_the_install_is_loaded_quietly(fresh_registries, monkeypatch, capsys):
    import importlib.metadata

    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",   # an install made before `peer` was declared
                        lambda group: [ep for ep in real(group=group) if ep.name != "peer"])
    SYSTEMS.reload()
    assert list(SYSTEMS)[:len(BUILTINS)] == [n for n, _ in BUILTINS]
    assert SYSTEMS.is_builtin("peer") and SYSTEMS.origin("peer") == "built-in"
    assert "warning" not in capsys.readouterr().err


def test_an_installed_package_is_found_listed_and_scored(tmp_path, fresh_registries, monkeypatch):
    site = install(tmp_path / "site", "nestlab-tcpquiet", {"tcpquiet_rule": GOOD}, {"tcpquiet": "tcpquiet_rule:SYSTEM"})
    monkeypatch.syspath_prepend(str(site))
    SYSTEMS.reload()
    assert "tcpquiet" in SYSTEMS and not SYSTEMS.is_builtin("tcpquiet")
    assert SYSTEMS.origin("tcpquiet") == "entry point tcpquiet_rule:SYSTEM of nestlab-tcpquiet 0.3"
    run, *_ = make_run(tmp_path / "exp" / "r0")
    table = nestlab.open_run(run).accuracy("tcpquiet")
    tcp = table[(table["section"] == "Total") & (table["row"] == "TCP")].iloc[0]
    assert tcp["TP"] > 0   # the tcp_drop's connection moved nothing during the fault
    # in a new process: listed with where it came from, and usable by name
    r = cli("variants", pythonpath=[site])
    assert r.returncode == 0, r.stderr
    assert "tcpquiet  [label]  (entry point tcpquiet_rule:SYSTEM of nestlab-tcpquiet 0.3)" in r.stdout
    # and in worker processes, which find it themselves
    make_run(tmp_path / "exp" / "r1")
    r = cli("compare", str(tmp_path / "exp"), "--variant", "tcpquiet", "--variant", "flowdiagnoser:theta=2", "-j", "2",
            "--out", str(tmp_path / "cmp"), pythonpath=[site])
    assert r.returncode == 0 and "2 runs in 2 processes" in r.stderr, r.stderr
    assert set(pd.read_csv(tmp_path / "cmp" / "compare.csv")["variant"]) == {"tcpquiet", "flowdiagnoser:theta=2"}


def test_broken_plugins_are_one_line_each_and_the_built_ins_still_work(tmp_path, fresh_registries, monkeypatch):
    modules = {f"plug_{k}": text for k, (text, _) in BROKEN.items()}
    site = install(tmp_path / "site", "badplugs", modules, {k: f"plug_{k}:{attr}" for k, (_, attr) in BROKEN.items()})
    run, *_ = make_run(tmp_path / "exp" / "r0")
    r = cli("accuracy", str(run), "--out", str(tmp_path / "out"), pythonpath=[site])
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "plug-in" in ln]
    assert len(lines) == 4, r.stderr
    said = "\n".join(lines)
    assert "'boom' (entry point plug_boom:SYSTEM of badplugs 0.3): cannot import: RuntimeError: no luck" in said
    assert "'notasystem'" in said and "not a RuleSystem but int" in said
    assert "'oldcontract'" in said and "written for contract 99, this lab has contract 1" in said
    assert "'flowdiagnoser'" in said and "the name is a built-in's; refused" in said
    assert "Traceback" not in r.stderr and (tmp_path / "out" / "accuracy.csv").is_file()
    # asking for a broken one says why it is not there
    r = cli("accuracy", str(run), "--variant", "boom", "--out", str(tmp_path / "out"), pythonpath=[site])
    assert r.returncode == 2 and "unknown variant 'boom': variant plug-in 'boom'" in r.stderr
    monkeypatch.syspath_prepend(str(site))
    SYSTEMS.reload()
    assert SYSTEMS["flowdiagnoser"].summary.startswith("FlowDiagnoser") and len(SYSTEMS.problems) == 4


def test_a_plugin_file_by_option_anywhere_and_by_environment(tmp_path, fresh_registries):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    r = cli("--plugin", str(EXAMPLE), "variants")
    assert r.returncode == 0, r.stderr
    assert f"waiting  [label]  (file {EXAMPLE})" in r.stdout and "waiting-array  [label]" in r.stdout
    after = cli("compare", str(run), "--variant", "waiting", "--variant", "waiting-array", "--plugin", str(EXAMPLE),
                "--out", str(tmp_path / "a"))
    env = cli("compare", str(run), "--variant", "waiting", "--variant", "waiting-array", "--out", str(tmp_path / "b"),
              env={plugins.ENV: str(EXAMPLE)})
    assert after.returncode == 0 and env.returncode == 0, after.stderr + env.stderr
    a, b = (pd.read_csv(tmp_path / d / "compare.csv") for d in "ab")
    pd.testing.assert_frame_equal(a, b)
    assert set(a["variant"]) == {"waiting", "waiting-array"}
    r = cli("--plugin", str(tmp_path / "nope.py"), "accuracy", str(run), "--out", str(tmp_path / "c"))
    assert r.returncode == 0 and f"plug-in file {tmp_path / 'nope.py'}: no such file" in r.stderr


def test_workers_load_the_plugins_themselves(tmp_path, fresh_registries):
    for k in range(3):
        make_run(tmp_path / "exp" / f"r{k}")
    args = ["compare", str(tmp_path / "exp"), "--variant", "waiting", "--variant", "flowdiagnoser:theta=2"]
    one = cli("--plugin", str(EXAMPLE), *args, "-j", "1", "--out", str(tmp_path / "one"))
    two = cli("--plugin", str(EXAMPLE), *args, "-j", "2", "--out", str(tmp_path / "two"))
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert "3 runs in 2 processes" in two.stderr
    assert (tmp_path / "one" / "compare.csv").read_text() == (tmp_path / "two" / "compare.csv").read_text()


SCRIPT = '''
import sys, nestlab
from analysis import plugins
from nestlab.plugin import simple_rule
MINE = simple_rule("mine", lambda cell: "HEALTHY", contract=1)   # defined in this script, no __main__ guard
plugins.add_files([sys.argv[2]])
runs = nestlab.open_runs(sys.argv[1])
a = nestlab.accuracy_of(runs, [MINE, "waiting"], jobs=2)           # a script's own object: serial
b = nestlab.accuracy_of(runs, ["waiting", "flowdiagnoser:theta=1..2"], jobs=2)   # by name: in workers
print("ran", sorted(set(a["variant"])), sorted(set(b["variant"])))
'''


def test_a_script_without_a_main_guard_is_never_imported_by_the_workers(tmp_path):
    for k in range(2):
        make_run(tmp_path / "exp" / f"r{k}")
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "exp"), str(EXAMPLE)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ran") == 1   # once: no worker ran the script's top level again
    assert "['mine', 'waiting'] ['flowdiagnoser:theta=1', 'flowdiagnoser:theta=2', 'waiting']" in r.stdout


def test_the_simple_interface_equals_the_array_interface(tmp_path, fresh_registries):
    plugins.add_files([EXAMPLE])
    from nestlab.testing import small_runs

    runs = [nestlab.open_run(p) for p in small_runs(tmp_path).values()]
    for params in ("", ":passdown=off"):
        simple = nestlab.accuracy_of(runs, "waiting" + params, per_run=True)
        array = nestlab.accuracy_of(runs, "waiting-array" + params, per_run=True)
        pd.testing.assert_frame_equal(simple.drop(columns="variant"), array.drop(columns="variant"))
        assert simple["TP"].sum() + simple["FP"].sum() > 0
    d = runs[0].diagnose("waiting", "waiting-array")
    s, a = (d[d["variant"] == v].reset_index(drop=True) for v in ("waiting", "waiting-array"))
    assert (s["label"].astype(str) == a["label"].astype(str)).all() and (s["label"] == "BLOCKED").any()


def test_a_result_that_breaks_the_contract_names_the_variant_not_the_run(tmp_path, fresh_registries):
    import numpy as np

    from nestlab.plugin import RuleSystem

    run = nestlab.open_run(make_run(tmp_path / "r0")[0])
    short = RuleSystem("short", "label", "", (), lambda b: {d: (np.zeros(3, np.int8), np.zeros(3, bool)) for d in ("in", "out")})
    with pytest.raises(UserError, match=r"variant short \(not registered\): in: arrays of shapes \(3,\)"):
        run.diagnose(short)

    def fails(cell):
        raise KeyError("oops")
    from nestlab.plugin import simple_rule
    with pytest.raises(UserError, match=r"variant failing \(not registered\) failed on .*KeyError: 'oops' \(test_plugins.py:"):
        run.diagnose(simple_rule("failing", fails))
    with pytest.raises(UserError, match=r"rule 'bad' returned 'maybe'"):
        run.diagnose(simple_rule("bad", lambda cell: "maybe"))


def test_new_variant_writes_a_package_whose_own_test_passes_once_installed(tmp_path, capsys):
    assert nestlab_main(["new-variant", "stuckish", "--out", str(tmp_path / "pkg")]) == 0
    pkg = tmp_path / "pkg"
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["nestlab.variants"] == {"stuckish": "nestlab_stuckish.rule:SYSTEM"}
    # what `pip install -e pkg` leaves: the package on the path and its entry point in a dist-info
    site = install(tmp_path / "site", "nestlab-stuckish", {}, meta["project"]["entry-points"]["nestlab.variants"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(pkg), str(site)])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")],
                       capture_output=True, text=True, env=env, timeout=300, cwd=pkg)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
    capsys.readouterr()
    assert nestlab_main(["new-variant", "peer", "--out", str(tmp_path / "x")]) == 2
    assert nestlab_main(["new-variant", "Bad Name", "--out", str(tmp_path / "y")]) == 2
    assert nestlab_main(["new-variant", "again", "--out", str(pkg)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [e.split(": ", 2)[-1][:40] for e in err] == ["the name is a built-in rule system's; ch",
                                                        "a name is lower-case letters, digits, '_",
                                                        f"{pkg} exists and is not an empty directory"[:40]]


POLICY_FILE = '''
from dataclasses import replace

from analysis.labels import WindowPolicy


class Wide(WindowPolicy):
    """The window policy with a 2-second tail by default."""
    system = "wide"
    summary = "window, tail 2 s"
    contract = 1
    params = tuple(replace(p, default=2.0) if p.name == "tail" else p for p in WindowPolicy.params)


class NoContract(WindowPolicy):
    system = "nocontract"


policies = [Wide, NoContract]
'''


def test_a_policy_plugin_from_a_file(tmp_path, fresh_registries):
    f = tmp_path / "wide.py"
    f.write_text(POLICY_FILE)
    run, *_ = make_run(tmp_path / "exp" / "r0")
    r = cli("--plugin", str(f), "policies")
    assert r.returncode == 0 and f"wide  (file {f})  window, tail 2 s" in r.stdout
    assert "left out: label policy plug-in 'nocontract'" in r.stdout and "states no contract version" in r.stderr
    plugins.add_files([f])
    wide = nestlab.open_run(run).accuracy("flowdiagnoser:theta=2", policy="wide")
    window = nestlab.open_run(run).accuracy("flowdiagnoser:theta=2", policy="window:tail=2")
    assert set(wide["policy"]) == {"wide"}
    pd.testing.assert_frame_equal(wide.drop(columns="policy"), window.drop(columns="policy"))
