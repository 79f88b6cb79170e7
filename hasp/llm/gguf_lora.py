"""A trained PEFT LoRA adapter as a GGUF LoRA adapter, which llama.cpp's server applies on the base GGUF.

Why: the CPU engine is llama.cpp's server on the base model's GGUF. It applies LoRA adapters at run time,
picked per request by id and scale, so one server holds the base and every checkpoint, without a merge.
It reads adapters only as GGUF, laid out for the base GGUF's tensors; training writes PEFT folders
(``<out>/adapter``) laid out for the Hugging Face model. This module turns one into the other:

- names: a PEFT module (``model.layers.3.self_attn.q_proj``) becomes the base GGUF's tensor
  (``blk.3.attn_q``), and its ``lora_A`` / ``lora_B`` become ``blk.3.attn_q.weight.lora_a`` / ``.lora_b``;
  llama.cpp computes ``W x + scale (B (A x))`` with the arrays as PEFT stores them (A is rank x in, B is
  out x rank), so no transposition;
- rows: converting a llama model to GGUF reorders the rows of ``q_proj`` and ``k_proj`` (each head's
  rotary halves are interleaved, the order llama.cpp's rope expects); the base GGUF's q/k rows are in
  that order, so ``lora_B`` of q/k (whose rows are the output rows) is reordered the same way;
- scale: llama.cpp scales an adapter by ``alpha / rank`` with one alpha per file (``adapter.lora.alpha``)
  and the rank read from each tensor; PEFT scales each module by its own ``alpha / r`` (``alpha_pattern``,
  ``rank_pattern``) or ``alpha / sqrt(r)`` (``use_rslora``). Where the two differ, the ratio is folded
  into ``lora_B``, so a request's scale 1.0 means what PEFT computed in training.

What has no GGUF LoRA form is refused with one line naming the file (``AdapterError``): DoRA, LoRA bias,
full modules (``modules_to_save``), trainable tokens, embedding LoRA, modules the base GGUF has no tensor
for, and adapters whose shapes or layer count are another model's.

The GGUF is written next to the adapter (``adapter.gguf``), atomically, with a hash of what it was made
from in its metadata; serving the same checkpoint again reuses it instead of converting again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasp.llm.adapters import ADAPTER_CONFIG, AdapterError, read_adapter_config

GGUF_FILE = "adapter.gguf"
WEIGHTS_FILE = "adapter_model.safetensors"
#: metadata key holding the hash of the inputs a converted file was made from
SOURCE_KEY = "hasp.lora.source_sha256"
#: part of that hash: bump when the conversion's output changes, so older files are converted again
CONVERTER_VERSION = 1
#: architectures whose HF -> GGUF row order is known here: llama's q/k rows are permuted (rotary halves), gemma3's are not
_PERMUTED_QK = {"llama": True, "gemma3": False}
_PEFT_PREFIX = "base_model.model."
_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<ab>[AB])\.weight$")
_LAYER = re.compile(r"\.layers\.(\d+)\.")
#: adapter_config.json options whose effect a GGUF LoRA (two matrices per weight, one scale) cannot carry
_REFUSED = {
    "use_dora": "DoRA (use_dora) rescales the weight's columns, which llama.cpp's LoRA does not; "
                "train with use_dora false",
    "lora_bias": "a LoRA bias (lora_bias) has no GGUF LoRA tensor; train with lora_bias false",
    "modules_to_save": "modules_to_save {value} are whole trained modules, not LoRA matrices; llama.cpp "
                       "cannot load them beside the base; train without modules_to_save",
    "trainable_token_indices": "trainable_token_indices changes embedding rows, which a GGUF LoRA cannot "
                               "carry; train without it",
    "target_parameters": "target_parameters {value} (LoRA on raw parameters) has no GGUF LoRA form; "
                         "target modules instead",
    "alora_invocation_tokens": "an activated LoRA (alora_invocation_tokens) is not converted; train a plain LoRA",
    "layer_replication": "layer_replication adds layers the base GGUF does not have; train without it",
    **{key: f"{key} is a LoRA variant whose forward pass llama.cpp does not compute; train a plain LoRA"
       for key in ("use_qalora", "velora_config", "monteclora_config", "use_bdlora", "arrow_config", "kasa_config")},
}


@dataclass(frozen=True)
class BaseGGUF:
    """What the conversion needs from the base GGUF: its architecture, block and head counts, and the
    shape of each tensor as ggml counts it (``ne0`` = input features, ``ne1`` = output features)."""

    path: Path
    arch: str
    n_blocks: int
    n_head: int
    n_head_kv: int
    shapes: dict[str, tuple[int, ...]]

    def signature(self) -> dict[str, Any]:
        """The facts a converted adapter depends on and was checked against; part of its source hash."""
        return {"arch": self.arch, "n_blocks": self.n_blocks, "n_head": self.n_head, "n_head_kv": self.n_head_kv,
                "shapes": sorted(self.shapes.items())}


def read_base_gguf(base_gguf: Path) -> BaseGGUF:
    """The base GGUF's metadata and tensor shapes (the weights are not read).

    Parsing a GGUF's metadata reads its whole vocabulary (seconds for a 49k-token one), and every
    adapter of a chain is checked against the same base, so the result is kept per file version."""
    path = Path(base_gguf)
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or not path.is_file():
        raise AdapterError(f"{path}: no such base GGUF file; point llm.llamacpp.gguf at the model's GGUF")
    return _read_base(path.resolve(), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _read_base(path: Path, mtime_ns: int, size: int) -> BaseGGUF:
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - any byte string can be handed in; the reader fails in many ways
        raise AdapterError(f"{path}: not a GGUF file ({e}); point llm.llamacpp.gguf at the model's GGUF") from None

    def field(key: str) -> Any:
        f = reader.fields.get(key)
        if f is None:
            raise AdapterError(f"{path}: GGUF metadata {key} is missing; not a model GGUF llama.cpp can serve")
        return f.contents()

    arch = str(field("general.architecture"))
    n_head = int(field(f"{arch}.attention.head_count"))
    n_head_kv_field = reader.fields.get(f"{arch}.attention.head_count_kv")
    return BaseGGUF(path=path, arch=arch, n_blocks=int(field(f"{arch}.block_count")), n_head=n_head,
                    n_head_kv=int(n_head_kv_field.contents()) if n_head_kv_field is not None else n_head,
                    shapes={t.name: tuple(int(x) for x in t.shape) for t in reader.tensors})


def gguf_adapter_path(adapter_dir: Path) -> Path:
    """Where ``convert_adapter`` writes an adapter's GGUF."""
    return Path(adapter_dir) / GGUF_FILE


