"""READ of an already-read document → READ the best unread result (MODIFY_ACTION).

Reads ctx keys: read_ids, last_search_hits, seen_hits.
"""

import re

from hasp.domains.search.pf_support import unread_hits
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf

_RANK = re.compile(r"^\s*(?:#|no\.?|result|doc(?:ument)?)?\s*#?\s*(\d{1,2})\.?\s*$", re.I)
_ID = re.compile(r"\[([^\[\]]+)\]")


def target_id(ctx, arg):
    """The doc id a READ argument points to, as far as the context can tell (None if unknown)."""
    raw = arg.strip().strip("\"'`")
    m = _ID.search(raw)
    if m:
        raw = m.group(1).strip()
    hits = list(ctx.get("last_search_hits") or [])
    # the environment's order (SearchEnvironment.resolve): an id among the last results is that
    # document, even when it reads like a rank ("doc2"); only then is a small number a rank
    if any(raw == hit.get("id") for hit in hits):
        return raw
    rank = _RANK.match(raw)
    if rank and 1 <= int(rank.group(1)) <= len(hits):
        return str(hits[int(rank.group(1)) - 1].get("id", ""))
    for hit in hits + list(ctx.get("seen_hits") or []):
        if raw == hit.get("id") or raw.lower() == str(hit.get("title", "")).lower():
            return str(hit.get("id"))
    return raw or None


@register_pf("redundant_read")
class RedundantReadPF(ProgramFunction):
    watches = ("READ",)
    max_fires = 2

    def should_activate(self, ctx, action_type, arg):
        read = ctx.get("read_ids")
        return (action_type == "READ" and bool(read) and target_id(ctx, arg) in set(read)
                and bool(unread_hits(ctx)))

    def intervene(self, ctx, action_type, arg, teacher=None):
        doc = unread_hits(ctx)[0]
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="READ", new_action_arg=doc,
                            reason=f"{target_id(ctx, arg)} was already read; reading {doc}")
