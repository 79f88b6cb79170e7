"""FINAL naming an entity seen only in snippets, not in read documents → warning naming it
(dynamic INJECT_CONTEXT); code handler.

Reads ctx keys: has_read, all_read_contents, last_search_results_text.
"""

from hasp.pf.search_support import names
from hasp.pf import register_pf
from hasp.pf.bases import FinalCheckPF


def snippet_only(ctx, answer):
    """The first name in the answer that is in the last results but not in any read document."""
    if not ctx.get("has_read"):
        return None
    read = str(ctx.get("all_read_contents", "")).lower()
    shown = str(ctx.get("last_search_results_text", "")).lower()
    for name in names(answer):
        low = name.lower()
        if low in shown and low not in read:
            return name
    return None


@register_pf("citation_mismatch")
class CitationMismatchPF(FinalCheckPF):
    problem = staticmethod(snippet_only)

    def objection(self, name):
        return f"'{name}' is only in search snippets"

    def warning(self, ctx, arg, name):
        return (f"[SOURCE CHECK] '{name}' appears only in a search snippet, not in "
                "a document you read. READ the document that mentions it first.")

    def reason(self, name):
        return f"'{name}' only in snippets"