def convert_adapter(adapter_dir: Path, base_gguf: Path) -> Path:
    """``<adapter_dir>/adapter.gguf``: the PEFT LoRA adapter in ``adapter_dir`` as a GGUF LoRA for ``base_gguf``.

    An existing file made from the same adapter files (and the same kind of base) is returned as it is;
    otherwise the adapter is checked against the base and converted. Raises ``AdapterError`` (one line
    naming the file and what to do) for anything llama.cpp could not apply as PEFT does."""
    adapter_dir = Path(adapter_dir)
    cfg = read_adapter_config(adapter_dir)
    weights = _weights_file(adapter_dir)
    base = read_base_gguf(base_gguf)
    if base.arch not in _PERMUTED_QK:
        raise AdapterError(f"{base.path}: architecture {base.arch!r} is not handled by the LoRA converter "
                           f"(handled: {', '.join(sorted(_PERMUTED_QK))}); serve this model with "
                           "llm.backend transformers")
    _refuse_options(adapter_dir / ADAPTER_CONFIG, cfg)
    out = gguf_adapter_path(adapter_dir)
    source = _source_hash(adapter_dir / ADAPTER_CONFIG, weights, base)
    if _converted_from(out) == source:
        return out
    tensors = _lora_tensors(weights, cfg, base)
    _write_gguf(out, base.arch, float(cfg.get("lora_alpha") or 0), tensors, source)
    return out


# --------------------------------------------------------------------------------------------- checks
def _weights_file(adapter_dir: Path) -> Path:
    weights = adapter_dir / WEIGHTS_FILE
    if weights.is_file():
        return weights
    if (adapter_dir / "adapter_model.bin").is_file():
        raise AdapterError(f"{weights}: missing; the adapter is saved as pickled adapter_model.bin, which is "
                           "not read; save it again with save_pretrained(..., safe_serialization=True)")
    raise AdapterError(f"{weights}: no such file; not a saved PEFT adapter (save it with save_pretrained)")


def _refuse_options(config_path: Path, cfg: dict) -> None:
    for key, why in _REFUSED.items():
        value = cfg.get(key)
        if value:
            raise AdapterError(f"{config_path}: {why.format(value=value)}")


def _source_hash(config: Path, weights: Path, base: BaseGGUF) -> str:
    h = hashlib.sha256(json.dumps({"converter": CONVERTER_VERSION, "base": base.signature()}).encode())
    for path in (config, weights):
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _converted_from(out: Path) -> str | None:
    """The source hash recorded in an existing converted file, or None (no file, unreadable, other)."""
    if not out.is_file():
        return None
    import gguf

    try:
        f = gguf.GGUFReader(out).fields.get(SOURCE_KEY)
        return str(f.contents()) if f is not None else None
    except Exception:  # noqa: BLE001 - a damaged or foreign file is simply converted again
        return None


