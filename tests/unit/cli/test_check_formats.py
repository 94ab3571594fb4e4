"""``q38 check --format text|json|sarif|github|junit``, rule selection and baselines (issue 26).

Invariants guarded:
- The SARIF of a broken real fixture (the builder's int4-cpu with a bad config value, an unknown
  node attribute, a hard-linked data file) and of a broken synthetic package (opset 0: every node
  fails) validates against the official SARIF 2.1.0 schema (vendored, tests/fixtures/sarif); it
  holds every result once with the text's rule id and level, the whole rule catalogue with the
  rules' properties, and locations: the .onnx file with the node as a logical location, or
  genai_config.json with the key path.
- ``--format github`` lines parse with GitHub's workflow-command grammar and name files that
  exist; ``--format junit`` is read by junitparser: one case per (graph, rule family), its
  failure counts those with errors.
- Text groups a cause's repeats: the synthetic package whose every node fails prints at most 20
  lines, while SARIF / json / junit keep every result.
- ``--ignore`` removes exactly the ignored rules' results and the exit code follows; ``--select``
  keeps only the selected ones; a selector that matches no rule exits 2 with one line.
- ``--warnings-as-errors`` fails a package with only a warning.
- A baseline written then read back: exit 0 on the same package (SARIF reports the suppressed
  results as suppressed), exit 1 when one new violation is added, naming only that one.
- ``--output FILE`` writes the report there (nothing on stdout) and nothing when the check
  cannot read the package or a flag is bad.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import onnx
import pytest
from junitparser import Failure, JUnitXml

from contracts.catalogue import catalogue
from contracts.runner import check_package
from q38 import __version__
from q38.cli import main

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_SCHEMA = json.loads((_FIXTURES / "sarif" / "sarif-schema-2.1.0.json").read_text())
# GitHub's workflow command grammar: ::command key=value,key=value::message, values with ',' and
# ':' escaped (%2C, %3A), the message with '%', CR and LF escaped.
_ANNOTATION = re.compile(r"^::(error|warning|notice)(?: ((?:\w+=[^,:\r\n]*)(?:,\w+=[^,:\r\n]*)*))?::([^\r\n]*)$")
_ANNOTATION_KEYS = {"file", "line", "endLine", "col", "endColumn", "title"}


def _unescape(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def _edit_config(pkg: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = pkg / "genai_config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _set_default_opset(path: Path, version: int) -> None:
    model = onnx.load(path, load_external_data=False)
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = version
    path.write_bytes(model.SerializeToString())


@pytest.fixture
def broken_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """int4-cpu (the real builder's package) with a config, a graph and a layout fault; cwd is
    tmp_path so artifact URIs are relative (as in a repository checkout)."""
    pkg = tmp_path / "real"
    shutil.copytree(_FIXTURES / "real" / "int4-cpu", pkg)
    so = lambda d: d["model"]["decoder"]["session_options"]  # noqa: E731
    _edit_config(pkg, lambda d: so(d).update({"session.x": 1}))  # CFG-VALUES-001
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    gqa.attribute.append(onnx.helper.make_attribute("bogus_attr", 1))  # ORT-SCHEMA-003
    (pkg / "model.onnx").write_bytes(model.SerializeToString())
    os.link(pkg / "model.onnx.data", tmp_path / "data.link")  # PKG-HARDLINK-001 (warning)
    monkeypatch.chdir(tmp_path)
    return pkg


@pytest.fixture
def broken_synth(tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny synthetic package whose target imports the default domain at opset 0: every
    node of the target fails ORT-SCHEMA-001 (one cause)."""
    pkg = tmp_path / "synth"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    _set_default_opset(pkg / "model.onnx", 0)
    monkeypatch.chdir(tmp_path)
    return pkg


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


_TEXT_ROW = re.compile(r"^([A-Z0-9]+(?:-[A-Z0-9]+)+)\s+(error|warning)\s+(\S+)\s+(\S+)\s+(.*)$")


def _text_rows(out: str) -> list[tuple[str, str, str, str, str]]:
    return [m.groups() for m in map(_TEXT_ROW.match, out.splitlines()) if m]  # type: ignore[misc]


def _sarif_key(result: dict[str, Any]) -> tuple[str, str, str, str, str]:
    props = result["properties"]
    return (result["ruleId"], result["level"], props["graph"] or "-", props["node"] or "-", result["message"]["text"])


@pytest.mark.parametrize("which", ["broken_real", "broken_synth"])
def test_sarif_validates_and_holds_every_text_violation_once(which: str, request: pytest.FixtureRequest,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pkg: Path = request.getfixturevalue(which)
    code, text, _ = _run(capsys, str(pkg))
    assert code == 1
    code, out, err = _run(capsys, str(pkg), "--format", "sarif")
    assert code == 1 and err == ""
    log = json.loads(out)
    jsonschema.Draft4Validator(_SCHEMA).validate(log)
    assert log["version"] == "2.1.0" and len(log["runs"]) == 1
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "q38" and driver["version"] == __version__
    assert [d["id"] for d in driver["rules"]] == [e.rule_id for e in catalogue()]
    for d, e in zip(driver["rules"], catalogue()):
        assert d["defaultConfiguration"]["level"] == e.severity
        assert d["properties"]["enforcement"] == e.enforced and d["properties"]["ortSource"] == e.source
        assert d["properties"]["ortVersions"]["since"] == e.since and d["properties"]["ortVersions"]["until"] == e.until
        assert e.example in d["help"]["text"] and e.fix in d["help"]["text"]
    results = run["results"]
    violations = check_package(pkg).violations
    assert len(results) == len(violations)
    assert Counter((r["ruleId"], r["level"]) for r in results) == Counter((v.rule_id, v.severity) for v in violations)
    sarif_keys = Counter(_sarif_key(r) for r in results)
    rows = _text_rows(text)
    assert rows
    for row in rows:  # every text row is one SARIF result with the same rule id and level
        assert sarif_keys[row] == 1, row
    for r in results:
        assert driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert Path(uri).exists(), uri  # relative to the working directory (the repository root)
        if r["properties"]["node"]:
            assert uri == f"{pkg.name}/model.onnx"
            logical = r["locations"][0]["logicalLocations"][0]
            assert logical["name"] == r["properties"]["node"] and logical["kind"] == "element"
        assert "suppressions" not in r


def test_sarif_points_config_results_at_the_key_path(broken_real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(capsys, str(broken_real), "--format", "sarif")
    results = {r["ruleId"]: r for r in json.loads(out)["runs"][0]["results"]}
    assert set(results) == {"CFG-VALUES-001", "ORT-SCHEMA-003", "PKG-HARDLINK-001"}
    config = results["CFG-VALUES-001"]["locations"][0]
    assert config["physicalLocation"]["artifactLocation"]["uri"] == "real/genai_config.json"
    assert config["logicalLocations"][0]["fullyQualifiedName"] == "model.decoder.session_options.session.x"
    assert config["logicalLocations"][0]["kind"] == "property"
    node = results["ORT-SCHEMA-003"]["locations"][0]
    assert node["logicalLocations"][0]["fullyQualifiedName"] == "decoder//model/layers.3/attn/GroupQueryAttention"
    link = results["PKG-HARDLINK-001"]
    assert link["level"] == "warning"
    assert link["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "real/model.onnx.data"


def test_github_annotations_parse_with_githubs_grammar(broken_real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(broken_real), "--format", "github")
    assert code == 1
    parsed = []
    for line in out.splitlines():
        m = _ANNOTATION.match(line)
        assert m, line
        props = dict(item.split("=", 1) for item in m.group(2).split(","))
        assert set(props) <= _ANNOTATION_KEYS and Path(_unescape(props["file"])).is_file()
        parsed.append((m.group(1), _unescape(props["title"]), _unescape(m.group(3))))
    assert sorted((level, rule) for level, rule, _ in parsed) == [
        ("error", "CFG-VALUES-001"), ("error", "ORT-SCHEMA-003"), ("warning", "PKG-HARDLINK-001")]
    message = next(msg for _, rule, msg in parsed if rule == "ORT-SCHEMA-003")
    assert message == ("decoder node /model/layers.3/attn/GroupQueryAttention: "
                       "Unrecognized attribute: bogus_attr for operator GroupQueryAttention")


def test_github_escapes_what_would_break_a_workflow_command() -> None:
    from q38.report.github import escape_data, escape_property

    assert escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    assert _unescape(escape_property("x,y:z%0A")) == "x,y:z%0A"


def test_junit_has_one_case_per_graph_and_family_and_counts_failures(broken_real: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    code, out, _ = _run(capsys, str(broken_real), "--format", "junit", "--output", "report.xml")
    assert code == 1 and out == ""
    xml = JUnitXml.fromfile("report.xml")
    suites = list(xml)
    assert len(suites) == 1
    cases = [(c.classname, c.name, c) for c in suites[0]]
    keys = [(cls, name) for cls, name, _ in cases]
    assert len(keys) == len(set(keys))
    failed = {(cls, name) for cls, name, c in cases if any(isinstance(r, Failure) for r in c.result)}
    assert failed == {("q38.check.decoder", "schema"), ("q38.check.genai_config.json", "config")}
    assert suites[0].failures == xml.failures == 2 and suites[0].tests == len(cases)
    graph_families = {e.family for e in catalogue() if e.kind == "graph"}
    assert {name for cls, name in keys if cls == "q38.check.decoder"} >= graph_families
    schema = next(c for cls, name, c in cases if (cls, name) == ("q38.check.decoder", "schema"))
    assert "ORT-SCHEMA-003 error decoder//model/layers.3/attn/GroupQueryAttention" in schema.result[0].text
    layout = next(c for cls, name, c in cases if (cls, name) == ("q38.check.decoder", "layout"))
    assert not layout.result and "PKG-HARDLINK-001 warning" in layout.system_out


def test_a_package_whose_every_node_fails_prints_at_most_20_lines(broken_synth: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    violations = check_package(broken_synth).violations
    schema = [v for v in violations if v.rule_id == "ORT-SCHEMA-001"]
    assert len(schema) > 300 and len({v.node for v in schema}) == len(schema)
    code, out, _ = _run(capsys, str(broken_synth))
    lines = out.splitlines()
    assert code == 1 and len(lines) <= 20, out
    assert f"… and {len(schema) - 3} more nodes (same cause)" in lines
    assert lines[-1] == f"FAIL: {len(violations)} error(s), 0 warning(s)"
    for fmt in ("json", "sarif", "junit"):
        code, out, _ = _run(capsys, str(broken_synth), "--format", fmt)
        assert code == 1
        if fmt == "json":
            assert len(json.loads(out)["violations"]) == len(violations)
        elif fmt == "sarif":
            assert len(json.loads(out)["runs"][0]["results"]) == len(violations)
        else:
            assert out.count("ORT-SCHEMA-001 error target/") == len(schema)


def test_text_groups_by_rule_and_cause_not_by_rule_alone() -> None:
    from contracts._rule import Violation
    from q38.report.results import Result
    from q38.report.text import group_causes

    def r(rule: str, message: str, node: str = "n") -> Result:
        return Result(Violation(rule, message, "g", node), "error", "fp")

    same = [r("R-1", f"No Op registered for {op} with domain_version of 0") for op in ("A", "B", "C", "D")]
    longer = r("R-1", "No Op registered for A with domain_version of 5 in x")
    two_words = r("R-1", "No Op registered for Z with domain_version of 7")  # op and version differ
    one_word = r("R-1", "No Op registered for A with domain_version of 7")  # the version only
    other_rule = r("R-2", "No Op registered for A with domain_version of 0")
    groups = group_causes([*same, longer, two_words, one_word, other_rule])
    assert groups == [[*same, one_word], [longer], [two_words], [other_rule]]


def test_ignore_removes_exactly_that_rule_and_the_exit_code_follows(broken_real: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def ids(*flags: str) -> tuple[int, list[str], list[str]]:
        code, out, _ = _run(capsys, str(broken_real), "--format", "json", *flags)
        doc = json.loads(out)
        assert doc["ok"] is (code == 0)
        return code, sorted(v["rule_id"] for v in doc["violations"]), sorted(v["rule_id"] for v in doc["suppressed"])

    assert ids() == (1, ["CFG-VALUES-001", "ORT-SCHEMA-003", "PKG-HARDLINK-001"], [])
    assert ids("--ignore", "ORT-SCHEMA-003") == (1, ["CFG-VALUES-001", "PKG-HARDLINK-001"], ["ORT-SCHEMA-003"])
    assert ids("--ignore", "ORT-SCHEMA-003,CFG-VALUES") == (0, ["PKG-HARDLINK-001"], ["CFG-VALUES-001", "ORT-SCHEMA-003"])
    assert ids("--ignore", "ORT-SCHEMA-003", "--ignore", "cfg-values-001") == (0, ["PKG-HARDLINK-001"],
                                                                                ["CFG-VALUES-001", "ORT-SCHEMA-003"])
    assert ids("--select", "ORT-SCHEMA") == (1, ["ORT-SCHEMA-003"], ["CFG-VALUES-001", "PKG-HARDLINK-001"])
    assert ids("--select", "PKG-") == (0, ["PKG-HARDLINK-001"], ["CFG-VALUES-001", "ORT-SCHEMA-003"])
    assert ids("--select", "PKG-", "--warnings-as-errors")[0] == 1
    code, out, _ = _run(capsys, str(broken_real), "--ignore", "ORT-SCHEMA-003")
    assert code == 1 and "ORT-SCHEMA-003" not in out.split("FAIL:")[0]
    assert out.splitlines()[-1] == "FAIL: 1 error(s), 1 warning(s); suppressed: 1 by --ignore"
    code, out, _ = _run(capsys, str(broken_real), "--ignore", "ORT-SCHEMA-003", "--format", "sarif")
    suppressed = [r for r in json.loads(out)["runs"][0]["results"] if "suppressions" in r]
    assert [(r["ruleId"], r["suppressions"][0]["kind"]) for r in suppressed] == [("ORT-SCHEMA-003", "external")]


def test_warnings_as_errors_fails_a_package_with_only_a_warning(broken_real: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    flags = ("--ignore", "CFG-VALUES-001,ORT-SCHEMA-003")
    code, out, _ = _run(capsys, str(broken_real), *flags)
    assert code == 0 and out.splitlines()[-1].startswith("OK: 0 error(s), 1 warning(s)")
    code, out, _ = _run(capsys, str(broken_real), *flags, "--warnings-as-errors")
    assert code == 1 and out.splitlines()[-1].startswith("FAIL: 1 error(s), 0 warning(s)")
    code, out, _ = _run(capsys, str(broken_real), *flags, "--warnings-as-errors", "--format", "github")
    assert code == 1 and out.startswith("::error file=real/model.onnx.data,title=PKG-HARDLINK-001::")


def test_a_selector_that_matches_no_rule_is_one_line(broken_real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--select", "--ignore"):
        code, out, err = _run(capsys, str(broken_real), flag, "ORT-SCHEMA-999", "--output", "out.txt")
        assert (code, out) == (2, "")
        assert err == f"q38 check: error: {flag} 'ORT-SCHEMA-999' matches no rule (q38 rules lists them)\n"
    assert not Path("out.txt").exists()
    code, _, err = _run(capsys, str(broken_real), "--json", "--format", "sarif")
    assert code == 2 and err == "q38 check: error: --json and --format sarif ask for two formats; give one\n"


def test_a_baseline_gates_on_new_violations_only(broken_real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(broken_real), "--write-baseline", "baseline.json")
    assert code == 0 and out.splitlines()[-2:] == ["OK: 0 error(s), 0 warning(s); suppressed: 3 in the baseline",
                                                   "q38 check: wrote baseline.json (the baseline: 3 result(s) recorded)"]
    baseline = json.loads(Path("baseline.json").read_text())
    assert baseline["q38_baseline"] == 1
    assert sorted(e["rule_id"] for e in baseline["results"]) == ["CFG-VALUES-001", "ORT-SCHEMA-003", "PKG-HARDLINK-001"]
    # Read back: the same package passes, from another working directory and path spelling too.
    code, out, _ = _run(capsys, str(broken_real), "--baseline", "baseline.json")
    assert code == 0, out
    os.chdir(broken_real)
    code, out, _ = _run(capsys, ".", "--baseline", "../baseline.json", "--format", "sarif")
    results = json.loads(out)["runs"][0]["results"]
    assert code == 0 and len(results) == 3
    assert all(r["suppressions"][0]["justification"] == "in the baseline ../baseline.json" for r in results)
    os.chdir(broken_real.parent)
    # One new violation: exit 1, and it is the only active result.
    _edit_config(broken_real, lambda d: d["model"]["decoder"]["session_options"].update({"session.y": 2}))
    code, out, _ = _run(capsys, str(broken_real), "--baseline", "baseline.json", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and [(v["rule_id"], v["message"]) for v in doc["violations"]] == [
        ("CFG-VALUES-001", "model.decoder.session_options.session.y: session config values must be strings, got 2")]
    assert len(doc["suppressed"]) == 3
    code, out, _ = _run(capsys, str(broken_real), "--baseline", "baseline.json")
    assert code == 1 and out.splitlines()[-1] == "FAIL: 1 error(s), 0 warning(s); suppressed: 3 in the baseline"


def test_a_bad_baseline_or_output_is_one_line_and_writes_nothing(broken_real: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    Path("notjson.json").write_text("{")
    Path("other.json").write_text('{"results": []}')
    cases = [
        (("--baseline", "missing.json"), "missing.json: "),
        (("--baseline", "notjson.json"), "--baseline notjson.json: not JSON"),
        (("--baseline", "other.json"), "--baseline other.json: not a q38 baseline"),
        (("--baseline", "b.json", "--write-baseline", "b.json"), "--baseline and --write-baseline: give one"),
    ]
    for flags, text in cases:
        code, out, err = _run(capsys, str(broken_real), *flags, "--output", "report.sarif", "--format", "sarif")
        assert (code, out) == (2, ""), flags
        assert err.startswith("q38 check: error: ") and text in err and err.count("\n") == 1, err
    code, out, err = _run(capsys, "no-such-package", "--output", "report.sarif", "--write-baseline", "b.json")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert not Path("report.sarif").exists() and not Path("b.json").exists()
    assert sorted(p.name for p in Path.cwd().iterdir()) == ["data.link", "notjson.json", "other.json", "real"]


def test_a_fingerprint_ignores_how_the_package_path_is_spelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contracts._rule import Violation
    from q38.report.results import fingerprint

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    monkeypatch.chdir(tmp_path)

    def at(path: str) -> Violation:
        return Violation("PKG-LIB-001", f"{path}/libs/x.so: library 'libs/x.so' does not exist; v1.2", "decoder", "n.1")

    spellings = [fingerprint(at(str(pkg)), str(pkg)), fingerprint(at("pkg"), "pkg"), fingerprint(at("./pkg"), "./pkg")]
    assert len(set(spellings)) == 1
    monkeypatch.chdir(pkg)
    assert fingerprint(at(str(pkg)), ".") == spellings[0]  # '.' is not stripped from the message's dots
    assert fingerprint(Violation("PKG-LIB-001", "libs/x.so: library 'libs/x.so' does not exist; v1.2", "decoder", "n.1"), ".") == spellings[0]
    assert fingerprint(at("pkg"), "pkg") != fingerprint(Violation("PKG-LIB-001", "other", "decoder", "n.1"), "pkg")


def test_a_hostile_node_name_stays_one_line_and_valid_xml(broken_real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = onnx.load(broken_real / "model.onnx", load_external_data=False)
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    gqa.name = "gqa\x01\n::error title=x::injected\x1b[31m"
    (broken_real / "model.onnx").write_bytes(model.SerializeToString())
    code, out, _ = _run(capsys, str(broken_real), "--format", "github")
    assert code == 1 and len(out.splitlines()) == 3 and all(_ANNOTATION.match(line) for line in out.splitlines())
    assert "node gqa\\x01\\n::error title=x::injected\\x1b[31m: Unrecognized attribute" in out
    code, out, _ = _run(capsys, str(broken_real), "--format", "junit", "--output", "r.xml")
    assert code == 1 and JUnitXml.fromfile("r.xml").failures == 2
    code, out, _ = _run(capsys, str(broken_real))
    assert code == 1 and len(out.splitlines()) == 6
    code, out, _ = _run(capsys, str(broken_real), "--format", "sarif")
    jsonschema.Draft4Validator(_SCHEMA).validate(json.loads(out))


def test_a_selector_may_name_a_result_id_the_catalogue_lacks() -> None:
    from q38.errors import FlagError
    from q38.report.results import check_selectors

    # CFG-SURFACE-002 (onnxruntime-genai 0.18.0 refuses a research config) has its rule record:
    # selecting it needs no result. An id no record has is accepted only when a result names it.
    check_selectors("--ignore", ["CFG-SURFACE-002"], {"ORT-SCHEMA-001"})
    check_selectors("--ignore", ["X-NEW-001"], {"X-NEW-001", "ORT-SCHEMA-001"})
    check_selectors("--select", ["ort-schema", "QSA-DSA-001"])
    with pytest.raises(FlagError, match="--ignore 'X-NEW-001' matches no rule"):
        check_selectors("--ignore", ["X-NEW-001"], {"ORT-SCHEMA-001"})


def test_sarif_uris_outside_the_working_directory_are_file_uris(broken_real: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, out, _ = _run(capsys, str(broken_real), "--format", "sarif")
    log = json.loads(out)
    jsonschema.Draft4Validator(_SCHEMA).validate(log)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
    assert uris == {(broken_real / name).resolve().as_uri() for name in ("genai_config.json", "model.onnx", "model.onnx.data")}
