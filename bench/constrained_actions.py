"""The PF agent with free-text steps and with the action grammar (``llm.constrained: off`` vs ``actions``)
on the llama.cpp engine: parse errors per step, and exact match paired per question.

Why: the embedded 135M policy writes a step the parser has to refuse 12-33 % of the time; every refused
step is a step of the budget spent on nothing. The grammar makes such a step impossible, but it also
changes what the model may write (a bounded thought line, no brackets or colons in it), so whether
answers get better or worse is measured, on the same questions, with the same greedy server: both
settings run one after the other through one client, the constraint being a per-request field.

    python bench/constrained_actions.py --questions 40
    python bench/constrained_actions.py --questions 30 --model gemma3-270m --chat-format transcript

With ``--model``/``--chat-format`` (an embedded model and a chat format, ``hasp model list``) the section
is named for them, so the chat format of a base model is chosen from one such section per format.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.config import Params, load_params  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Constrained agent steps on llama.cpp")
SETTINGS = ("off", "actions")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_setting(p: Params, policy: Any, task: Any, items: list[Any], library: Path, setting: str) -> dict[str, Any]:
    """Greedy PF-agent episodes on ``items`` with ``llm.constrained: setting``; per-step and per-question counts."""
    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec, run_episodes
    from hasp.pf.library import load_library

    lib = load_library(library, "search", sandbox=p.sandbox)
    before = policy.usage
    try:
        spec = episode_spec(p.model_copy(update={"llm": p.llm.model_copy(update={"constrained": setting})}),
                            SearchDomain(data_dir=task.data_dir), "pf")
        t0 = time.perf_counter()
        trajs = [r.traj for r in run_episodes(spec, items, policy=policy, library=lib, opened=task.retriever,
                                              desc=f"constrained={setting}")]
        wall = time.perf_counter() - t0
    finally:
        lib.close()
    after = policy.usage
    steps = [s for t in trajs for s in t.steps]
    return {"trajs": {t.qid: t for t in trajs}, "wall_s": wall, "steps": len(steps),
            "parse_errors": sum(1 for s in steps if s.parse_error),
            "episodes_with_error": sum(1 for t in trajs if any(s.parse_error for s in t.steps)),
            "answered": sum(1 for t in trajs if t.prediction),
            "at_budget": sum(1 for t in trajs if t.terminated == "budget_final"),
            "failed": sum(1 for t in trajs if t.terminated == "error"),
            "constrained": after.constrained - before.constrained,
            "fallbacks": after.constraint_fallbacks - before.constraint_fallbacks,
            "completion_tokens": after.completion_tokens - before.completion_tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=40, help="test questions of the generated benchmark")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--library", type=Path, default=ROOT / "hasp" / "skills" / "search")
    ap.add_argument("--hops", default="1:1", help="data.hop_weights as hop:weight,... (default: one-hop only)")
    ap.add_argument("--dialect", choices=("llamacpp", "vllm", "openai"), default=None,
                    help="request shape of the constraint (default: the client's, from llm.backend); for a "
                         "server at llm.base_url that the backend does not describe")
    ap.add_argument("--port", type=int, default=0, help="loopback port of the server (0: a free one, so a server "
                    "someone else runs on llm.port is neither reused nor stopped)")
    ap.add_argument("--model", default=None, help="llm.embedded: the embedded policy model (hasp model list)")
    ap.add_argument("--chat-format", default=None, help="llm.chat_format (default: the catalogue's for the model)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    if a.model or a.chat_format:
        REPORT.section += f", {a.model or 'default model'}, chat format {a.chat_format or 'default'}"
    from hasp.domains.search.prepare import prepare_data
    from hasp.domains.search.task import SearchTask
    from hasp.llm.client import LLMClient
    from hasp.llm.endpoints import policy_client
    from hasp.stats import paired_difference, rate

    hops = {int(h): float(w) for h, w in (x.split(":") for x in a.hops.split(","))}
    overrides: dict[str, Any] = {"data.hop_weights": hops, "data.n_questions": max(40, 3 * a.questions)}
    if a.model:
        overrides["llm.embedded"] = a.model
    if a.chat_format:
        overrides["llm.chat_format"] = a.chat_format
    p = load_params(a.params, overrides)
    if p.llm.backend != "llamacpp" and a.dialect is None:
        raise SystemExit(f"error: llm.backend is {p.llm.backend}; this measures the llama.cpp engine "
                         "(set llm.backend: llamacpp, or --dialect for a server at llm.base_url)")
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="hasp-constrained-") as tmp:
        prepare_data(p, Path(tmp) / "data")
        task = SearchTask.load(Path(tmp) / "data")
        items = task.questions("test")[:a.questions]
        with policy_client(p.llm, max_tokens=p.agent.max_tokens, port=a.port or _free_port()) as served:
            policy = served if a.dialect is None else LLMClient(replace(served.endpoint(), dialect=a.dialect))
            for setting in SETTINGS:
                rows[setting] = run_setting(p, policy, task, items, a.library, setting)
            dialect = policy.dialect
    off, on = rows["off"], rows["actions"]
    qids = [it.id for it in items]
    em = {s: [rows[s]["trajs"][q].em for q in qids] for s in SETTINGS}
    REPORT.line(f"{len(items)} greedy PF-agent episodes per setting on generated test questions (hops {a.hops}), "
                f"llama.cpp ({p.llm.backend}, dialect {dialect}), agent.max_steps {p.agent.max_steps}, "
                f"agent.max_tokens {p.agent.max_tokens}, concurrency {p.llm.max_concurrency}, "
                f"model {p.llm.embedded}, chat format {p.llm.chat_format or 'the catalogue default'}")
    REPORT.line("answered: episodes with a prediction; at budget: of them, answered in the answer-only turn "
                "after agent.max_steps")
    REPORT.line(f"{'llm.constrained':<16}{'steps':>7}{'parse err':>10}{'per step':>10}{'ep w/ err':>10}"
                f"{'answered':>10}{'at budget':>11}{'EM':>30}{'constrained req':>17}{'fallbacks':>11}{'wall s':>8}")
    for s in SETTINGS:
        r = rows[s]
        REPORT.line(f"{s:<16}{r['steps']:>7}{r['parse_errors']:>10}{r['parse_errors'] / max(1, r['steps']):>10.3f}"
                    f"{r['episodes_with_error']:>10}{r['answered']:>10}{r['at_budget']:>11}{str(rate(em[s])):>30}"
                    f"{r['constrained']:>17}{r['fallbacks']:>11}{r['wall_s']:>8.0f}")
    diff = paired_difference(em["off"], em["actions"])
    pairs = list(zip(em["off"], em["actions"]))
    REPORT.line(f"paired EM, actions - off: {diff}; questions gained {sum(y > x for x, y in pairs)}, "
                f"lost {sum(y < x for x, y in pairs)}")
    if off["failed"] or on["failed"]:
        REPORT.line(f"episodes failed (endpoint errors, not scored): off {off['failed']}, actions {on['failed']}")
    REPORT.line(f"parse errors per step: off {off['parse_errors'] / max(1, off['steps']):.3f} -> actions "
                f"{on['parse_errors'] / max(1, on['steps']):.3f}; completion tokens off {off['completion_tokens']}, "
                f"actions {on['completion_tokens']}")
    for s in SETTINGS:
        shown = [f"{t.prediction!r} (gold {t.answers[0]!r})" for t in rows[s]["trajs"].values()
                 if t.terminated == "budget_final"][:6]
        if shown:
            REPORT.line(f"answers of the answer-only turn, {s}: " + "; ".join(shown))
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