# ----------------------------------------------------------------------------------------- conversion
def _pattern_value(patterns: dict, module: str, default: Any) -> Any:
    """PEFT's ``rank_pattern`` / ``alpha_pattern`` lookup: the first key matching the end of the name."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def _peft_scale(cfg: dict, module: str, rank: int) -> float:
    alpha = float(_pattern_value(cfg.get("alpha_pattern"), module, cfg.get("lora_alpha", 8)))
    return alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank


def _permute_rows(b: Any, n_head: int) -> Any:
    """Reorder the output rows as the HF -> GGUF conversion does for llama's q/k: within each head (of
    ``d`` rows), the two rotary halves are interleaved, row ``h*d + j*d/2 + i`` (half ``j``) going to
    ``h*d + 2*i + j``."""
    out, r = b.shape
    return b.reshape(n_head, 2, out // n_head // 2, r).swapaxes(1, 2).reshape(out, r)


def _lora_tensors(weights: Path, cfg: dict, base: BaseGGUF) -> dict[str, Any]:
    """``{gguf tensor name: float32 array}`` for every LoRA pair of the adapter, checked against the base."""
    import gguf
    import numpy as np
    from safetensors import safe_open

    arch = {name: a for a, name in gguf.MODEL_ARCH_NAMES.items()}[base.arch]
    names = gguf.get_tensor_name_map(arch, base.n_blocks)
    pairs: dict[str, dict[str, Any]] = {}
    try:
        with safe_open(weights, framework="pt") as f:
            keys = list(f.keys())
            for key in keys:
                module, ab = _module_of(weights, key)
                pairs.setdefault(module, {})[ab] = f.get_tensor(key).float().numpy()
    except AdapterError:
        raise
    except Exception as e:  # safetensors raises its own error types for a damaged file
        raise AdapterError(f"{weights}: unreadable ({type(e).__name__}: {e}); save the adapter again") from None
    if not pairs:
        raise AdapterError(f"{weights}: holds no LoRA matrices; not a trained LoRA adapter")
    alpha = float(cfg.get("lora_alpha") or 0)
    out: dict[str, Any] = {}
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"{weights}: {module} has lora_{next(iter(ab))} without its pair; "
                               "save the adapter again")
        a, b = ab["A"], ab["B"]
        target = _target(weights, module, names, base)
        n_in, n_out = base.shapes[target][:2]
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != n_in or b.shape[0] != n_out or a.shape[0] != b.shape[1]:
            raise AdapterError(f"{weights}: {module} has lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)}, but "
                               f"{target} in {base.path} maps {n_in} inputs to {n_out} outputs; the adapter was "
                               "trained on another model than this GGUF")
        rank = a.shape[0]
        fold = _peft_scale(cfg, module, rank) / (alpha / rank if alpha else 1.0)
        if fold != 1.0:
            b = b * np.float32(fold)
        if _PERMUTED_QK[base.arch] and target.endswith((".attn_q.weight", ".attn_k.weight")):
            b = _permute_rows(b, base.n_head if ".attn_q." in target else base.n_head_kv)
        out[f"{target}.lora_a"] = np.ascontiguousarray(a, dtype=np.float32)
        out[f"{target}.lora_b"] = np.ascontiguousarray(b, dtype=np.float32)
    return out


def _module_of(weights: Path, key: str) -> tuple[str, str]:
    """``base_model.model.<module>.lora_A.weight`` -> (``<module>``, ``A``); anything else is refused."""
    name = key[len(_PEFT_PREFIX):] if key.startswith(_PEFT_PREFIX) else key
    m = _LORA_KEY.match(name)
    if m:
        return m.group("module"), m.group("ab")
    if "lora_embedding_" in name:
        why = "is an embedding LoRA, which is not converted; target the linear layers only"
    elif "lora_magnitude_vector" in name:
        why = "is a DoRA magnitude, which llama.cpp's LoRA does not apply; train with use_dora false"
    else:
        why = "is not a LoRA A/B matrix (a trained bias or a whole module?); llama.cpp cannot apply it"
    raise AdapterError(f"{weights}: tensor {key} {why}")


def _target(weights: Path, module: str, names: Any, base: BaseGGUF) -> str:
    """The base GGUF tensor a PEFT module's LoRA applies to."""
    layer = _LAYER.search(f".{module}.")
    if layer and int(layer.group(1)) >= base.n_blocks:
        raise AdapterError(f"{weights}: {module} is in layer {layer.group(1)} but {base.path} has "
                           f"{base.n_blocks} layers; the adapter was trained on another model than this GGUF")
    name = names.get_name(module)
    if name is None or f"{name}.weight" not in base.shapes:
        raise AdapterError(f"{weights}: target module {module} has no tensor in {base.path} "
                           f"({'no GGUF name' if name is None else name + '.weight is absent'}); train without it "
                           "(with tied embeddings, lm_head is not a tensor of its own)")
    return f"{name}.weight"


def _write_gguf(out: Path, arch: str, alpha: float, tensors: dict[str, Any], source: str) -> None:
    """Write the adapter GGUF to a temp file beside ``out`` and rename it in, so a reader never sees half."""
    import gguf

    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        w = gguf.GGUFWriter(tmp, arch)
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)  # llama.cpp reads it as f32 (0 = scale as given)
        w.add_string(SOURCE_KEY, source)
        for name, array in tensors.items():
            w.add_tensor(name, array)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        tmp.chmod(0o644)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
