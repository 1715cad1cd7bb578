"""Plans: every example registers; each validation rule refuses a broken plan (exit 2, field named, nothing appended)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ledger.canonical import canonical
from ledger.errors import FieldError
from runner.plan import load_plan, parse_plan, plan_sha256
from runner.plan.register import registered

from .conftest import Site, tally
from .script import EXAMPLES, SIMPLE_PP3

PLANS = sorted(p.name for p in EXAMPLES.glob("seed*.toml"))  # examples/site-*.toml are site files
PP = "seed000-production-policy.toml"
ABBA = "seed003-abba.toml"
SIMPLE = str(SIMPLE_PP3)  # seed 003 without bounded runs, priming and the seed budget rules


def test_examples_are_the_seeds() -> None:
    assert PLANS == ["seed000-controlled.toml", "seed000-production-policy.toml", "seed003-abba.toml"]


@pytest.mark.parametrize("name", PLANS)
def test_every_example_registers(site: Site, name: str) -> None:
    before = site.size()
    result = tally("window", "register", EXAMPLES / name, "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    plan = load_plan(EXAMPLES / name)
    assert out["window"] == plan.window_id and out["plan_sha256"] == plan.sha256
    assert site.size() == before + 1
    event = site.book.get(out["seq"])
    assert (event.stream, event.type) == (f"window/{plan.window_id}", "window.registered")
    payload = event.payload
    assert payload["window"] == plan.window_id
    assert payload["plan_sha256"] == hashlib.sha256(canonical(payload["plan"])).hexdigest() == plan.sha256
    assert parse_plan(payload["plan"]) == plan
    # the TOML source and the family files travel as blobs, addressed by their digests
    source = site.book.blob(payload["source"]["blob"])
    assert source is not None and source.data == (EXAMPLES / name).read_bytes()
    for family in plan.families:
        blob = site.book.blob(payload["family_files"][family.name]["blob"])
        assert blob is not None and hashlib.sha256(blob.data).hexdigest() == family.sha256
    # plain output names the window
    assert tally("window", "register", EXAMPLES / name).out.splitlines()[0] == plan.window_id


def test_example_files_are_tracked_by_git() -> None:
    """A fresh clone has every file the examples need (nothing ignored or left untracked)."""
    repo = EXAMPLES.parent
    if not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    needed = [f"examples/{name}" for name in PLANS]
    for name in PLANS:
        needed += [f"examples/{f.prompts}" for f in load_plan(EXAMPLES / name).families]
    done = subprocess.run(["git", "-C", str(repo), "ls-files", "--error-unmatch", *sorted(set(needed))],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_same_plan_again_is_a_no_op(site: Site) -> None:
    first = json.loads(tally("window", "register", EXAMPLES / PP, "--json").out)
    size = site.size()
    again = tally("window", "register", EXAMPLES / PP, "--json")
    assert again.code == 0 and json.loads(again.out)["already"] is True
    assert json.loads(again.out)["seq"] == first["seq"] and site.size() == size


def test_plan_edited_after_registration_is_refused(site: Site, tmp_path: Path) -> None:
    assert tally("window", "register", EXAMPLES / PP).code == 0
    size = site.size()
    edited = _copy(tmp_path, PP).read_text().replace("bar = 0.02", "bar = 0.01")
    (tmp_path / "plan" / PP).write_text(edited)
    result = tally("window", "register", tmp_path / "plan" / PP)
    assert result.code == 1
    assert "already registered" in result.err and "new registration" in result.err
    assert site.size() == size
    # under a new window id it is a new registration
    renamed = tally("window", "register", tmp_path / "plan" / PP, "--window-id", "pp4-win2-bar-0.01")
    assert renamed.code == 0 and site.size() == size + 1


def test_dry_run_appends_nothing(site: Site) -> None:
    size = site.size()
    result = tally("window", "register", EXAMPLES / ABBA, "--dry-run", "--json")
    assert result.code == 0 and json.loads(result.out)["seq"] is None
    assert site.size() == size


def test_commit_override_is_registered(site: Site) -> None:
    commit = "ab" * 20
    out = json.loads(tally("window", "register", EXAMPLES / PP, "--commit", commit, "--json").out)
    reg = registered(site.book, out["window"])
    assert reg is not None and reg.plan.commit == commit and reg.plan_sha256 == out["plan_sha256"]
    assert out["plan_sha256"] != load_plan(EXAMPLES / PP).sha256


def test_registered_plan_survives_jcs() -> None:
    """Floats become integers in JCS (1.0 -> 1); the plan read back has the same digest."""
    for name in PLANS:
        plan = load_plan(EXAMPLES / name)
        again = parse_plan(json.loads(canonical(plan.to_json())))
        assert again == plan and again.sha256 == plan.sha256 == plan_sha256(plan.to_json())


def _edited(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    path = _copy(tmp_path, name)
    text = path.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)
    return path


def test_any_context_label_with_a_declared_size(tmp_path: Path) -> None:
    path = _edited(tmp_path, ABBA, ('name = "32k"\ncontext = "32k"', 'name = "2k"\ncontext = "2k"\ncontext_tokens = 2000'),
                   ('32k = ["op-32k-01"]', '"2k" = ["op-32k-01"]'), ('32k = ["fi-32k-01"]', '"2k" = ["fi-32k-01"]'))
    plan = load_plan(path)
    cells = {c.name: c for c in plan.cells}
    assert cells["2k"].context == "2k" and cells["2k"].tokens == 2000 and cells["short"].tokens == 2048
    registered_cells = plan.to_json()["cells"]
    assert [c.get("context_tokens") for c in registered_cells] == [None, 2000, None]  # written only when given
    assert parse_plan(json.loads(canonical(plan.to_json()))) == plan
    assert {w.cell for w in plan.waves} == {"short", "2k", "150k"}


def test_spec_off_arm_and_clockless_plan_round_trip(tmp_path: Path) -> None:
    path = _edited(tmp_path, ABBA, ("production_clock_cap_mhz = 2300", 'production_clock_cap_mhz = "none"'))
    text = path.read_text()
    start = text.index('role = "A"')
    spec = text.index("speculative = ", start)
    path.write_text(text[:spec] + 'speculative = "none"\n' + text[text.index("\n", spec) + 1:])
    plan = load_plan(path)
    assert plan.production_clock_cap_mhz is None and plan.to_json()["production_clock_cap_mhz"] is None
    assert plan.arm("A").speculative is None and not plan.arm("A").speculates and plan.arm("B").speculates
    assert plan.to_json()["arms"][0]["speculative"] == "none"
    again = parse_plan(json.loads(canonical(plan.to_json())))
    assert again == plan and again.sha256 == plan.sha256


def test_standard_plans_keep_their_registered_form() -> None:
    """The optional members (context_tokens, allowed_differences) appear only where a plan gives them."""
    for name in PLANS:
        data = load_plan(EXAMPLES / name).to_json()
        assert all("context_tokens" not in c for c in data["cells"])
        assert all("allowed_differences" not in a for a in data["arms"] if a["role"] != "P")


def test_win2_schedule_matches_seed_000() -> None:
    plan = load_plan(EXAMPLES / PP)
    assert [s.label for s in plan.starts] == ["s1-P", "s2-B", "s3-P"]
    assert plan.decision_cells == ("short-b1", "32k-b1")
    assert plan.decision_params == {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2}
    assert plan.sampling.max_tokens == 512 and plan.sampling.ignore_eos and plan.sampling.seed_base == 42
    for start in plan.starts:
        for cell in plan.cells:
            waves = [w for w in plan.waves_of(start.id) if w.cell == cell.name]
            # six waves = three repeats x two waves (one per family), seed 42 + wave
            assert [w.wave for w in waves] == [1, 2, 3, 4, 5, 6]
            assert [w.repeat for w in waves] == [1, 1, 2, 2, 3, 3]
            assert [w.family for w in waves] == ["opinions", "filings"] * 3
            assert [w.seed for w in waves] == [43, 44, 45, 46, 47, 48]
            for w in waves:
                assert w.prompt_ids == plan.family(w.family).orders[cell.context]
    # matched across starts: the same (cell, wave) has the same seed, family and prompts
    by_key: dict[tuple[str, int], set[tuple[int, str, tuple[str, ...]]]] = {}
    for w in plan.waves:
        by_key.setdefault((w.cell, w.wave), set()).add((w.seed, w.family, w.prompt_ids))
    assert all(len(v) == 1 for v in by_key.values())


def test_pp3_schedule_matches_seed_003() -> None:
    plan = load_plan(EXAMPLES / ABBA)
    assert plan.start_ids == ("A1", "B1", "B2", "A2") and [s.role for s in plan.starts] == ["A", "B", "B", "A"]
    assert plan.decision_params == {"min_gain": 0.05, "bootstrap": 2000, "seed": 4103, "interval": 0.90,
                                    "max_regression": 0.05}
    for start in plan.start_ids:
        waves = plan.waves_of(start)
        # six frozen requests per block: two families x short/32k/150k, one request each
        assert len(waves) == 6 and all(len(w.prompt_ids) == 1 and w.repeat == 1 for w in waves)
        assert {(w.cell, w.family) for w in waves} == {(c, f) for c in ("short", "32k", "150k")
                                                       for f in ("opinions", "filings")}
        # the predeclared rotating order: each context starts with the next family
        assert [w.family for w in waves] == ["opinions", "filings", "filings", "opinions", "opinions", "filings"]
    assert plan.waves_of("A1")[0].prompt_ids == plan.waves_of("B2")[0].prompt_ids


# ---------------------------------------------------------------------- broken plans


def _copy(tmp_path: Path, name: str) -> Path:
    """The examples (and the plan ``name``, an example or a fixture path) copied under ``tmp_path``."""
    target = tmp_path / "plan"
    if not target.exists():
        shutil.copytree(EXAMPLES, target)
    source = EXAMPLES / name
    if not (target / source.name).exists():
        shutil.copy(source, target / source.name)
    return target / source.name


BROKEN = [
    # (rule, example, old text, new text, expected start of the error after "tally: ")
    ("toml_syntax", PP, 'protocol = "win2-v1"', 'protocol = "win2-v1', "not valid TOML"),
    ("missing_field", PP, 'window_id = "pp4-win2-production-policy"\n', "", "plan.window_id: required"),
    ("unknown_top_level_field", PP, 'protocol = "win2-v1"', 'protocol = "win2-v1"\ncolour = "blue"',
     "plan.colour: unknown field"),
    ("unknown_field_in_table", PP, 'name = "32k-b1"', 'name = "32k-b1"\nbatch = 1', "plan.cells[1].batch: unknown field"),
    ("window_id_with_slash", PP, '"pp4-win2-production-policy"', '"pp4/win2"', "plan.window_id: 'pp4/win2' is not"),
    ("protocol_not_enumerated", PP, 'protocol = "win2-v1"', 'protocol = "win3-v1"',
     "plan.protocol: expected one of win2-v1, pp3-v1"),
    ("mode_of_other_protocol", PP, 'mode = "production-policy"', 'mode = "abba"',
     "plan.mode: expected one of controlled, production-policy"),
    ("commit_not_full", PP, 'commit = "3f1c9a7e5b2d4c6a8e0f1b3d5c7e9a1b2c4d6e8f"', 'commit = "3f1c9a7"', "plan.commit:"),
    ("chain_not_enumerated", PP, 'chain = "chained"', 'chain = "maybe"', "plan.chain: expected one of none, chained, last"),
    ("cell_context_without_a_size", PP, 'context = "32k"', 'context = "33k"',
     "plan.cells[1].context_tokens: required for context '33k'"),
    ("cell_context_not_a_label", PP, 'context = "32k"', 'context = "32 k"', "plan.cells[1].context: '32 k' is not"),
    ("speculative_neither_table_nor_none", PP, 'speculative = { method = "mtp", num_speculative_tokens = 5, adaptive_k = true',
     'speculative = "off"\nxspeculative = { method = "mtp", num_speculative_tokens = 5, adaptive_k = true',
     "plan.arms[0].speculative: expected a non-empty table"),
    ("allowed_differences_on_a_candidate", PP, 'name = "fixed5-sampled"',
     'name = "fixed5-sampled"\nallowed_differences = ["image"]',
     "plan.arms[1].allowed_differences: only arm P is compared"),
    ("wrong_type", PP, "max_tokens = 512", 'max_tokens = "512"', "plan.sampling.max_tokens: expected an integer"),
    ("temperature_not_one", PP, "temperature = 1.0", "temperature = 0.7", "plan.sampling.temperature:"),
    ("top_p_not_one", PP, "top_p = 1.0", "top_p = 0.9", "plan.sampling.top_p:"),
    ("win2_length_not_forced", PP, "ignore_eos = true", "ignore_eos = false", "plan.sampling.ignore_eos:"),
    ("date_instead_of_string", PP, 'description = "R-PP4', 'description = 2026-01-01\nxdescription = "R-PP4',
     "plan.description: expected a string"),
    ("arm_declared_twice", PP, 'role = "B"', 'role = "P"', "plan.arms[1].role: arm P is declared twice"),
    ("arm_not_of_mode", PP, 'role = "P"', 'role = "A"', "plan.arms[0].role: A is not an arm"),
    ("arm_missing", PP, 'role = "B"\nname = "fixed5-sampled"', 'role = "P"\nname = "fixed5-sampled"',
     "plan.arms[1].role"),
    ("config_digest_not_sha256", PP, 'config_digest = "cf38', 'config_digest = "xx38', "plan.arms[0].config_digest:"),
    ("speculative_missing", PP, "speculative = { method = \"mtp\", num_speculative_tokens = 5, adaptive_k = true",
     "xspeculative = { method = \"mtp\", num_speculative_tokens = 5, adaptive_k = true", "plan.arms[0].speculative: required"),
    ("start_order_not_control_candidate_control", PP, 'id = "s3"\narm = "P"', 'id = "s3"\narm = "B"',
     "plan.starts: win2-v1 mode production-policy expects three starts P, B, P"),
    ("start_arm_not_declared", PP, 'id = "s1"\narm = "P"', 'id = "s1"\narm = "A"',
     "plan.starts[0].arm: expected one of B, P"),
    ("start_twice", PP, 'id = "s3"', 'id = "s1"', "plan.starts[2].id: start s1 appears twice"),
    ("cell_twice", PP, 'name = "32k-b1"', 'name = "short-b1"', "plan.cells[1].name: cell short-b1 appears twice"),
    ("no_decision_cell", PP, "decision = true\n\n[[cells]]", "decision = false\n\n[[cells]]",
     None),  # patched below: both cells off
    ("concurrency_zero", PP, "concurrency = 1", "concurrency = 0", "plan.cells[0].concurrency: must be >= 1"),
    ("family_sha256_mismatch", PP, 'sha256 = "b40d', 'sha256 = "0b0d', "plan.families[0].sha256: does not match"),
    ("family_file_missing", PP, "families/opinions.jsonl", "families/nope.jsonl",
     "plan.families[0].prompts: cannot read"),
    ("family_path_escapes", PP, "families/opinions.jsonl", "../opinions.jsonl",
     "plan.families[0].prompts: '../opinions.jsonl' must be a relative path"),
    ("order_names_unknown_prompt", PP, '"op-short-03"', '"op-short-09"',
     "plan.families[0].orders.short[0]: prompt 'op-short-09' is not in families/opinions.jsonl"),
    ("order_prompt_of_other_context", PP, '"op-short-03"', '"op-150k-01"',
     "plan.families[0].orders.short[0]: prompt 'op-150k-01' has kind 150k, not context short"),
    ("order_missing_for_cell_context", PP, ', 32k = ["op-32k-02", "op-32k-01"]', "",
     "plan.families[0].orders: no frozen order for context 32k"),
    ("order_prompt_twice", PP, '"op-short-01", "op-short-04"', '"op-short-01", "op-short-01"',
     "plan.families[0].orders.short[2]: 'op-short-01' appears twice"),
    ("win2_repeats_below_two", PP, "repeats = 3", "repeats = 1", "plan.measurement.repeats: win2-v1 needs at least 2"),
    ("wave_order_not_enumerated", PP, 'order = "cell-major"', 'order = "random"', "plan.measurement.order:"),
    ("wave_deadline_below_request_deadline", PP, "wave_deadline_s = 900.0", "wave_deadline_s = 10.0",
     "plan.measurement.wave_deadline_s: shorter than request_deadline_s"),
    ("bar_out_of_range", PP, "bar = 0.02", "bar = 1.5", "plan.decision.bar: must be < 1"),
    ("decision_param_of_other_rule", PP, "bar = 0.02", "bar = 0.02\nmin_gain = 0.05",
     "plan.decision.min_gain: unknown field"),
    ("guard_repeats_above_repeats", PP, "guard_min_repeats = 2", "guard_min_repeats = 4",
     "plan.decision.guard_min_repeats: more than the 3 registered repeats"),
    ("stage_kinds_out_of_order", PP, 'name = "strict restore + watch"\nkind = "restore"',
     'name = "strict restore + watch"\nkind = "setup"', "plan.budget.stages[5].kind: a setup stage cannot follow"),
    ("stage_minutes_not_positive", PP, "minutes = 4.8", "minutes = 0.0", "plan.budget.stages[0].minutes: must be > 0"),
    ("stage_start_not_in_plan", PP, 'start = "s1"', 'start = "s9"', "plan.budget.stages[2].start: expected one of"),
    ("reserve_stage_without_reserve", PP, "pair_reserve_s = 333.0     # the measured pair reserve\n"
                                          "dry_bound_s = 600.0        # the dry bound the gate decides on\n", "",
     "plan.budget.stages[1].reserve: a reserve stage needs budget.pair_reserve_s"),
    ("dry_bound_below_estimate", PP, "dry_bound_s = 600.0", "dry_bound_s = 100.0",
     "plan.budget.dry_bound_s: below the estimated pair reserve"),
    ("restore_reserve_over_ceiling", PP, "restore_reserve_min = 12.0", "restore_reserve_min = 90.0",
     "plan.budget.restore_reserve_min: must be below the hard ceiling"),
    ("measurement_end_after_ceiling", PP, "measurement_end_limit_min = 73.0", "measurement_end_limit_min = 90.0",
     "plan.budget.measurement_end_limit_min: after the hard ceiling"),
    ("stop_admitting_after_measurement_end", ABBA, "stop_admitting_min = 50.0", "stop_admitting_min = 70.0",
     "plan.budget.stop_admitting_min: after the measurement-end limit"),
    ("no_measure_stage", ABBA, 'kind = "measure"', 'kind = "setup"', None),  # patched below: all measure stages
    ("required_gates_empty", PP, 'required = ["qualification", "rng", "budget", "rehearsal"]', "required = []",
     "plan.gates.required: an empty list of required gates is refused (fail closed)"),
    ("required_gate_unknown", PP, '"budget", "rehearsal"]', '"budget", "rehearsal", "vibes"]',
     "plan.gates.required[4]: expected one of"),
    ("qualification_required_but_nothing_carried", ABBA,
     'files = ["offload/dspark/k2_worker.py"]\nunits = ["offload/dspark/verifier.py:prepare_verifier"]', "",
     "plan.qualification: the qualification gate is required but nothing is carried"),
    ("unit_not_path_and_name", PP, '"offload/launch/windows/pp4_window.py:Remote.run"',
     '"offload/launch/windows/pp4_window.py"', "plan.qualification.units[0]:"),
    ("pp3_blocks_not_abba", ABBA, 'id = "B2"', 'id = "B3"', "plan.starts: pp3-v1 expects blocks A1:A, B1:B, B2:B, A2:A"),
    ("pp3_repeats_not_one", ABBA, "repeats = 1", "repeats = 2", "plan.measurement.repeats: pp3-v1 runs each block once"),
    ("pp3_bootstrap_too_small", ABBA, "bootstrap = 2000", "bootstrap = 10", "plan.decision.bootstrap: must be >= 100"),
    ("production_clock_cap_missing", ABBA, "production_clock_cap_mhz = 2300\n", "",
     "plan.production_clock_cap_mhz: required"),
    ("correction_not_enumerated", PP, "guard_min_repeats = 2\n",
     'guard_min_repeats = 2\nprimaries = ["pooled_rate_tps", "decode_tps"]\ncorrection = "sidak"\n',
     "plan.decision.correction: expected one of holm, bonferroni, none"),
    ("primary_not_a_metric", PP, "guard_min_repeats = 2\n",
     'guard_min_repeats = 2\nprimaries = ["pooled_rate_tps", "tokens_per_joule"]\n', "plan.decision.primaries[1]:"),
    ("primary_twice", PP, "guard_min_repeats = 2\n",
     'guard_min_repeats = 2\nprimaries = ["decode_tps", "decode_tps"]\n',
     "plan.decision.primaries[1]: 'decode_tps' appears twice"),
    ("no_primary", PP, "guard_min_repeats = 2\n", "guard_min_repeats = 2\nprimaries = []\n",
     "plan.decision.primaries: expected at least one metric"),
    ("decide_any_uncorrected", PP, "guard_min_repeats = 2\n",
     'guard_min_repeats = 2\nprimaries = ["pooled_rate_tps", "decode_tps"]\ndecide = "any"\ncorrection = "none"\n',
     'plan.decision.correction: "none" with decide = "any" over 2 primaries'),
    ("decide_not_enumerated", PP, "guard_min_repeats = 2\n", 'guard_min_repeats = 2\ndecide = "most"\n',
     "plan.decision.decide: expected one of all, any"),
    ("primaries_in_pp3", ABBA, "bootstrap = 2000", 'bootstrap = 2000\nprimaries = ["pooled_rate_tps"]',
     "plan.decision.primaries: unknown field"),
]
_FULL = {
    "no_decision_cell": (PP, "decision = true", "decision = false", "plan.cells: no decision cell"),
    "no_measure_stage": (ABBA, 'kind = "measure"', 'kind = "setup"', "plan.budget.stages: no measure stage"),
}


@pytest.mark.parametrize(("rule", "name", "old", "new", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_plan_is_refused(site: Site, tmp_path: Path, rule: str, name: str, old: str, new: str,
                                expected: str | None) -> None:
    path = _copy(tmp_path, name)
    text = path.read_text()
    if rule in _FULL:
        name, old, new, expected = _FULL[rule]
        assert old in text
        text = text.replace(old, new)
    else:
        assert old in text, f"{rule}: the example no longer contains {old!r}"
        text = text.replace(old, new, 1)
    path.write_text(text)
    size = site.size()
    result = tally("window", "register", path)
    assert result.code == 2, (rule, result.out, result.err)
    assert expected is not None
    assert result.err.startswith("tally: "), result.err
    assert expected in result.err, (rule, result.err)
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err
    assert site.size() == size, "a refused plan appended something"


def test_family_file_that_is_not_jsonl_is_refused(site: Site, tmp_path: Path) -> None:
    path = _copy(tmp_path, PP)
    family = tmp_path / "plan" / "families" / "opinions.jsonl"
    family.write_bytes(family.read_bytes() + b"{not json\n")
    digest = hashlib.sha256(family.read_bytes()).hexdigest()
    path.write_text(path.read_text().replace(load_plan(EXAMPLES / PP).family("opinions").sha256, digest))
    size = site.size()
    result = tally("window", "register", path)
    assert result.code == 2 and result.err.startswith("tally: plan.families[0].prompts: line 8: not valid JSON")
    assert site.size() == size


def test_family_prompts_come_from_the_registered_blobs(site: Site) -> None:
    from runner.plan.register import family_prompts

    assert tally("window", "register", EXAMPLES / ABBA).code == 0
    reg = registered(site.book, "pp3-abba")
    assert reg is not None
    prompts = family_prompts(site.book, reg)
    for wave in reg.plan.waves:
        for pid in wave.prompt_ids:
            assert prompts[wave.family][pid].text and prompts[wave.family][pid].kind == reg.plan.cell(wave.cell).context


def test_decode_bound_is_registered_only_when_given(tmp_path: Path) -> None:
    path = _edited(tmp_path, SIMPLE, ("wave_deadline_s = 60.0", "wave_deadline_s = 60.0\ndecode_bound_s = 30.0"))
    plan = load_plan(path)
    assert plan.measurement.decode_bound_s == 30.0 and plan.to_json()["measurement"]["decode_bound_s"] == 30.0
    assert parse_plan(json.loads(canonical(plan.to_json()))) == plan
    assert "decode_bound_s" not in load_plan(SIMPLE_PP3).to_json()["measurement"]


def test_decode_bound_longer_than_the_wave_deadline_is_refused(tmp_path: Path) -> None:
    path = _edited(tmp_path, SIMPLE, ("wave_deadline_s = 60.0", "wave_deadline_s = 60.0\ndecode_bound_s = 90.0"))
    with pytest.raises(FieldError, match=r"plan\.measurement\.wave_deadline_s: shorter than decode_bound_s"):
        load_plan(path)


def test_decode_bound_in_win2_is_refused(tmp_path: Path) -> None:
    text = (EXAMPLES / PP).read_text()
    assert "[measurement]\n" in text
    path = _edited(tmp_path, PP, ("[measurement]\n", "[measurement]\ndecode_bound_s = 30.0\n"))
    with pytest.raises(FieldError, match=r"plan\.measurement\.decode_bound_s: win2-v1 forces the length"):
        load_plan(path)


def test_priming_is_registered_only_when_given(tmp_path: Path) -> None:
    path = _edited(tmp_path, SIMPLE, ("[decision]", "[priming]\nrequests = 2\n\n[decision]"))
    plan = load_plan(path)
    assert plan.priming is not None and plan.priming.requests == 2 and plan.priming.max_tokens == 1
    assert plan.to_json()["priming"] == {"requests": 2, "max_tokens": 1, "tolerance_tokens": 0}
    assert parse_plan(json.loads(canonical(plan.to_json()))) == plan
    assert "priming" not in load_plan(SIMPLE_PP3).to_json()


def test_priming_in_win2_is_refused(tmp_path: Path) -> None:
    path = _edited(tmp_path, PP, ("[measurement]\n", "[priming]\nrequests = 1\n\n[measurement]\n"))
    with pytest.raises(FieldError, match=r"plan\.priming: prefix priming is registered for pp3-v1 blocks"):
        load_plan(path)


def test_seed003_budget_rules_are_registered_only_when_given(tmp_path: Path) -> None:
    path = _edited(tmp_path, SIMPLE, ("per_block_limit_min = 11.0", 'per_block_limit_min = 11.0\n'
                                    'stop_admitting_if_overrun = true\nblock_overrun = "truncate_experiment"'))
    budget = load_plan(path).to_json()["budget"]
    assert budget["stop_admitting_if_overrun"] is True and budget["block_overrun"] == "truncate_experiment"
    plain = load_plan(SIMPLE_PP3).to_json()["budget"]
    assert "stop_admitting_if_overrun" not in plain and "block_overrun" not in plain


def test_block_overrun_without_a_block_limit_is_refused(tmp_path: Path) -> None:
    path = _edited(tmp_path, SIMPLE, ("per_block_limit_min = 11.0", 'block_overrun = "truncate_experiment"'))
    with pytest.raises(FieldError, match=r"plan\.budget\.block_overrun: needs per_block_limit_min"):
        load_plan(path)


def test_bounded_runs_over_the_block_limit_are_refused(tmp_path: Path) -> None:
    """Six 30 s runs take 3 of the 11 minutes; six 120 s runs (12 min) cannot fit a block."""
    path = _edited(tmp_path, SIMPLE, ("wave_deadline_s = 60.0", "wave_deadline_s = 200.0\ndecode_bound_s = 120.0"))
    with pytest.raises(FieldError, match=r"plan\.measurement\.decode_bound_s: block A1's bounded decode runs alone "
                                         r"take 12 min, over the 11-minute block limit"):
        load_plan(path)


def test_tag_is_registered_only_when_given(tmp_path: Path) -> None:
    """A plan without a tag keeps its registered form and digest; the tag adds exactly one member."""
    untagged = load_plan(EXAMPLES / PP)
    assert "tag" not in untagged.to_json() and untagged.tag is None
    path = _edited(tmp_path, PP, ("\nchain = ", '\ntag = "pp4-v2/stage-1"\nchain = '))
    tagged = load_plan(path)
    assert tagged.tag == "pp4-v2/stage-1" and tagged.to_json()["tag"] == "pp4-v2/stage-1"
    assert parse_plan(json.loads(canonical(tagged.to_json()))) == tagged
    assert tagged.sha256 != untagged.sha256
    assert plan_sha256({k: v for k, v in tagged.to_json().items() if k != "tag"}) == untagged.sha256


@pytest.mark.parametrize("tag", ["v1..2", "-v1", "v1.lock", "a//b", "a/.b", "v1/", "with space", "v1.", "", "x" * 201])
def test_a_malformed_tag_is_refused(tmp_path: Path, tag: str) -> None:
    path = _edited(tmp_path, PP, ("\nchain = ", f"\ntag = {json.dumps(tag)}\nchain = "))
    with pytest.raises(FieldError, match=r"plan\.tag: .* is not a git tag name"):
        load_plan(path)


def test_primaries_are_registered_only_when_given(tmp_path: Path) -> None:
    """win2-v1's primaries, correction and decide: absent from plans that do not give them (digests unchanged)."""
    for name in PLANS:
        assert not {"primaries", "correction", "decide"} & set(load_plan(EXAMPLES / name).to_json()["decision"])
    path = _edited(tmp_path, PP, ("guard_min_repeats = 2\n", 'guard_min_repeats = 2\nprimaries = ["pooled_rate_tps", '
                                  '"decode_tps"]\ndecide = "any"\ncorrection = "holm"\n'))
    plan = load_plan(path)
    assert plan.decision_params["primaries"] == ["pooled_rate_tps", "decode_tps"]
    assert (plan.decision_params["decide"], plan.decision_params["correction"]) == ("any", "holm")
    again = parse_plan(json.loads(canonical(plan.to_json())))
    assert again == plan and again.sha256 == plan.sha256
    assert plan.sha256 != load_plan(EXAMPLES / PP).sha256
