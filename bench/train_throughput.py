"""Training tokens/s and peak RSS per recipe, and sampling throughput one at a time vs concurrent.

Why: a post-training run is a sum of these numbers. Each recipe (sft, rs, opd, dpo, grpo, sage) trains on the same
fixed input in a fresh process, so its peak RSS is its own (load, train and merge); tokens/s counts the
tokens that went through the model (prompt + target, no padding: TRL's ``num_tokens``) over the
trainer's wall time. For rs and opd this is the training step on a fixed pool of sampled trajectories;
their sampling is measured apart: episodes/s of the PF agent on the same training questions against
the same served checkpoint, one episode at a time and ``llm.max_concurrency`` at a time.

The fixed input: the generated benchmark (``data:`` of the params) and one pool of trajectories of the
real PF agent with the seed library, driven by a scripted policy that answers at once, so the seed PFs
correct it (SEARCH, then READ) before it gives the gold answer. That yields PF-corrected steps (SFT and
OPD rows), preference pairs (DPO) and correct trajectories (RS keeps them), identical on every run.
GRPO and SAGE need groups whose outcomes differ: their pool is the same trajectories with the first of
each question's k samples kept correct and the others marked failed (GRPO), and, for SAGE, pairs of
questions made into chains whose first rollout carries a skill to a solved task 2 (no proposal turn:
no student ran). One GRPO/SAGE round is one optimizer step over all its rows, so ``--steps`` does not
apply to them. SAGE's sampling (task 1, the policy's own proposal, task 2) is measured apart.

    python bench/train_throughput.py [--model embedded|tiny|FOLDER] [--steps 10] [--recipes sft,rs,opd,dpo,grpo,sage]
        [--sample-questions 4] [--endpoint URL --endpoint-model NAME] [--no-sampling] [--no-write]

``--model tiny`` builds a tiny random Llama (the tests' model) for a smoke run; its figures mean nothing.
``--endpoint`` samples against a running OpenAI-compatible server instead of serving the model folder.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hasp.atomic import read_json, read_jsonl, write_json, write_jsonl
from hasp.config import Params, TrainParams, load_params
from results import Report  # noqa: E402 - bench/ is the script directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the reply double, the tiny model
from doubles import ReplyDouble  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ("sft", "rs", "opd", "dpo", "grpo", "sage")
REPORT = Report("Training throughput")


# -- the fixed input -----------------------------------------------------------------------------

class GoldPoolPolicyDouble:
    """Answers the gold answer at every step: the seed PFs rewrite the early answers into SEARCH and
    READ, so the pool holds PF corrections and ends correct. Deterministic, so every run trains on
    the same rows."""

    def __init__(self, questions: list[Any]) -> None:
        self.gold = {q.question: q.answers[0] for q in questions}

    def chat(self, messages: list[dict[str, str]], **kw: Any) -> ReplyDouble:
        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        answer = next(a for q, a in self.gold.items() if q in user)
        return ReplyDouble(f"Thought: I can answer.\nAction: FINAL[{answer}]", 0, 0)


def search_task(data: Path) -> Any:
    """The benchmark's task: search over the prepared data folder (its split files)."""
    from hasp.episode.domains import SearchDomain
    from hasp.evolve.epoch_task import EpochTask

    return EpochTask(SearchDomain(data_dir=data))


def build_pool(p: Params, work: Path, library: Path) -> dict[str, Any]:
    """Data folder, trajectory pool and the sft/dpo rows files under ``work``; returns their counts."""
    from hasp.domains.search.prepare import prepare_data
    from hasp.train.data import build_dpo_rows, build_sft_rows, score_all
    from hasp.train.sampler import PFRolloutSampler, training_questions

    data = work / "data"
    prepare_data(p, data)
    questions = training_questions(search_task(data))
    policy = GoldPoolPolicyDouble(questions)
    sampler = PFRolloutSampler(p, search_task(data).domain, library, rollout=p.train.rollout,
                               policy_for=lambda _: contextlib.nullcontext(policy))
    asked = [q for q in questions for _ in range(p.train.rollout.k)]
    trajs = sampler(asked, work / "pool-policy")
    write_jsonl([t.to_dict() for t in trajs], work / "pool.jsonl")
    floor = p.signals.reward_floor
    scored = score_all(trajs)
    sft = write_jsonl(build_sft_rows(scored, reward_floor=floor), work / "sft.jsonl")
    dpo = write_jsonl(build_dpo_rows(scored, reward_floor=floor), work / "dpo.jsonl")
    return {"questions": len(questions), "trajectories": len(trajs), "sft_rows": len(read_jsonl(sft)),
            "dpo_rows": len(read_jsonl(dpo))}


