"""Endpoint faults against a scripted fake OpenAI endpoint: hung, garbage, empty, 429, 500, 400.

Every failure surfaces as one ``LLMError`` naming endpoint and model; the ones that may pass on a
second attempt are retried; an interrupt or an episode deadline ends a hung call within a second,
including a real SIGINT to a process whose worker threads wait on a hung endpoint and a real
SIGTERM to a Prefect flow run (whose own SIGTERM handler aborts nothing) in the same state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from doubles import OneDocEnvDouble, OpenAIEndpointDouble

from hasp.agent.harness import EpisodeHarness
from hasp.agent.loop import AgentConfig, run_episode
from hasp.llm import cancel
from hasp.llm.client import LLMClient, LLMConfig, LLMDeadlineExceeded, LLMError, LLMInterrupted

USER = [{"role": "user", "content": "hello"}]
ROOT = Path(__file__).resolve().parents[1]


def _client(base_url: str, **kw: object) -> LLMClient:
    cfg = {"base_url": base_url, "model": "fake-model", "timeout_s": 60.0, "max_retries": 2, **kw}
    return LLMClient(LLMConfig(**cfg))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_abort():
    cancel.reset_abort()
    yield
    cancel.reset_abort()


@pytest.mark.parametrize("fault", ["garbage", "no-choices", 500, 429])
def test_transient_faults_are_retried(fault: object) -> None:
    with OpenAIEndpointDouble([fault]) as ep:
        assert _client(ep.base_url).chat(USER).text == "hello"
        assert ep.requests == 2


@pytest.mark.parametrize("fault,kind", [("garbage", "non-JSON body"), ("no-choices", "no choices"),
                                        (503, "http 503")])
def test_persistent_fault_is_one_error_naming_endpoint_and_model(fault: object, kind: str) -> None:
    with OpenAIEndpointDouble(always=fault) as ep:
        with pytest.raises(LLMError) as info:
            _client(ep.base_url).chat(USER)
    e = info.value
    assert (e.endpoint, e.model, e.kind, e.attempts) == (ep.base_url, "fake-model", kind, 3)
    assert ep.base_url in str(e) and "fake-model" in str(e) and kind in str(e)
    assert ep.requests == 3


def test_client_error_is_not_retried() -> None:
    with OpenAIEndpointDouble(always=400) as ep:
        with pytest.raises(LLMError, match="http 400") as info:
            _client(ep.base_url).chat(USER)
    assert ep.requests == 1 and info.value.attempts == 1


def test_hung_endpoint_times_out_per_attempt_and_is_retried() -> None:
    with OpenAIEndpointDouble(["hang"]) as ep:
        t0 = time.monotonic()
        assert _client(ep.base_url, timeout_s=0.5).chat(USER).text == "hello"
    assert time.monotonic() - t0 < 5 and ep.requests == 2


def test_deadline_ends_a_hung_call() -> None:
    with OpenAIEndpointDouble(always="hang") as ep:
        client = _client(ep.base_url, timeout_s=300.0, max_retries=3)
        t0 = time.monotonic()
        with cancel.call_deadline(0.5), pytest.raises(LLMDeadlineExceeded) as info:
            client.chat(USER)
    assert time.monotonic() - t0 < 2.0
    assert info.value.kind == "deadline" and ep.base_url in str(info.value)


def test_abort_ends_hung_calls_in_worker_threads() -> None:
    """Ctrl-C reaches the main thread only; the abort flag ends the calls its pool waits for."""
    with OpenAIEndpointDouble(always="hang") as ep:
        client = _client(ep.base_url, timeout_s=300.0, max_retries=3, max_concurrency=4)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                client.chat(USER)
            except BaseException as e:  # noqa: BLE001 - recorded for the assertion
                errors.append(e)

        threads = [threading.Thread(target=call) for _ in range(6)]  # 2 of them wait for a slot
        for t in threads:
            t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        cancel.abort_calls()
        for t in threads:
            t.join(timeout=5)
    assert time.monotonic() - t0 < 1.5
    assert len(errors) == 6 and all(isinstance(e, LLMInterrupted) for e in errors)


def test_episode_wall_budget_ends_a_hung_policy_call() -> None:
    with OpenAIEndpointDouble(always="hang") as ep:
        client = _client(ep.base_url, timeout_s=300.0)
        h = EpisodeHarness.plain([])
        h.timeout_s = 0.6
        t0 = time.monotonic()
        traj = run_episode(qid="q1", question="Who founded Quellbrook?", answers=["Mara Eskel"], policy=client,
                           env=OneDocEnvDouble(), cfg=AgentConfig(), variant="react", harness=h)
    assert time.monotonic() - t0 < 2.5
    assert traj.terminated == "error" and traj.prediction in ("", None)
    assert "wall budget of 0.6s ended a model call" in traj.pf_errors[-1]


def test_single_step_wall_budget_ends_a_hung_policy_call() -> None:
    """Math and code episodes ask once; the harness's wall budget must end that call too, through
    the episode spec every evaluation cell builds, as an infrastructure failure."""
    from hasp.config import Params
    from hasp.domains.math.datasets import MathItem
    from hasp.episode.domains import MathDomain
    from hasp.episode.spec import episode_spec

    params = Params.model_validate({"harness": {"timeout_seconds": 0.6}})
    spec = episode_spec(params, MathDomain(), "react")
    with OpenAIEndpointDouble(always="hang") as ep:
        client = _client(ep.base_url, timeout_s=300.0)
        t0 = time.monotonic()
        traj = spec.runner(policy=client)(MathItem(id="m1", problem="1+1?", answers=["2"])).traj
    assert time.monotonic() - t0 < 2.5
    assert traj.terminated == "error" and traj.em == 0.0
    assert "deadline" in traj.pf_errors[-1]


def _interrupt_when_waiting(script: Path, sig: int, env: dict[str, str] | None = None) -> tuple[float, int, int, str]:
    """Run ``script`` against a hung endpoint; once it printed "calling" and four calls are in
    flight, send ``sig``. Returns (seconds to exit, return code, requests the endpoint got, stderr)."""
    with OpenAIEndpointDouble(always="hang", hang_s=600) as ep:
        proc = subprocess.Popen([sys.executable, str(script), ep.base_url], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        assert proc.stdout is not None and proc.stdout.readline().strip() == "calling"
        deadline = time.monotonic() + 60
        while ep.in_flight < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ep.in_flight == 4
        t0 = time.monotonic()
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        finally:
            proc.kill()
        took = time.monotonic() - t0
        requests = ep.requests
    assert proc.stderr is not None
    return took, proc.returncode, requests, proc.stderr.read()


def test_sigint_stops_a_process_waiting_on_a_hung_endpoint_within_seconds(tmp_path: Path) -> None:
    """A real process: a thread pool of calls against a hung endpoint, the shipped 300 s timeout."""
    script = tmp_path / "hung.py"
    script.write_text(textwrap.dedent("""
        import sys
        from concurrent.futures import ThreadPoolExecutor
        from hasp.llm.cancel import install_signal_handlers
        from hasp.llm.client import LLMClient, LLMConfig
        install_signal_handlers()
        client = LLMClient(LLMConfig(base_url=sys.argv[1], model="m", timeout_s=300.0, max_retries=3))
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(client.chat, [{"role": "user", "content": "x"}]) for _ in range(8)]
            print("calling", flush=True)
            for f in futures:
                f.result()
    """))
    took, _, _, stderr = _interrupt_when_waiting(script, signal.SIGINT)
    assert took < 3.0, took
    assert "KeyboardInterrupt" in stderr


def test_sigterm_stops_a_prefect_flow_whose_episodes_wait_on_a_hung_endpoint(prefect_harness, tmp_path: Path) -> None:
    """Inside a flow run Prefect installs its own SIGTERM handler, which raises ``TerminationSignal``
    and aborts nothing. The episode pool must still end its hung calls at once, not after the
    shipped 300 s timeout: a real flow, a real ``run_many`` pool, a real SIGTERM."""
    from prefect.settings import PREFECT_API_URL

    script = tmp_path / "flow_hung.py"
    script.write_text(textwrap.dedent("""
        import sys
        from prefect import flow
        from hasp.agent.rollout import run_many
        from hasp.llm.cancel import install_signal_handlers
        from hasp.llm.client import LLMClient, LLMConfig
        install_signal_handlers()
        client = LLMClient(LLMConfig(base_url=sys.argv[1], model="m", timeout_s=300.0, max_retries=3))

        @flow(name="hung-episodes")
        def hung() -> None:
            print("calling", flush=True)
            run_many(range(8), lambda i: client.chat([{"role": "user", "content": str(i)}]),
                     concurrency=4, progress=False)

        hung()
    """))
    took, rc, requests, stderr = _interrupt_when_waiting(
        script, signal.SIGTERM, {"PREFECT_API_URL": str(PREFECT_API_URL.value())})
    assert took < 15.0, took  # Prefect reports the crash to its API first; the calls end in 0.1 s
    assert rc in (-signal.SIGTERM, 128 + signal.SIGTERM), rc
    assert requests == 4  # the queued episodes were cancelled, never sent
    assert "termination signal" in stderr


def test_runaway_reply_is_cut_and_the_cap_recorded() -> None:
    with OpenAIEndpointDouble(reply=lambda body: "x" * 5_000_000) as ep:
        text = _client(ep.base_url, max_reply_chars=4096).chat(USER).text
    assert len(text) < 4200 and text.endswith("[reply cut at 4096 of 5000000 characters]")
