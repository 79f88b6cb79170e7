"""Loop bounds and indices that reach one element past the end → a hint quoting the lines."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.pf import register_pf


@register_pf("code_off_by_one")
class CodeOffByOnePF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_off_by_one(view.tree))


def _len_of(node):
    """`len(NAME)` -> NAME, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name)):
        return node.args[0].id
    return None


def _len_plus(node):
    """`len(NAME) + k` (k >= 0 an int) -> (NAME, k), else None."""
    name = _len_of(node)
    if name:
        return name, 0
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.right, ast.Constant)
            and type(node.right.value) is int and node.right.value >= 0):
        name = _len_of(node.left)
        if name:
            return name, node.right.value
    return None


def _index_uses(body, seq, var):
    """Subscripts `seq[var]` / `seq[var + k]` (not slices) in the loop body: [(node, k)]."""
    out = []
    for stmt in body:
        for n in ast.walk(stmt):
            if not (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == seq):
                continue
            s = n.slice
            if isinstance(s, ast.Name) and s.id == var:
                out.append((n, 0))
            elif (isinstance(s, ast.BinOp) and isinstance(s.op, ast.Add) and isinstance(s.left, ast.Name)
                  and s.left.id == var and isinstance(s.right, ast.Constant) and type(s.right.value) is int):
                out.append((n, s.right.value))
    return out


def _compares_len(body, seq):
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Compare) and any(_len_of(x) == seq for x in [n.left, *n.comparators]):
                return True
    return False


def find_off_by_one(tree):
    found = []
    for node in ast.walk(tree):
        # seq[len(seq)] / seq[len(seq) + k]
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            lp = _len_plus(node.slice)
            if lp and lp[0] == node.value.id:
                name, plus = node.value.id, f" + {lp[1]}" if lp[1] else ""
                found.append((node.lineno, f"`{name}[len({name}){plus}]` is always out of range; the last "
                                           "element is at len - 1"))
        # for i in range(...len(seq) + k...) with seq[i + j] in the body
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call)
                and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range" and node.iter.args):
            var = node.target.id
            stop = node.iter.args[0] if len(node.iter.args) == 1 else node.iter.args[1]
            step = node.iter.args[2] if len(node.iter.args) == 3 else None
            lp = _len_plus(stop)
            if not lp or step is not None:
                continue
            seq, k = lp
            if _compares_len(node.body, seq):
                continue  # the body checks the bound itself
            for sub, j in _index_uses(node.body, seq, var):
                if k + j >= 1:
                    top = "len(%s)%s" % (seq, f" + {k - 1}" if k > 1 else " - 1" if k == 0 else "")
                    index = f"{seq}[{var}{f' + {j}' if j else ''}]"
                    found.append((node.lineno, f"`{var}` goes up to {top}, so `{index}` (line {sub.lineno}) "
                                               "is past the end on the last iteration"))
        # while i <= len(seq): ... seq[i]
        if isinstance(node, ast.While) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
            t = node.test
            if isinstance(t.ops[0], ast.LtE) and isinstance(t.left, ast.Name):
                seq = _len_of(t.comparators[0])
                if seq and _index_uses(node.body, seq, t.left.id):
                    found.append((node.lineno, f"`{t.left.id} <= len({seq})` lets `{seq}[{t.left.id}]` "
                                               "run one past the end; use `<`"))
    return sorted(set(found))
