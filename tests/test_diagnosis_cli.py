"""`nestlab diagnose` and `nestlab variants`, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.variants import parse_variant, systems
from nestlab.cli import nestlab_main
from rundir.errors import UserError

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "table5.json"
NESTLAB = Path(sys.executable).parent / "nestlab"


def cli(capsys, *args):
    code = nestlab_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_diagnose_json_default_variants(capsys):
    code, out, err = cli(capsys, "diagnose", "--json", str(EXAMPLE))
    assert code == 0, err
    doc = json.loads(out)
    assert [v["variant"] for v in doc["variants"]] == ["flowdiagnoser:theta=2", "nest-cf"]
    ids = {m["id"] for m in json.loads(EXAMPLE.read_text())["modules"]}
    for v in doc["variants"]:
        (snap,) = v["snapshots"]
        assert set(snap) == {"in", "out"} and set(snap["in"]) == ids and set(snap["out"]) == ids
    assert doc["variants"][0]["snapshots"][0]["in"]["TCPw"] == {"result": "STALLED", "positive": True}
    assert doc["variants"][1]["snapshots"][0]["in"]["TCPw"]["result"] == pytest.approx(0.936, abs=1e-4)


def test_diagnose_json_chosen_variants_from_stdin(capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(EXAMPLE.read_text()))
    code, out, _ = cli(capsys, "diagnose", "--json", "-", "--variant", "flowdiagnoser:theta=3",
                       "--variant", "nest-cf:anw=off,ign=off", "--variant", "flowdiagnoser:theta=3")
    assert code == 0
    doc = json.loads(out)
    assert [v["variant"] for v in doc["variants"]] == ["flowdiagnoser:theta=3", "nest-cf:anw=off,ign=off"]
    assert doc["variants"][1]["params"] == {"anw": False, "ign": False, "queues": True, "errors": True,
                                            "threshold": 0.0}


@pytest.mark.parametrize("content, message", [
    ("{not json", "invalid JSON at line 1"),
    ('{"modules": [{"id": "a", "kind": "app", "parents": ["ghost"]}], "snapshots": [{}]}', "unknown module"),
    ('{"modules": [{"id": "a", "kind": "app"}], "snapshots": [{"in": {"ghost": {}}}]}', "in.ghost: unknown module"),
])
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, content, message):
    p = tmp_path / "in.json"
    p.write_text(content)
    code, out, err = cli(capsys, "diagnose", "--json", str(p))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


@pytest.mark.parametrize("spec, message", [
    ("nosuch", "unknown variant 'nosuch'"),
    ("flowdiagnoser:theta=0", "theta=0: expected an integer >= 1"),
    ("flowdiagnoser:gamma=1", "unknown parameter 'gamma'"),
    ("nest-cf:anw=maybe", "expected on or off"),
    ("nest-cf:threshold=2", "expected a number in [-1, 1)"),
    ("nest-cf:anw", "expected anw=value"),
])
def test_bad_variant_exits_2(capsys, spec, message):
    code, out, err = cli(capsys, "diagnose", "--json", str(EXAMPLE), "--variant", spec)
    assert code == 2 and message in err and err.count("\n") == 1


def test_variant_names_are_canonical():
    assert parse_variant("flowdiagnoser").name == "flowdiagnoser:theta=2"
    assert parse_variant("flowdiagnoser: confirm=2 , theta=3").name == "flowdiagnoser:theta=3,confirm=2"
    assert parse_variant("nest-cf:anw=on,queues=no").name == "nest-cf:queues=off"
    assert parse_variant("nest-cf:threshold=0.25").name == "nest-cf:threshold=0.25"
    with pytest.raises(UserError):
        parse_variant("")


def test_variants_lists_every_system_and_parameter(capsys):
    code, out, _ = cli(capsys, "variants")
    assert code == 0
    for system in systems().values():
        assert system.name in out
        for p in system.params:
            assert f"{p.name}=" in out
        for preset in system.presets:
            parse_variant(preset)  # every listed variant parses
            assert preset in out


def test_diagnose_run_directory_summary_and_csv(capsys, tmp_path):
    from tests.support.synthetic import synthetic_run

    run = synthetic_run(tmp_path / "run", seconds=5, apps=1, conns=2, churn_s=2, seed=1)
    csv = tmp_path / "d.csv"
    code, out, err = cli(capsys, "diagnose", str(run), "--variant", "flowdiagnoser", "--csv", str(csv))
    assert code == 0, err
    assert "flowdiagnoser:theta=2" in out and "socket" in out
    assert csv.read_text().splitlines()[0] == "variant,dir,module,kind,seq,label,cf,positive,invalid"
    code, _, err = cli(capsys, "diagnose", str(tmp_path / "nowhere"))
    assert code == 2 and "no run.db" in err


def test_installed_entry_point():
    r = subprocess.run([str(NESTLAB), "diagnose", "--json", str(EXAMPLE), "--variant", "nest-cf"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["variants"][0]["variant"] == "nest-cf"
    r = subprocess.run([str(NESTLAB), "diagnose", "--json", "/nonexistent.json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: /nonexistent.json: cannot read")
    assert r.stderr.count("\n") == 1
