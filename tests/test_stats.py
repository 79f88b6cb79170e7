"""The intervals every reported rate carries: Wilson for proportions, bootstrap for means and paired differences."""

from __future__ import annotations

import json

import pytest

from hasp.stats import bootstrap_mean, paired_difference, rate, wilson


def test_wilson_is_sensible_at_the_edges_and_matches_the_textbook_value():
    zero, full = wilson(0, 8), wilson(8, 8)
    assert zero.p == 0 and zero.lo == 0 and 0.3 < zero.hi < 0.33  # 0/8 still allows ~32 %
    assert full.hi == 1 and 0.67 < full.lo < 0.7
    mid = wilson(2, 8)
    assert (round(mid.lo, 3), round(mid.hi, 3)) == (0.071, 0.591)
    assert rate([1.0, 0.0, 0.0, 1.0]).k == 2 and wilson(0, 0).n == 0


def test_bootstrap_mean_is_reproducible_and_brackets_the_mean():
    vals = [1, 0, 0, 1, 1, 0, 0, 0]
    a, b = bootstrap_mean(vals), bootstrap_mean(vals)
    assert a == b and a.mean == pytest.approx(0.375) and a.lo < a.mean < a.hi and a.n == 8
    assert bootstrap_mean([1, 1, 1]).to_dict() == {"mean": 1.0, "n": 3, "ci95": [1.0, 1.0]}
    assert bootstrap_mean([]).n == 0


def test_paired_difference_is_the_bootstrap_of_per_question_differences():
    before, after = [0, 0, 1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]
    d = paired_difference(before, after)
    assert d == bootstrap_mean([1, 1, 0, 0, 0, 0, 0, 0]) and d.mean == pytest.approx(0.25) and d.lo >= 0
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([0], [0, 1])


def test_paired_gain_over_common_questions_per_hop_count(tmp_path):
    """The gain is after − before over the questions both cells scored (an errored episode is left out
    of both sides), overall and per hop count, with an interval around the mean."""
    import json

    from hasp.eval.paired import em_by_qid, gains_over, paired_gain

    rows = {"base": [("a", 0, "final"), ("b", 0, "final"), ("c", 1, "final"), ("d", 0, "error")],
            "trained": [("a", 1, "final"), ("b", 1, "final"), ("c", 1, "final"), ("d", 1, "final"),
                        ("e", 1, "final")]}
    for label, rs in rows.items():
        d = tmp_path / label / "generated"
        d.mkdir(parents=True)
        (d / f"{label}.jsonl").write_text("".join(json.dumps({"qid": q, "em": em, "terminated": t}) + "\n"
                                                  for q, em, t in rs))
    assert em_by_qid(tmp_path / "base" / "generated" / "base.jsonl") == {"a": 0.0, "b": 0.0, "c": 1.0}
    hops = {"a": 1, "b": 2, "c": 2, "d": 1, "e": 1}
    g = gains_over(tmp_path / "base", ["base"], tmp_path / "trained", ["trained"], hops)["trained - base"]
    assert g["n"] == 3 and g["mean"] == pytest.approx(2 / 3, abs=1e-4)
    assert 0.0 <= g["ci95"][0] <= g["mean"] <= g["ci95"][1] <= 1.0
    assert g["by_hops"]["1"] == {"mean": 1.0, "n": 1, "ci95": [1.0, 1.0]}
    assert g["by_hops"]["2"]["n"] == 2 and g["by_hops"]["2"]["mean"] == 0.5
    # no gain on the same answers: the interval is a point at zero
    same = paired_gain({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 0.0})
    assert same["mean"] == 0.0 and same["ci95"] == [0.0, 0.0] and same["by_hops"] == {}
    # a missing cell gives no comparison rather than a gain over nothing
    assert gains_over(tmp_path / "base", ["base"], tmp_path / "trained", ["absent"]) == {}


def test_gains_over_seeds_average_each_question_over_the_repeats(tmp_path):
    """Two seeds of one preset: per question the trained EM is averaged over seeds (on questions every
    seed scored), then compared with the untrained arm; a preset trained in one grid only is not pooled."""
    import json

    from hasp.eval.paired import gains_over_seeds

    def cell(path, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"qid": q, "em": em, "terminated": "final"}) + "\n" for q, em in rows))

    grids, dirs = [], []
    for seed, trained in enumerate(([("a", 1), ("b", 1), ("c", 0)], [("a", 1), ("b", 0), ("c", 0), ("d", 1)])):
        d = tmp_path / f"seed{seed}"
        cell(d / "eval_untrained" / "generated" / "untrained_pf.jsonl", [("a", 0), ("b", 0), ("c", 0), ("d", 0)])
        cell(d / "E2_cpu" / "eval" / "generated" / "trained_pf.jsonl", trained)
        experiments = {"E2_cpu": {"eval": {"trained_pf": {}}}}
        if seed == 0:
            cell(d / "E1_cpu" / "eval" / "generated" / "trained_pf.jsonl", [("a", 1)])
            experiments["E1_cpu"] = {"eval": {"trained_pf": {}}}
        grids.append({"untrained": {"untrained_pf": {}}, "experiments": experiments})
        dirs.append(d)
    pooled = gains_over_seeds(dirs, grids, {"a": 1, "b": 1, "c": 2})
    g = pooled["E2_cpu"]["trained_pf - untrained_pf"]
    assert set(pooled) == {"E2_cpu"} and g["seeds"] == 2
    assert g["n"] == 3 and g["mean"] == pytest.approx((1.0 + 0.5 + 0.0) / 3, abs=1e-4)  # d: one seed only
    assert g["by_hops"]["2"] == {"mean": 0.0, "n": 1, "ci95": [0.0, 0.0]}


