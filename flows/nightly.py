"""The nightly evolution of a served library from the traces its agent logged since the last run.

One run: read the watermark kept with the served library (``hasp.evolve.release``), cut the batch of
trace lines logged after it (``hasp.evolve.trace_batches``), run one evolution epoch whose Phase A
reads that batch (``evolve_flow(traces=...)``: Phases B-H, the gates and the pinned anchors as in any
epoch), and when it admitted skills, release the evolved library as the served folder's next version
with a changelog entry naming the traces, gates and anchors that justified it. The watermark then moves
past the batch, so the next night reads only what came after. A night with no new trace line does
nothing but say so; an epoch the budget stopped neither releases nor moves the watermark (the batch is
read again, with what came after it, next time). ``hasp skills rollback LIBRARY`` undoes a release.
One run at a time per library: a run holds the library's lock (``release.lock``) from the watermark read
to the watermark write, and a second one refuses to start with one line; a nightly deployment also runs
its flow runs one at a time (``hasp.flows.schedule.schedule_kwargs``).

Deploy it on a schedule with ``python -m hasp.flows.deploy --traces DIR --library SERVED ...``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from hasp.evolve import release
from hasp.evolve.trace_batches import new_batch
from hasp.flows.evolve import evolve_flow


def _evidence(res: dict[str, Any], batch: Any, traces: str, run_dir: Path) -> dict[str, Any]:
    """What the changelog entry records: the traces read, what each gate said, the anchors, the runs."""
    ph = res["epochs"][-1]
    gate = ph.get("gate") or {}
    return {"run_dir": str(run_dir), "flow_run_id": res.get("flow_run_id"), "mlflow_run_id": res.get("run_id"),
            "traces": {"source": traces, "new_lines": batch.n_lines, "files": batch.files,
                       "read": {k: v for k, v in ((ph.get("rollout") or {}).get("traces") or {}).items()
                                if k in ("n_read", "n_bad", "n_with_gold", "bad_by_reason")}},
            "admitted": ph["admit"].get("admitted_ids", ph["admit"].get("admitted")),
            "gate": {k: gate.get(k) for k in ("val_runs", "val_pass", "base_em", "anchors", "judge") if k in gate},
            "review": {k: (ph.get("review") or {}).get(k) for k in ("reviewed", "review_accept")}}


@flow(name="hasp-nightly", log_prints=True)
def nightly_flow(traces: str, library: str, params_path: str | None = "params.yaml",
                 out_root: str = "outputs/nightly", mode: str | None = None, filtering: str | None = None,
                 traces_gold: bool | None = None, publish: bool = True) -> dict[str, Any]:
    """One night: the traces of ``traces`` after the watermark of ``library``, one epoch on them, a
    release of ``library`` when skills were admitted (see the module doc)."""
    lib = Path(library)
    with release.lock(lib, "this nightly run"):  # a second run over the same library refuses to start
        return _night(traces, lib, params_path, out_root, mode, filtering, traces_gold, publish)


def _night(traces: str, lib: Path, params_path: str | None, out_root: str, mode: str | None,
           filtering: str | None, traces_gold: bool | None, publish: bool) -> dict[str, Any]:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir = Path(out_root) / f"run-{stamp}-{str(flow_run.id or 'local')[:8]}"
    batch = new_batch(traces, release.watermark(lib), run_dir / "traces")
    base = {"run_dir": str(run_dir), "new_lines": batch.n_lines, "files": batch.files, "reread": batch.reread,
            "version": release.live_version(lib), "released": None}
    if batch.n_lines == 0:
        print(f"no trace line in {traces} after the last run's watermark: nothing to evolve")
        return base
    res = evolve_flow(epochs=1, mode=mode, filtering=filtering, params_path=params_path, out_root=str(run_dir),
                      library=str(lib), final_eval=False, traces=str(batch.folder), traces_gold=traces_gold)
    if res["stopped"]:
        print(f"the epoch stopped ({res['stopped']}): no release, the watermark stays")
        return {**base, "stopped": res["stopped"]}
    admitted = int(res["epochs"][-1]["admit"].get("admitted", 0))
    entry = None
    if admitted and publish:
        entry = release.publish(lib, Path(res["library"]), _evidence(res, batch, traces, run_dir))
        print(f"released {lib} v{entry.version}: added {entry.added}, changed {entry.changed}")
    else:
        print(f"{admitted} skill(s) admitted: {lib} stays at v{release.live_version(lib) or 1}")
    release.set_watermark(lib, batch.mark)
    return {**base, "admitted": admitted, "released": entry.version if entry else None,
            "version": release.live_version(lib), "mlflow_run_id": res.get("run_id")}
