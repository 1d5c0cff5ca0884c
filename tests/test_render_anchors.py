"""``anchors.md`` / ``anchors.json`` (``verify.render.anchors``): the quick page, written once."""

from __future__ import annotations

import json

import pytest

from verify import anchors as rules
from verify.render import anchors


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    stage = tmp_path_factory.mktemp("anchors")
    doc = anchors.write(stage, quick=True)
    return stage, doc


def test_quick_writes_both_files(written):
    stage, doc = written
    assert (stage / "anchors.md").is_file()
    on_disk = json.loads((stage / "anchors.json").read_text())
    assert on_disk == json.loads(json.dumps(doc))
    assert on_disk["quick"] is True and on_disk["dtypes"] == ["bfloat16"]
    assert [c["id"] for c in on_disk["configs"]] == list(anchors.QUICK_CONFIGS)
    assert "`attn-theory report`" in (stage / "anchors.md").read_text()


def test_summary_has_every_rule_and_ours(written):
    _, doc = written
    summary = doc["summary"]
    assert set(rules.RULES) | {anchors.OURS} <= set(summary)
    for s in summary.values():
        assert s["correct_runs"] == 6  # 3 correct kernels x 2 configurations
        assert s["faulty_runs"] == 7  # mask-shifted only on the causal one
        assert 0 <= s["false_alarms"] <= s["correct_runs"]
        assert 0 <= s["misses"] <= s["faulty_runs"]
    for case in doc["results"]:
        assert set(case["thresholds"]) == set(summary)
        for run in case["runs"]:
            assert set(run["rules"]) == set(summary)


def test_ours_has_no_false_alarm_and_catches_gross_faults(written):
    _, doc = written
    ours = doc["summary"][anchors.OURS]
    assert ours["false_alarms"] == 0, ours["false_alarm_cases"]
    assert ours["by_fault"]["scale-missing"]["caught"] == ours["by_fault"]["scale-missing"]["runs"]
    assert ours["by_fault"]["mask-shifted"]["caught"] == 1
    # scores rounded to bf16 is an eager step, inside the envelope (the default); the fused
    # kernel's own model catches it
    declared = doc["summary"][anchors.OURS_DECLARED]
    assert declared["false_alarms"] == 0, declared["false_alarm_cases"]
    assert declared["by_fault"]["scores-rounded"]["caught"] >= 1


def test_page_names_each_cited_commit(written):
    stage, _ = written
    page = (stage / "anchors.md").read_text()
    for name, rule in rules.RULES.items():
        src = rule["source"]
        assert src["commit"] in page, name
        assert src["repo"] in page and src["path"] in page, name


def test_page_is_deterministic(written, tmp_path):
    stage, doc = written
    assert anchors.render(doc) == (stage / "anchors.md").read_text()
    again = anchors.render(json.loads((stage / "anchors.json").read_text()))
    assert again == (stage / "anchors.md").read_text()