def _cell(path, ems):
    """A trajectory file of questions a, b, c, ... with these EMs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"qid": q, "em": em, "terminated": "final"}) + "\n"
                            for q, em in zip("abcd", ems)))


def test_a_closed_loop_gain_splits_into_training_and_the_evolved_library(tmp_path):
    """A V2 preset's trained policy with the starting library is compared with the untrained arms
    (training's share) and is the base of the evolved library's share, in one grid and over seeds."""
    from hasp.eval.paired import add_grid_gains, gains_over_seeds

    grids, dirs = [], []
    for seed, (final, start) in enumerate((([1, 1, 1, 0], [1, 0, 0, 0]), ([1, 1, 0, 0], [0, 0, 0, 0]))):
        d = tmp_path / f"seed{seed}"
        _cell(d / "eval_untrained" / "generated" / "untrained_pf.jsonl", [0, 0, 0, 0])
        _cell(d / "E5_cpu" / "eval" / "generated" / "trained_pf.jsonl", final)
        _cell(d / "E5_cpu" / "eval" / "start_library" / "generated" / "trained_pf_start_library.jsonl", start)
        grid = {"untrained": {"untrained_pf": {}},
                "experiments": {"E5_cpu": {"eval": {"trained_pf": {}, "trained_pf_start_library": {}}}}}
        add_grid_gains(d, grid)
        gains = grid["experiments"]["E5_cpu"]["gains"]
        assert set(gains) == {"trained_pf - untrained_pf", "trained_pf_start_library - untrained_pf",
                              "trained_pf - trained_pf_start_library"}
        assert gains["trained_pf - trained_pf_start_library"]["mean"] == pytest.approx((sum(final) - sum(start)) / 4)
        grids.append(grid)
        dirs.append(d)
    pooled = gains_over_seeds(dirs, grids)["E5_cpu"]["trained_pf - trained_pf_start_library"]
    assert pooled["seeds"] == 2 and pooled["n"] == 4
    # per question, the mean over seeds: final (1, 1, 0.5, 0), start (0.5, 0, 0, 0)
    assert pooled["mean"] == pytest.approx((1 + 1 + 0.5 - 0.5) / 4)


def test_a_preset_started_from_another_checkpoint_is_compared_with_that_preset(tmp_path):
    """GRPO after E2: each of its arms against E2's same arm (what the later recipe adds), in one grid and
    over seeds; a preset without a start, or whose start did not run here, gets no such row."""
    from hasp.eval.paired import add_grid_gains, gains_over_seeds

    grids, dirs = [], []
    for seed, (e2, grpo) in enumerate((([1, 0, 0, 0], [1, 1, 1, 0]), ([0, 0, 0, 0], [1, 0, 0, 0]))):
        d = tmp_path / f"seed{seed}"
        _cell(d / "eval_untrained" / "generated" / "untrained_pf.jsonl", [0, 0, 0, 0])
        _cell(d / "E2_cpu" / "eval" / "generated" / "trained_pf.jsonl", e2)
        _cell(d / "GRPO_cpu" / "eval" / "generated" / "trained_pf.jsonl", grpo)
        _cell(d / "SAGE_cpu" / "eval" / "generated" / "trained_pf.jsonl", grpo)
        grid = {"untrained": {"untrained_pf": {}},
                "experiments": {"E2_cpu": {"eval": {"trained_pf": {}}, "preset": {}},
                                "GRPO_cpu": {"eval": {"trained_pf": {}}, "preset": {"start": "E2_cpu"}},
                                "SAGE_cpu": {"eval": {"trained_pf": {}}, "preset": {"start": "E9_absent"}}}}
        add_grid_gains(d, grid)
        ex = grid["experiments"]
        assert set(ex["GRPO_cpu"]["gains"]) == {"trained_pf - untrained_pf", "trained_pf - E2_cpu/trained_pf"}
        assert ex["GRPO_cpu"]["gains"]["trained_pf - E2_cpu/trained_pf"]["mean"] == pytest.approx(
            (sum(grpo) - sum(e2)) / 4)
        assert set(ex["E2_cpu"]["gains"]) == set(ex["SAGE_cpu"]["gains"]) == {"trained_pf - untrained_pf"}
        grids.append(grid)
        dirs.append(d)
    pooled = gains_over_seeds(dirs, grids)["GRPO_cpu"]["trained_pf - E2_cpu/trained_pf"]
    # per question, the mean over seeds: GRPO (1, 0.5, 0.5, 0), E2 (0.5, 0, 0, 0)
    assert pooled["seeds"] == 2 and pooled["mean"] == pytest.approx((0.5 + 0.5 + 0.5) / 4)
