"""The step after a READ → quote the read document's sentences that match the question (INJECT_CONTEXT).

One of the always-on three: it turns the raw observation into the few lines later PFs and
the policy should reason over. Pure code; the quoted text is built from runtime state.
Reads ctx keys: question, thought, action_history, read_count, all_read_contents.
"""

from functools import lru_cache

from hasp.pf.search_support import just_read, last_read_text, sentence_tokens
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.textutil import content_tokens

MAX_LINES = 2
MAX_CHARS = 220


def relevant_lines(ctx, limit=MAX_LINES):
    """Sentences of the last read document ranked by shared content tokens with the question."""
    return list(_relevant(str(ctx.get("question", "")), str(ctx.get("thought", "")), last_read_text(ctx), limit))


@lru_cache(maxsize=256)  # should_activate and intervene ask the same on one step
def _relevant(question, thought, text, limit):
    want = set(content_tokens(question)) | set(content_tokens(thought))
    scored = []
    for i, (sent, toks) in enumerate(sentence_tokens(text)):
        overlap = len(want & toks)
        if overlap:
            scored.append((-overlap, i, sent))
    return tuple(s[:MAX_CHARS] for _, _, s in sorted(scored)[:limit])


@register_pf("relevant_content_extractor")
class RelevantContentExtractorPF(ProgramFunction):
    max_fires = 4

    def should_activate(self, ctx, action_type, arg):
        return just_read(ctx) and bool(relevant_lines(ctx))

    def intervene(self, ctx, action_type, arg, teacher=None):
        lines = relevant_lines(ctx)
        quoted = " | ".join(f'"{s}"' for s in lines)
        return Intervention(type=InterventionType.INJECT_CONTEXT,
                            context_text=f"[KEY LINES] From the document you just read: {quoted}",
                            reason=f"{len(lines)} matching sentence(s) in the last read document")
