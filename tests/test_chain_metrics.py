"""SAGE's chain metrics on crafted chains: TGC per task, SGC per chain, skill use among the tasks that
follow an earlier one, EM with and without a used skill, steps and generated tokens, and the paired
differences of two arms on the same chains (their n: tasks for TGC, chains for SGC)."""

from __future__ import annotations

import random

import pytest

from hasp.eval.chain_metrics import ChainRecord, chain_differences, chain_metrics, metric_lines
from hasp.stats import paired_difference, wilson

#: (chain, position, em, used an earlier skill, steps, completion tokens)
SEQUENTIAL = [
    ("a", 0, 0, False, 6, 300), ("a", 1, 1, True, 3, 120), ("a", 2, 1, True, 4, 150),  # two of three solved
    ("b", 0, 1, False, 5, 200), ("b", 1, 1, True, 2, 100), ("b", 2, 1, False, 5, 220),  # all solved
    ("c", 0, 1, False, 4, 180), ("c", 1, 0, False, 8, 400),  # one of two solved, no skill used
    ("d", 0, 1, False, 3, 90),  # a one-task chain: solved, nothing before it to use
]
#: the same tasks without the chain's skills: one step and 50 tokens more each
PLAIN_EM = {("a", 0): 0, ("a", 1): 0, ("a", 2): 1, ("b", 0): 1, ("b", 1): 1, ("b", 2): 0,
            ("c", 0): 0, ("c", 1): 1, ("d", 0): 1}


def _records(rows):
    return [ChainRecord(chain=c, position=p, em=float(em), used_earlier_skill=u, steps=s, completion_tokens=k)
            for c, p, em, u, s, k in rows]


def _plain():
    return [ChainRecord(chain=c, position=p, em=float(PLAIN_EM[c, p]), used_earlier_skill=False, steps=s + 1,
                        completion_tokens=k + 50) for c, p, _, _, s, k in SEQUENTIAL]


def test_tgc_is_the_share_of_tasks_solved_and_sgc_the_share_of_chains_solved_throughout():
    m = chain_metrics(_records(SEQUENTIAL))
    assert (m["tasks"], m["chains"]) == (9, 4)
    assert m["tgc"] == wilson(7, 9).to_dict()
    assert m["sgc"] == wilson(2, 4).to_dict()  # b and the one-task d; a and c each miss a task
    assert 0 < m["tgc"]["ci95"][0] < m["tgc"]["p"] < m["tgc"]["ci95"][1] < 1


def test_skill_use_counts_only_tasks_after_the_first_of_their_chain():
    m = chain_metrics(_records(SEQUENTIAL))
    assert m["skill_use"] == wilson(3, 5).to_dict()  # a1, a2, b1 of the later tasks a1, a2, b1, b2, c1
    assert m["success_when_used"] == wilson(3, 3).to_dict()
    assert m["success_when_not_used"] == wilson(1, 2).to_dict()  # b2 solved, c1 not


def test_the_first_task_of_a_chain_is_its_lowest_position_whatever_the_order_of_the_records():
    rows = list(SEQUENTIAL)
    random.Random(3).shuffle(rows)
    assert chain_metrics(_records(rows)) == chain_metrics(_records(SEQUENTIAL))
    late_start = [("x", 4, 1, True, 2, 10), ("x", 7, 1, True, 2, 10)]  # positions need not start at 0
    assert chain_metrics(_records(late_start))["skill_use"] == wilson(1, 1).to_dict()


def test_steps_and_generated_tokens_are_means_per_task():
    m = chain_metrics(_records(SEQUENTIAL))
    assert m["mean_steps"]["mean"] == round(40 / 9, 4) and m["mean_steps"]["n"] == 9
    assert m["mean_completion_tokens"]["mean"] == round(1760 / 9, 4)
    lo, hi = m["mean_completion_tokens"]["ci95"]
    assert 90 <= lo < 1760 / 9 < hi <= 400


def test_the_plain_arm_uses_no_skill_and_reports_every_metric():
    m = chain_metrics(_plain())
    assert m["tgc"] == wilson(5, 9).to_dict() and m["sgc"] == wilson(1, 4).to_dict()  # only d solved throughout
    assert m["skill_use"] == wilson(0, 5).to_dict() and m["success_when_used"]["n"] == 0
    assert m["success_when_not_used"] == wilson(3, 5).to_dict()
    assert m["mean_steps"]["mean"] == round(49 / 9, 4)


def test_paired_differences_are_per_task_for_tgc_and_per_chain_for_sgc():
    d = chain_differences(_plain(), _records(SEQUENTIAL))
    assert d["tgc"]["n"] == 9 and d["tgc"]["mean"] == round(2 / 9, 4)  # +a1 +b2 +c0 -c1
    assert d["sgc"]["n"] == 4 and d["sgc"]["mean"] == 0.25  # b becomes fully solved
    assert d["sgc"] == paired_difference([0, 0, 0, 1], [0, 1, 0, 1]).to_dict()
    assert d["mean_steps"] == {"mean": -1.0, "n": 9, "ci95": [-1.0, -1.0]}
    assert d["mean_completion_tokens"] == {"mean": -50.0, "n": 9, "ci95": [-50.0, -50.0]}


def test_paired_differences_keep_only_what_both_arms_ran():
    plain = [r for r in _plain() if (r.chain, r.position) != ("c", 1)]
    d = chain_differences(plain, _records(SEQUENTIAL))
    assert d["tgc"]["n"] == 8 and d["mean_steps"]["n"] == 8
    assert d["sgc"]["n"] == 3  # chain c differs between the arms, so it is not compared as a chain
    assert chain_differences([], _records(SEQUENTIAL))["tgc"]["n"] == 0


def test_metric_lines_show_every_metric_for_both_arms_and_the_difference():
    seq, plain = chain_metrics(_records(SEQUENTIAL)), chain_metrics(_plain())
    lines = metric_lines({"sequential": seq, "plain": plain}, chain_differences(_plain(), _records(SEQUENTIAL)),
                         "sequential - plain")
    text = "\n".join(lines)
    assert lines[0].startswith("TGC") and "sequential 0.778" in lines[0] and "(7/9)" in lines[0]
    assert "(5/9)" in lines[0]
    assert lines[1].startswith("SGC") and "(2/4)" in lines[1] and "(1/4)" in lines[1]
    assert "skill use" in lines[2] and "(3/5)" in lines[2] and "(0/5)" in lines[2]
    assert lines[3].endswith("plain n/a (0/0)")  # the plain arm never used a skill: no rate to show
    assert "steps per task: sequential 4.44" in text and "generated tokens per task: sequential 195.6" in text
    assert lines[-1].startswith("sequential - plain: TGC +0.222") and "SGC +0.250" in lines[-1]
    assert "steps -1.00" in lines[-1] and "tokens -50.0" in lines[-1]
    assert len(metric_lines({"sequential": seq})) == 7  # no difference line without a second arm


@pytest.mark.parametrize("em", [0.0, 1.0])
def test_a_single_task_chain_is_solved_exactly_when_its_task_is(em):
    m = chain_metrics(_records([("z", 0, em, False, 1, 5)]))
    assert m["sgc"]["k"] == m["tgc"]["k"] == em and m["skill_use"]["n"] == 0