def tiny_model(folder: Path) -> Path:
    """A tiny random Llama, as the tests build it: the embedded model's tokenizer when its folder is
    cached (nothing of its weights is read), else a small byte-level BPE with a chatml template."""
    from transformers import AutoTokenizer

    from hasp.llm.model_prep import MODEL_SLUG, default_cache_dir
    from tiny_model import write_tiny_llama

    real = default_cache_dir() / "models" / MODEL_SLUG
    tok = AutoTokenizer.from_pretrained(real) if (real / "tokenizer.json").is_file() else _bpe_tokenizer()
    return write_tiny_llama(folder, tok)


def _bpe_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from hasp.agent.loop import load_prompts

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator([load_prompts()["system"], "Thought: Action: SEARCH READ FINAL Observation:"] * 20,
                           trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"],
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                  pad_token="<|im_end|>", unk_token="<unk>")
    tok.chat_template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                         "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    return tok


# -- one recipe, in its own process ----------------------------------------------------------------

def bench_train(p: Params, recipe: str, steps: int) -> TrainParams:
    """The params' train section with the recipe, a fixed step count and a log per step (so the last
    log holds the token count of the whole run)."""
    raw = {**p.train.model_dump(), "recipe": recipe, "preset": None, "max_steps": steps, "logging_steps": 1}
    for pg in ("grpo", "sage"):  # one round: one update over the fixed pool
        raw[pg] = {**raw[pg], "iterations": 1, "questions_per_round": None}
    return TrainParams.model_validate(raw)


def policy_gradient_pool(pool: list[Any], recipe: str, questions: list[Any]) -> tuple[list[Any], list[Any]]:
    """The fixed pool with outcomes that differ inside each group (see the module docstring), and what
    the recipe samples on (questions, or SAGE chains)."""
    from copy import deepcopy

    from hasp.train.chains import SAGE_KEY, ChainGrowth, ChainTask, training_chains
    from hasp.train.rewards import skill_integrated_rewards

    by_q: dict[str, list[Any]] = {}
    for t in deepcopy(pool):
        by_q.setdefault(t.qid, []).append(t)
    for group in by_q.values():
        for j, t in enumerate(group):
            t.em = 1.0 if j == 0 else 0.0
    if recipe == "grpo":
        return [t for g in by_q.values() for t in g], questions
    chains = training_chains(questions, 0)
    out = []
    for c in chains:
        a, b = (by_q.get(str(it.id), []) for it in c.items)
        for j, (t1, t2) in enumerate(zip(a, b)):
            used = j == 0
            r1, r2 = skill_integrated_rewards([t1.em, t2.em], [(), (0,) if used else ()])
            made = ChainGrowth(admitted=["bench_skill"] if used else [])
            for task in (ChainTask(0, t1, growth=made, reward=r1),
                         ChainTask(1, t2, used_positions=[0] if used else [],
                                   used_skills=["bench_skill"] if used else [], reward=r2)):
                task.traj.harness.postprocess[SAGE_KEY] = task.record(c.id)
            out += [t1, t2]
    return out, chains


def run_worker(recipe: str, params: Path, model: Path, work: Path, steps: int) -> dict[str, Any]:
    """Train ``recipe`` on the fixed input through ``run_recipe`` (what ``hasp train`` calls); rs and
    opd get the fixed pool as their sampler. Returns the figures and writes them to ``<recipe>.json``."""
    from hasp.records import Trajectory
    from hasp.train.run import run_recipe
    from hasp.train.sampler import training_questions

    t0 = time.perf_counter()
    p = load_params(params)
    pool = [Trajectory.from_dict(d) for d in read_jsonl(work / "pool.jsonl")]
    rows = work / ("dpo.jsonl" if recipe == "dpo" else "sft.jsonl")
    questions: list[Any] = training_questions(search_task(work / "data"))
    if recipe in ("grpo", "sage"):
        pool, questions = policy_gradient_pool(pool, recipe, questions)
    summary = run_recipe(p, model=model, out_dir=work / recipe, train=bench_train(p, recipe, steps), rows=rows,
                         questions=questions, sample=lambda asked, _: list(pool))
    last = read_json(Path(summary.train_summaries[-1]))
    logged = [h for h in last["history"] if "num_tokens" in h]
    m = last["metrics"]
    out = {"recipe": recipe, "rows": m.get("n_rows_used"), "steps": m.get("global_step"),
           "tokens": int(logged[-1]["num_tokens"]) if logged else None, "train_s": m.get("train_wall_s"),
           "process_s": time.perf_counter() - t0,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "torch_threads": m.get("torch_threads")}
    out["tokens_per_s"] = out["tokens"] / out["train_s"] if out["tokens"] and out["train_s"] else None
    write_json(out, work / f"{recipe}.json")
    return out


