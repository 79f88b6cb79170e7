"""The llama.cpp engine as HASP runs it: started, reused, refused and stopped like any model server.

Real server processes on the embedded GGUF (a few seconds each); doubles only stand in for a port held
by something else and for broken files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from hasp.config import LlamaCppParams, load_params
from hasp.llm.adapters import AdapterError
from hasp.llm.client import LLMClient
from hasp.llm.llamacpp_server import (GGUFCheckpoint, LlamaCppServer, ServeError, adapter_chain, base_gguf_of,
                                      ensure_llamacpp, require_avx2, require_gguf, resolve_gguf_checkpoint,
                                      served_alias)
from hasp.llm.model_prep import MARKER, gguf_path, prepare_model
from hasp.llm.server import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.model


def _pids_with(marker: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and "hasp.llm.guard" not in cmd:
                out.append(int(proc.name))
    return out


def test_embedded_model_is_served_from_the_shipped_gguf(real_llm: LLMClient) -> None:
    msgs = [{"role": "user", "content": "Write one sentence about Paris."}]
    res = real_llm.chat(msgs, max_tokens=16)
    assert res.text.strip() and res.text == real_llm.chat(msgs, max_tokens=16).text  # greedy: the same twice
    # the GGUF's chat template with SmolLM2's default system line, as transformers tokenizes it in training
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(prepare_model())
    expected = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert res.prompt_tokens == len(expected) and 0 < res.completion_tokens <= 16
    ckpt = resolve_gguf_checkpoint(None, None)
    assert ckpt.gguf == gguf_path() and ckpt.adapters == ()


def test_a_running_server_of_the_same_model_is_reused_and_another_one_is_refused(real_llm: LLMClient,
                                                                                tmp_path: Path) -> None:
    port = urlparse(real_llm.config.base_url).port
    assert port is not None
    base_url, model, handle = ensure_llamacpp(resolve_gguf_checkpoint(None, None), port, LlamaCppParams())
    assert handle is None and (base_url, model) == (real_llm.config.base_url, real_llm.config.model)
    other = GGUFCheckpoint(gguf_path(), (tmp_path,), (gguf_path(),))  # same base, an adapter on top: not the same
    with pytest.raises(ServeError, match=f"another run holds port {port}.*llm.port"):
        ensure_llamacpp(other, port, LlamaCppParams())


def test_sampling_settings_are_taken_per_request(real_llm: LLMClient) -> None:
    """One server serves greedy and sampling callers: a request's temperature is its own."""
    msgs = [{"role": "user", "content": "Name a colour."}]
    greedy = {real_llm.chat(msgs, temperature=0.0, max_tokens=12).text for _ in range(3)}
    assert len(greedy) == 1
    sampled = {real_llm.chat(msgs, temperature=1.5, max_tokens=12, seed=s).text for s in range(6)}
    assert len(sampled) > 1


def test_bad_files_and_settings_get_one_line(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="missing.gguf: cannot read the GGUF.*llm.llamacpp.gguf"):
        resolve_gguf_checkpoint(None, str(tmp_path / "missing.gguf"))
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 64)
    with pytest.raises(ServeError, match="corrupt.gguf: not a GGUF file"):
        require_gguf(bad, "llm.llamacpp.gguf")
    folder = tmp_path / "hf-folder"
    folder.mkdir()
    with pytest.raises(ServeError, match="no GGUF to serve.*llm.llamacpp.gguf"):
        base_gguf_of(folder, None)  # a model folder with no record of its GGUF
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: fpu sse sse2 avx\n")
    if os.uname().machine == "x86_64":
        with pytest.raises(ServeError, match="no AVX2.*llm.backend: transformers"):
            require_avx2(cpuinfo)
    with pytest.raises(Exception, match="llm.backend"):
        load_params(ROOT / "params.yaml", {"llm.backend": "llama"})


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf_path().read_bytes()[:4096])
    srv = LlamaCppServer(GGUFCheckpoint(truncated), free_port(), startup_timeout_s=60.0)
    with pytest.raises(RuntimeError, match="llama.cpp server exited with .* during startup; log"):
        srv.start()
    assert srv.proc is None


def test_a_port_in_use_is_refused_before_a_process_starts() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port} .* already in use"):
            ensure_llamacpp(resolve_gguf_checkpoint(None, None), port, LlamaCppParams())


def test_the_embedded_folder_leads_back_to_its_gguf_and_adapters_chain_down_to_it(tmp_path: Path) -> None:
    folder = prepare_model()
    assert (folder / MARKER).is_file() and base_gguf_of(folder, None) == gguf_path()
    assert adapter_chain(folder) == (folder, ())
    # round 0 trained on the embedded folder, round 1 on round 0's merged folder
    r0, r1 = tmp_path / "round_0", tmp_path / "round_1"
    for d, base in ((r0, folder), (r1, r0 / "merged")):
        (d / "adapter").mkdir(parents=True)
        (d / "merged").mkdir()
        (d / "adapter" / "adapter_config.json").write_text(json.dumps(
            {"peft_type": "LORA", "r": 8, "base_model_name_or_path": str(base)}))
    assert adapter_chain(r1 / "merged") == (folder, (r0 / "adapter", r1 / "adapter"))
    (r0 / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 8, "base_model_name_or_path": str(r1 / "merged")}))
    with pytest.raises(AdapterError, match="leads back to itself"):
        adapter_chain(r1 / "merged")


def test_nothing_is_left_running_after_sigkill_of_the_parent(tmp_path: Path) -> None:
    port = free_port()
    script = textwrap.dedent(f"""
        import time
        from hasp.config import LlamaCppParams
        from hasp.llm.llamacpp_server import ensure_llamacpp, resolve_gguf_checkpoint
        ensure_llamacpp(resolve_gguf_checkpoint(None, None), {port}, LlamaCppParams())
        print("up", flush=True)
        time.sleep(600)
    """)
    before = set(_pids_with("hasp.llm.llamacpp_main"))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "up"
        assert served_alias(f"http://127.0.0.1:{port}") is not None
        ours = set(_pids_with("hasp.llm.llamacpp_main")) - before
        assert ours
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and ours & set(_pids_with("hasp.llm.llamacpp_main")):
        time.sleep(0.5)
    assert not ours & set(_pids_with("hasp.llm.llamacpp_main"))
    assert served_alias(f"http://127.0.0.1:{port}", timeout=1.0) is None
