"""vLLM with LoRA adapters behind the one client: the command line HASP builds, adapters loaded at run
time, the adapter name as the model for ``hasp eval`` and the RS/OPD sampler, and the GPU compose
stack's wiring. No GPU here: the server is ``VLLMEndpointDouble``, started through a double of vLLM's
console script where a server is started; vllm itself is not installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from doubles import VLLMEndpointDouble, vllm_console_script_double

from hasp.config import Params, ParamsError, RolloutParams, VLLMParams, load_params
from hasp.llm.adapters import AdapterError, adapter_name, resolve_checkpoint
from hasp.llm.vllm_server import ServeError, VLLMServer, attach, ensure_vllm
from traj_builders import search_task

ROOT = Path(__file__).resolve().parents[1]
NO_VLLM = importlib.util.find_spec("vllm") is None


def _round(tmp: Path, base: Path, *, r: int = 16, name: str = "round_0") -> Path:
    """A training round's output as sft.py writes it: ``adapter/`` (PEFT) and ``merged/``."""
    out = tmp / name
    (out / "adapter").mkdir(parents=True)
    (out / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": r, "lora_alpha": 32, "base_model_name_or_path": str(base)}))
    (out / "merged").mkdir()
    (out / "merged" / "config.json").write_text("{}")
    return out


@pytest.fixture
def vllm_exe(tmp_path: Path) -> Path:
    """vLLM's console script in an environment of its own (a double serving VLLMEndpointDouble)."""
    return vllm_console_script_double(tmp_path / "vllm-env" / "bin")


@pytest.fixture
def base(tmp_path: Path) -> Path:
    b = tmp_path / "base-model"
    b.mkdir()
    (b / "config.json").write_text("{}")
    return b


# ----------------------------------------------------------------------------- the command line
def test_vllm_command_registers_each_adapter_by_name(tmp_path: Path, base: Path, vllm_exe: Path) -> None:
    one = resolve_checkpoint(_round(tmp_path, base) / "merged")  # the merged folder -> the adapter beside it
    two = resolve_checkpoint(_round(tmp_path, base, r=12, name="round_1") / "adapter")
    assert one.base == two.base == str(base) and one.adapter == tmp_path / "round_0" / "adapter"
    srv = VLLMServer(str(base), [one, two], 8123, settings=VLLMParams(
        max_loras=3, extra_args=["--max-model-len", "4096"], executable=str(vllm_exe)))
    cmd = srv.command()
    tail = cmd[cmd.index("serve"):]
    assert tail == ["serve", str(base), "--enable-lora",
                    "--lora-modules", f"{one.name}={one.adapter}", f"{two.name}={two.adapter}",
                    "--max-loras", "3", "--max-lora-rank", "16",
                    "--host", "127.0.0.1", "--port", "8123", "--max-model-len", "4096"]
    assert srv.model_name == one.name and "-round_0-" in one.name
    # the name is stable for a folder and differs between two runs' round_0/adapter
    assert adapter_name(one.adapter) == one.name != adapter_name(tmp_path / "other" / "round_0" / "adapter")


def test_lora_rank_rounds_up_and_a_too_small_setting_is_one_line(tmp_path: Path, base: Path, vllm_exe: Path) -> None:
    ckpt = resolve_checkpoint(_round(tmp_path, base, r=40) / "adapter")
    assert VLLMServer(str(base), [ckpt]).max_lora_rank == 64  # vLLM accepts 1, 8, 16, 32, 64, ...
    with pytest.raises(AdapterError, match=r"^llm.vllm.max_lora_rank is 32, but an adapter has rank 40; set it to 64"):
        VLLMServer(str(base), [ckpt], settings=VLLMParams(max_lora_rank=32))
    no_adapter = VLLMServer(str(base), settings=VLLMParams(executable=str(vllm_exe)))
    assert "--max-lora-rank" not in no_adapter.command()  # no adapter: vLLM's own default


def test_backend_and_rank_values_are_checked_at_load() -> None:
    with pytest.raises(ParamsError, match=r"llm.backend: Input should be 'llamacpp', 'transformers' or 'vllm'"):
        load_params(ROOT / "params.yaml", {"llm.backend": "tgi"})
    with pytest.raises(ParamsError, match=r"llm.vllm.max_lora_rank: must be one of 1, 8, 16"):
        load_params(ROOT / "params.yaml", {"llm.backend": "vllm", "llm.vllm.max_lora_rank": 24})
    assert load_params(ROOT / "params.yaml").llm.backend == "llamacpp"  # the CPU default


@pytest.mark.skipif(not NO_VLLM, reason="vllm is installed here")
def test_vllm_backend_without_vllm_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hasp.cli import main

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"llm": {"backend": "vllm"}}))
    assert main(["model", "serve", "--params", str(params)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vllm is not installed" in err[0] and "llm.vllm.executable" in err[0], err
    # the library path (sampler, eval --trained) refuses the same way before spawning anything
    from hasp.llm.endpoints import policy_client
    from hasp.llm.server import free_port

    llm = Params.model_validate({"llm": {"backend": "vllm", "port": free_port()}}).llm
    with pytest.raises(ServeError, match=r"no `vllm` on PATH .* environment of its own"):
        with policy_client(llm, model_dir=tmp_path):
            pass


@pytest.mark.skipif(not NO_VLLM, reason="vllm is installed here: it runs in this interpreter")
def test_vllm_installed_apart_runs_through_its_console_script(tmp_path: Path, base: Path, vllm_exe: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM cannot share HASP's environment (conflicting pins), so HASP starts its console script:
    at ``llm.vllm.executable``, or found on PATH under the default name, and serves a checkpoint."""
    from hasp.llm.server import _http, free_port

    ckpt = resolve_checkpoint(_round(tmp_path, base) / "merged")
    base_url, model, handle = ensure_vllm(ckpt, free_port(), VLLMParams(executable=str(vllm_exe)))
    try:
        assert handle is not None and handle.command()[0] == str(vllm_exe) and model == ckpt.name
        status, text = _http("POST", f"{base_url}/chat/completions", timeout=30.0,
                             body={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and "FINAL[Paris]" in text
    finally:
        handle.stop()
    argv = [json.loads(line) for line in (vllm_exe.parent / "argv.jsonl").read_text().splitlines()]
    assert argv == [["serve", str(base), "--enable-lora", "--lora-modules", ckpt.lora_module(),
                     "--max-loras", "2", "--max-lora-rank", "16", "--host", "127.0.0.1",
                     "--port", base_url.rsplit(":", 1)[1].split("/")[0]]]
    monkeypatch.setenv("PATH", f"{vllm_exe.parent}:{tmp_path / 'empty'}")
    assert VLLMServer(str(base), [ckpt]).command()[0] == str(vllm_exe)  # the default name, on PATH
    monkeypatch.setenv("HOME", str(tmp_path))  # a path under ~, as docs/gpu.md writes it
    at_home = VLLMServer(str(base), [ckpt], settings=VLLMParams(executable="~/vllm-env/bin/vllm"))
    assert at_home.command()[0] == str(vllm_exe)


# ----------------------------------------------------------------------------- run-time loading
def test_adapter_is_loaded_at_run_time_and_then_reused(tmp_path: Path, base: Path) -> None:
    ckpt = resolve_checkpoint(_round(tmp_path, base) / "merged")
    with VLLMEndpointDouble(str(base)) as ep:
        root = ep.base_url.removesuffix("/v1")
        assert attach(root, ckpt) == ckpt.name
        assert attach(root, ckpt) == ckpt.name  # listed now: not loaded twice
        loads = [c for c in ep.calls if c[1] == "/v1/load_lora_adapter"]
        assert loads == [("POST", "/v1/load_lora_adapter", {"lora_name": ckpt.name, "lora_path": str(ckpt.adapter)})]
        assert attach(root, resolve_checkpoint(base)) == str(base)  # round 0: the base itself


def test_run_time_loading_refusals_are_one_line(tmp_path: Path, base: Path) -> None:
    ckpt = resolve_checkpoint(_round(tmp_path, base) / "adapter")
    with VLLMEndpointDouble(str(base), runtime_lora=False) as ep:
        with pytest.raises(ServeError, match=r"does not load LoRA adapters at run time \(HTTP 404.*"
                                             r"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.*--lora-modules"):
            attach(ep.base_url.removesuffix("/v1"), ckpt)
    with VLLMEndpointDouble("Qwen/Qwen2.5-7B-Instruct") as ep:  # an adapter of another base: never loaded
        with pytest.raises(ServeError, match=rf"serves Qwen/Qwen2.5-7B-Instruct, but adapter .* trained on {base}"):
            attach(ep.base_url.removesuffix("/v1"), ckpt)
        assert not [c for c in ep.calls if c[1] == "/v1/load_lora_adapter"]


# ----------------------------------------------------------------------------- no code change for eval
@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hasp.domains.search.prepare import prepare_data

    d = tmp_path_factory.mktemp("vllm_data")
    prepare_data(Params.model_validate({"data": {"n_questions": 10, "hop_weights": {1: 1.0}}}), d)
    return d


def test_hasp_eval_of_a_trained_adapter_sends_its_name_as_the_model(tmp_path: Path, base: Path, data: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from hasp.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    adapter = _round(tmp_path, base) / "adapter"
    with VLLMEndpointDouble(str(base), {"e3-sft": str(adapter)}) as ep:
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["llm"].update(base_url=ep.base_url, model="e3-sft", max_concurrency=2)
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        rc = main(["eval", "--params", str(tmp_path / "params.yaml"), "--variants", "react",
                   "--dataset", f"generated:{data}", "--limit", "2", "--library", str(ROOT / "hasp" / "skills" / "search"),
                   "--out", str(tmp_path / "out"), "--no-progress", "--no-traces"])
    assert rc == 0, capsys.readouterr()
    assert ep.bodies and {b["model"] for b in ep.bodies} == {"e3-sft"}
    assert not [c for c in ep.calls if c[1] == "/v1/load_lora_adapter"]  # registered at start: nothing to load


# ----------------------------------------------------------------------------- the RS/OPD sampler
def test_sampler_on_vllm_serves_the_adapter_not_the_merged_folder(tmp_path: Path, base: Path, data: Path) -> None:
    from hasp.train.sampler import PFRolloutSampler, training_questions

    merged = _round(tmp_path, base) / "merged"
    rollout = RolloutParams(k=1, temperature=0.9, top_p=0.95, max_steps=2)
    with VLLMEndpointDouble(str(base)) as ep:
        p = Params.model_validate({"llm": {"backend": "vllm", "base_url": ep.base_url, "model": str(base),
                                           "max_concurrency": 2}})
        sampler = PFRolloutSampler(p, search_task(data).domain, None, rollout=rollout)
        qs = training_questions(search_task(data))[:2]
        trajs = sampler(qs, merged)
    name = resolve_checkpoint(merged).name
    assert len(trajs) == 2 and name is not None
    assert [c[2] for c in ep.calls if c[1] == "/v1/load_lora_adapter"] == [
        {"lora_name": name, "lora_path": str(merged.parent / "adapter")}]
    assert {b["model"] for b in ep.bodies} == {name}  # the adapter by name; the merged folder is never sent
    assert {b.get("temperature") for b in ep.bodies} == {0.9} and {b.get("top_p") for b in ep.bodies} == {0.95}


def test_sampler_on_vllm_without_base_url_uses_a_vllm_server_on_its_port(tmp_path: Path, base: Path,
                                                                          data: Path) -> None:
    """No base_url: the sampler's own port. A vLLM server already there takes the adapter at run time
    (HASP starts one otherwise; that path needs vllm and a GPU)."""
    from hasp.train.sampler import served_policy

    merged = _round(tmp_path, base) / "merged"
    with VLLMEndpointDouble(str(base)) as ep:
        port = int(ep.base_url.rsplit(":", 1)[1].split("/")[0])
        p = Params.model_validate({"llm": {"backend": "vllm"}})
        with served_policy(p, RolloutParams(temperature=0.7), port=port)(merged) as policy:
            policy.chat([{"role": "user", "content": "hi"}], max_tokens=8)
    assert {b["model"] for b in ep.bodies} == {resolve_checkpoint(merged).name}


def test_sampler_on_transformers_keeps_the_merged_folder(tmp_path: Path, base: Path) -> None:
    """``llm.backend: transformers``: ``transformers serve`` on the merged folder (the port reuse path of ensure_server)."""
    from unittest import mock

    from hasp.train.sampler import served_policy

    merged = _round(tmp_path, base) / "merged"
    with mock.patch("hasp.llm.server.ensure_server", return_value=("http://127.0.0.1:1/v1", str(merged), None)) as es:
        p = Params().model_copy(update={"llm": Params().llm.model_copy(update={"backend": "transformers"})})
        with served_policy(p, RolloutParams(), port=1)(merged):
            pass
    assert Path(es.call_args.args[0]) == merged


def test_transformers_serve_kv_cache_comes_from_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``llm.transformers`` sizes the CPU server's paged KV cache; the page size is passed only when set
    (the server's own default otherwise). The server start is replaced: this checks the command line."""
    from hasp.llm import server
    from hasp.llm.endpoints import policy_client

    commands: list[list[str]] = []

    def start_double(self: server.LocalModelServer) -> server.LocalModelServer:
        commands.append(self.command())
        return self

    monkeypatch.setattr(server, "pinned_model", lambda root, **kw: None)
    monkeypatch.setattr(server.LocalModelServer, "start", start_double)
    monkeypatch.setattr(server.LocalModelServer, "stop", lambda self: None)
    for sets in ({}, {"llm.transformers.num_blocks": 512, "llm.transformers.page_size": 32,
                      "llm.transformers.max_batch_tokens": 2048}):
        llm = load_params(ROOT / "params.yaml", {"llm.backend": "transformers", **sets}).llm
        with policy_client(llm, model_dir=tmp_path, port=1, max_tokens=8):
            pass
    default, tuned = commands
    flag = lambda cmd, name: cmd[cmd.index(name) + 1] if name in cmd else None  # noqa: E731
    assert [flag(default, f) for f in ("--cb-num-blocks", "--cb-max-batch-tokens", "--cb-block-size")] == [
        "64", "1024", None]
    assert [flag(tuned, f) for f in ("--cb-num-blocks", "--cb-max-batch-tokens", "--cb-block-size")] == [
        "512", "2048", "32"]
    with pytest.raises(ParamsError, match="llm.transformers.page_size"):
        load_params(ROOT / "params.yaml", {"llm.transformers.page_size": 4})


# ----------------------------------------------------------------------------- the GPU compose stack
def test_gpu_compose_wires_vllm_mlflow_and_prefect() -> None:
    spec = yaml.safe_load((ROOT / "docker" / "compose.gpu.yaml").read_text())
    svc = spec["services"]
    assert {"vllm", "mlflow-db", "mlflow", "prefect-server", "prefect-worker"} <= set(svc)
    vllm = svc["vllm"]
    assert vllm["image"] == "${VLLM_IMAGE:-vllm/vllm-openai:v0.30.0}"  # a release, never :latest
    assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    cmd = " ".join(map(str, vllm["command"]))
    assert "--enable-lora" in cmd and "--max-lora-rank" in cmd and "--max-loras" in cmd
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert any(str(p).endswith(":8000") for p in vllm["ports"])
    mlflow = " ".join(map(str, svc["mlflow"]["command"]))
    assert "--backend-store-uri postgresql://" in mlflow and "--artifacts-destination" in mlflow
    assert "mlflow-db" in svc["mlflow"]["depends_on"]
    worker = svc["prefect-worker"]
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert worker["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert worker["environment"]["HASP_LLM_BASE_URL"] == "http://vllm:8000/v1"
    assert "prefect worker start --pool hasp-process" in " ".join(map(str, worker["command"]))
    assert {"prefect-server", "vllm", "mlflow"} <= set(worker["depends_on"])
    # the worker writes adapters where the vLLM server reads them: the same path in both containers
    assert set(vllm["volumes"]) & set(worker["volumes"])


def test_params_command_writes_the_gpu_stack_params(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the compose worker runs: params.yaml with the vLLM endpoint set, every other knob kept."""
    from hasp.cli import main

    out = tmp_path / "params.gpu.yaml"
    assert main(["params", "--params", str(ROOT / "params.yaml"), "--out", str(out), "--set", "llm.backend=vllm",
                 "--set", "llm.base_url=http://vllm:8000/v1", "--set", "llm.model=Qwen/Qwen2.5-7B-Instruct"]) == 0
    gpu, cpu = load_params(out), load_params(ROOT / "params.yaml")
    assert (gpu.llm.backend, gpu.llm.base_url, gpu.llm.model) == ("vllm", "http://vllm:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
    assert gpu.model_dump(exclude={"llm"}) == cpu.model_dump(exclude={"llm"})
    capsys.readouterr()
    assert main(["params", "--params", str(ROOT / "params.yaml"), "--out", str(out), "--set", "llm.backend=tgi"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {ROOT / 'params.yaml'}: llm.backend: Input should be 'llamacpp', 'transformers' or 'vllm'"]