def train_figures(recipe: str, params: Path, model: Path, work: Path, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", recipe, "--params", str(params),
           "--model", str(model), "--work", str(work), "--steps", str(steps)]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{recipe}: worker failed with exit code {done.returncode} ({' '.join(cmd)})")
    return read_json(work / f"{recipe}.json")


# -- sampling: one at a time vs concurrent -----------------------------------------------------------

@contextlib.contextmanager
def sampling_policy(p: Params, model: Path, endpoint: str | None, endpoint_model: str | None) -> Any:
    """One client for both runs: a running endpoint, or the model folder served as the RS sampler
    serves a checkpoint (``llm.backend``, the rollout's temperature and top-p)."""
    from hasp.llm.endpoints import policy_client
    from hasp.train.sampler import served_policy

    rollout = p.train.rollout
    if endpoint:
        llm = p.llm.model_copy(update={"base_url": endpoint, "model": endpoint_model or p.llm.model,
                                       "backend": "transformers"})
        with policy_client(llm, max_tokens=p.agent.max_tokens, temperature=rollout.temperature,
                           top_p=rollout.top_p) as client:
            yield client
    else:
        with served_policy(p, rollout)(model) as client:
            yield client


def sample_figures(p: Params, work: Path, library: Path, model: Path, n_questions: int,
                   endpoint: str | None, endpoint_model: str | None) -> list[dict[str, Any]]:
    from hasp.train.sampler import PFRolloutSampler, training_questions

    questions = training_questions(search_task(work / "data"))[:n_questions]
    asked = [q for q in questions for _ in range(p.train.rollout.k)]
    out = []
    with sampling_policy(p, model, endpoint, endpoint_model) as client:
        for conc in (1, p.llm.max_concurrency):
            pc = p.model_copy(update={"llm": p.llm.model_copy(update={"max_concurrency": conc})})
            sampler = PFRolloutSampler(pc, search_task(work / "data").domain, library, rollout=p.train.rollout,
                                       policy_for=lambda _: contextlib.nullcontext(client))
            t0 = time.perf_counter()
            trajs = sampler(asked, model)
            wall = time.perf_counter() - t0
            out.append({"concurrency": conc, "episodes": len(trajs), "wall_s": wall,
                        "episodes_per_s": len(trajs) / wall,
                        "steps": sum(len(t.steps) for t in trajs),
                        "completion_tokens": sum(t.completion_tokens for t in trajs),
                        "em": sum(t.em for t in trajs) / len(trajs)})
    return out


def sage_sample_figures(p: Params, work: Path, library: Path, model: Path, n_chains: int,
                        endpoint: str | None, endpoint_model: str | None) -> dict[str, Any]:
    """SAGE's sequential chain rollouts (task 1, the policy's own proposal, task 2) at the default
    concurrency, one rollout per chain."""
    from hasp.evolve.chain_skill import chain_grower
    from hasp.train.chains import training_chains
    from hasp.train.sage_sampler import SageSampler
    from hasp.train.sampler import training_questions

    chains = training_chains(training_questions(search_task(work / "data")), p.data.seed)[:n_chains]
    with sampling_policy(p, model, endpoint, endpoint_model) as client:
        sampler = SageSampler(p, search_task(work / "data").domain, library, train=p.train, work_dir=work / "sage-chains",
                              grower=chain_grower(p, gold=True),
                              policy_for=lambda _: contextlib.nullcontext(client))
        t0 = time.perf_counter()
        trajs = sampler(chains, model)
        wall = time.perf_counter() - t0
    recs = [t.harness.postprocess.get("sage", {}) for t in trajs]
    return {"chains": len(chains), "episodes": len(trajs), "wall_s": wall, "episodes_per_s": len(trajs) / wall,
            "proposals": sum(bool(r.get("proposal")) for r in recs if r.get("position") == 0),
            "admitted": sum(bool(r.get("created")) for r in recs if r.get("position") == 0),
            "completion_tokens": sum(t.completion_tokens for t in trajs)}


# -- the run -----------------------------------------------------------------------------------------

def resolve(model: str, work: Path) -> Path:
    from hasp.train.run import resolve_model

    if model == "tiny":
        return tiny_model(work / "tiny-model")
    return resolve_model(None if model == "embedded" else model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded", help="embedded (default), tiny (a smoke run), or a model folder")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per recipe (train.max_steps)")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated subset of " + ",".join(RECIPES))
    ap.add_argument("--sage-chains", type=int, default=4, help="chains of SAGE's sampling line (0: none)")
    ap.add_argument("--section", default=REPORT.section, help="results section to write (a run of some recipes "
                    "beside the section of all of them)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="params file (train, llm, data)")
    ap.add_argument("--library", type=Path, default=ROOT / "hasp" / "skills" / "search", help="skill library of the agent")
    ap.add_argument("--sample-questions", type=int, default=4, help="training questions sampled (x train.rollout.k)")
    ap.add_argument("--endpoint", help="sample against this OpenAI-compatible base URL instead of serving --model")
    ap.add_argument("--endpoint-model", help="model name to send to --endpoint (default llm.model)")
    ap.add_argument("--no-sampling", action="store_true", help="skip the sampling throughput")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=RECIPES, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        run_worker(a.worker, a.params, Path(a.model), a.work, a.steps)
        return 0
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    unknown = sorted(set(recipes) - set(RECIPES))
    if unknown:
        ap.error(f"--recipes: unknown {', '.join(unknown)} (choose from {', '.join(RECIPES)})")
    REPORT.section = a.section
    p = load_params(a.params)
    work = Path(tempfile.mkdtemp(prefix="hasp-train-bench-"))
    try:
        model = resolve(a.model, work)
        pool = build_pool(p, work, a.library)
        REPORT.line(f"model {a.model} ({model.name}); fixed input: {pool['questions']} training questions x k="
                    f"{p.train.rollout.k} -> {pool['trajectories']} trajectories, {pool['sft_rows']} sft rows, "
                    f"{pool['dpo_rows']} dpo pairs; {a.steps} steps, batch {p.train.per_device_train_batch_size}"
                    f" x accum {p.train.gradient_accumulation_steps}, max_length {p.train.max_length}, "
                    f"lora_r {p.train.lora_r}, torch_threads {p.train.torch_threads}")
        if recipes:
            REPORT.line("tokens = prompt + target tokens through the model, no padding (dpo: the prompt with "
                        "chosen and with rejected); peak RSS = the recipe's own process (load, train, merge)")
            REPORT.line(f"{'recipe':<7}{'rows':>6}{'steps':>7}{'tokens':>9}{'train s':>9}{'tokens/s':>10}"
                        f"{'peak RSS MB':>13}")
        for r in recipes:
            f = train_figures(r, a.params, model, work, a.steps)
            tps = f"{f['tokens_per_s']:.0f}" if f["tokens_per_s"] else "n/a"
            REPORT.line(f"{r:<7}{f['rows'] or 0:>6}{f['steps'] or 0:>7}{f['tokens'] or 0:>9}{f['train_s']:>9.1f}"
                        f"{tps:>10}{f['peak_rss_mb']:>13.0f}")
        if not a.no_sampling:
            where = a.endpoint or f"{p.llm.backend} serving {model.name}"
            runs = sample_figures(p, work, a.library, model, a.sample_questions, a.endpoint, a.endpoint_model)
            REPORT.line(f"RS sampling ({where}, T={p.train.rollout.temperature}, top_p={p.train.rollout.top_p}, "
                        f"{a.sample_questions} questions x k={p.train.rollout.k}, max {p.train.rollout.max_steps} "
                        f"steps, {p.agent.max_tokens} tokens/step):")
            for s in runs:
                REPORT.line(f"  concurrency {s['concurrency']:>3}: {s['episodes']} episodes, {s['steps']} steps, "
                            f"{s['completion_tokens']} completion tokens in {s['wall_s']:.1f}s = "
                            f"{s['episodes_per_s']:.3f} episodes/s, "
                            f"{s['completion_tokens'] / s['wall_s']:.1f} tok/s (EM {s['em']:.2f})")
            one, many = runs
            REPORT.line(f"  ratio concurrent/one at a time: {many['episodes_per_s'] / one['episodes_per_s']:.2f}x "
                        "episodes/s")
            if a.sage_chains:
                sg = sage_sample_figures(p, work, a.library, model, a.sage_chains, a.endpoint, a.endpoint_model)
                REPORT.line(f"SAGE sampling ({where}, concurrency {p.llm.max_concurrency}): {sg['chains']} chains, "
                            f"{sg['episodes']} episodes and {sg['proposals']} proposals ({sg['admitted']} admitted) "
                            f"in {sg['wall_s']:.1f}s = {sg['episodes_per_s']:.3f} episodes/s, "
                            f"{sg['completion_tokens']} completion tokens of the agent")
        if not a.no_write:
            REPORT.write()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
