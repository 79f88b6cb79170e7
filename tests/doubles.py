"""Test doubles: every stand-in for a model, teacher, endpoint, environment or skill, in one place.

One naming rule, ``<What it stands in for>Double``, so a reader of any test knows at a glance which
objects are real. Doubles record what they were asked (``seen``, ``calls``, ``prompts``) because
most tests assert on what the code under test sent, not only on what came back.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hasp.pf import Intervention, InterventionType, ProgramFunction
from hasp.pf.library import Skill, SkillLibrary
from hasp.pf.skill_md import SkillSpec


# ----------------------------------------------------------------------------- model replies and policies
@dataclass
class ReplyDouble:
    """What ``LLMClient.chat`` returns: the text and its token usage."""

    text: str
    prompt_tokens: int = 10
    completion_tokens: int = 5
    latency_s: float = 0.0


class ScriptedPolicyDouble:
    """Answers with the scripted replies in order, then ``default``; an exception in the script is
    raised instead. Records every prompt (``seen``) and every call's keyword arguments (``calls``).
    Thread-safe, so it can stand behind a concurrent rollout."""

    def __init__(self, replies=(), *, default: str = "FINAL[unknown]", prompt_tokens: int = 10,
                 completion_tokens: int = 5):
        self.replies = list(replies)
        self.default = default
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens
        self.seen: list[list[dict[str, str]]] = []
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def chat(self, messages, **kw):
        with self._lock:
            self.seen.append([dict(m) for m in messages])
            self.calls.append(kw)
            r = self.replies.pop(0) if self.replies else self.default
        if isinstance(r, BaseException):
            raise r
        return ReplyDouble(r, self.prompt_tokens, self.completion_tokens)


class DialectPolicyDouble(ScriptedPolicyDouble):
    """A scripted policy that names its request dialect, as ``LLMClient.dialect`` does, so the loop's
    ``llm.constrained: auto`` can resolve against it."""

    def __init__(self, replies=(), dialect: str = "llamacpp", **kw):
        super().__init__(replies, **kw)
        self.dialect = dialect


class RolloutSamplerDouble:
    """The sampler RS and OPD call (``sample(questions, model_dir) -> trajectories``): answers each
    call with the next scripted batch (the last one repeats) and records the questions and the model
    folder it was asked to sample from, so a test can see which checkpoint each round used."""

    def __init__(self, *batches):
        self.batches = [list(b) for b in batches]
        self.calls: list[tuple[list[Any], Path]] = []

    def __call__(self, questions, model_dir):
        self.calls.append((list(questions), Path(model_dir)))
        return self.batches.pop(0) if len(self.batches) > 1 else list(self.batches[0])


class GoldPolicyDouble:
    """The policy of a post-training run: SEARCHes the question first, then answers it: the gold answer
    for the questions in ``correct``, a wrong name for the rest. Counts calls and records each call's
    keyword arguments (temperature, seed). Thread-safe."""

    def __init__(self, gold: dict[str, str], correct=(), *, wrong: str = "Nobody Known"):
        self.gold, self.correct, self.wrong = gold, set(correct), wrong
        self.calls = CallCounterDouble()
        self.kwargs: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def chat(self, messages, **kw):
        self.calls.hit()
        with self._lock:
            self.kwargs.append(kw)
        user = next((m["content"] for m in messages if m["role"] == "user"), "")
        q = next((q for q in self.gold if q in user), None)
        if not any(m["role"] == "assistant" for m in messages):
            return ReplyDouble(f"Thought: look it up\nAction: SEARCH[{q or 'the question'}]", 1, 1)
        answer = self.gold[q] if q in self.correct else self.wrong
        return ReplyDouble(f"Thought: I can answer.\nAction: FINAL[{answer}]", 1, 1)


class GridClientsDouble:
    """The model clients of an experiment grid (``hasp.flows.experiment.GridClients``): one policy double for
    every checkpoint, one student double; records which checkpoint folder each greedy policy, student
    and sampling call was asked for, with the sampling settings."""

    teacher = None
    started = False
    executor = None  # episodes on threads (runner.kind threads)

    def __init__(self, policy, student):
        self._policy, self._student = policy, student
        self.policy_dirs: list[Path] = []
        self.student_dirs: list[Path] = []
        self.sampled: list[tuple[Path, float, float]] = []

    def policy(self, folder):
        self.policy_dirs.append(Path(folder))
        return self._policy

    def student(self, folder):
        self.student_dirs.append(Path(folder))
        return self._student

    def sampler(self, rollout):
        import contextlib

        @contextlib.contextmanager
        def open_policy(model_dir):
            self.sampled.append((Path(model_dir), rollout.temperature, rollout.top_p))
            yield self._policy

        return open_policy

    def release_student(self):
        pass

    def close(self):
        pass


class SlowPolicyDouble(ScriptedPolicyDouble):
    """A scripted policy that takes ``delay_s`` per reply, for wall-clock budgets."""

    def __init__(self, replies=(), *, delay_s: float = 0.2, **kw):
        super().__init__(replies, **kw)
        self.delay_s = delay_s

    def chat(self, messages, **kw):
        time.sleep(self.delay_s)
        return super().chat(messages, **kw)


class PerQuestionPolicyDouble:
    """Per question (found in the first user message) a queue of scripted replies; records
    ``(question key, messages, kwargs)`` per call. Thread-safe."""

    def __init__(self, script: dict[str, list[str]]):
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: list[tuple[str, list[dict], dict]] = []
        self._lock = threading.Lock()

    def chat(self, messages, **kw):
        user = messages[1]["content"]
        key = next(k for k in self.script if k in user)
        with self._lock:
            self.calls.append((key, messages, kw))
            return ReplyDouble(self.script[key].pop(0), 0, 0)


class AnsweringPolicyDouble:
    """Answers ``FINAL[...]`` at once: the gold answer for the questions in ``correct``, ``wrong``
    for the rest; raises for the questions in ``fail``. Records which questions it was asked.
    Thread-safe."""

    def __init__(self, gold: dict[str, str], correct, fail=frozenset(), *, wrong: str = "Nowhere Special",
                 prompt_tokens: int = 11, completion_tokens: int = 3):
        self.gold, self.correct, self.fail, self.wrong = gold, set(correct), set(fail), wrong
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def chat(self, messages, **kw):
        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        q = next(q for q in self.gold if q in user)
        with self._lock:
            self.asked.append(q)
        if q in self.fail:
            raise ConnectionError("policy endpoint down (double)")
        answer = self.gold[q] if q in self.correct else self.wrong
        return ReplyDouble(f"Thought: I can answer.\nAction: FINAL[{answer}]", self.prompt_tokens,
                           self.completion_tokens)


class TimeoutPolicyDouble:
    """An endpoint that times out (after the client's retries) for chosen questions."""

    def __init__(self, fail_on: set[str], reply: str = "Thought: 6*7.\nFINAL[42]"):
        self.fail_on, self.reply = fail_on, reply

    def chat(self, messages, **kw):
        from hasp.llm.client import LLMError

        if any(q in messages[-1]["content"] for q in self.fail_on):
            raise LLMError("LLM endpoint http://127.0.0.1:9/v1 failed: APITimeoutError: Request timed out.")
        return ReplyDouble(self.reply, 11, 7)


class CallCounterDouble:
    """A thread-safe call count, shared by doubles that several workers call at once."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def hit(self) -> None:
        with self._lock:
            self.n += 1


class SearchingPolicyDouble:
    """The agent policy of a whole epoch: searches the question once, then answers a wrong name."""

    def __init__(self) -> None:
        self.calls = CallCounterDouble()

    def chat(self, messages, **kw):
        self.calls.hit()
        turns = sum(1 for m in messages if m["role"] == "assistant")
        if turns == 0:
            return ReplyDouble("Thought: look it up\nAction: SEARCH[founder company]", 1, 1)
        return ReplyDouble("Thought: I think I know\nAction: FINAL[Nobody Known]", 1, 1)


_GENERATED_PF = '''from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("{sid}")
class Generated(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and not ctx.get("has_read", False)

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text="Read a document first.",
                            reason="no read yet")
'''


class StudentDouble:
    """The student of an epoch: JSON failure summaries (Phase B), skill proposals (Phase C) and the
    numbered-option questions of the choices format and of a declared PF's revision (option 1)."""

    def __init__(self) -> None:
        self.calls = CallCounterDouble()

    def chat(self, messages, **kw):
        self.calls.hit()
        if "JSON" in messages[0]["content"]:
            return ReplyDouble(json.dumps({"category": "unverified_answer", "abstraction": "Answers without reading.",
                                           "trigger": "FINAL before any READ.", "intervention_hint": "Read first."}),
                               1, 1)
        if "number of one option" in messages[0]["content"]:
            return ReplyDouble("1", 1, 1)
        sid = re.search(r"Use (?:skill_id|SKILL_ID): (\S+)", messages[-1]["content"]).group(1)
        if "WHEN options" in messages[-1]["content"]:  # the declarative proposal format
            return ReplyDouble(f"SKILL_ID: {sid}\nDESCRIPTION: Read a shown document before answering.\n"
                               "WATCHES: FINAL\nWHEN: has_searched, no_read_yet\nREWRITE: READ best_unread_result\n"
                               "MAX_FIRES: 1\n", 1, 1)
        md = f"---\nskill_id: {sid}\nname: {sid.replace('_', '-')}\ndescription: Read before answering.\n---\nBody.\n"
        return ReplyDouble(f"```markdown\n{md}```\n```python\n{_GENERATED_PF.format(sid=sid)}```", 1, 1)

    def map_chat(self, batch, **kw):
        return [self.chat(m, **kw) for m in batch]


class OutageStudentDouble(StudentDouble):
    """The student behind an endpoint that answers 500 (after the client's retries) while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def chat(self, messages, **kw):
        if self.down:
            from hasp.llm.client import LLMError

            self.calls.hit()
            raise LLMError("LLM endpoint http://127.0.0.1:9/v1 (model 'student') failed after 4 attempts: "
                           "http 500: scripted 500", endpoint="http://127.0.0.1:9/v1", model="student",
                           kind="http 500", attempts=4)
        return super().chat(messages, **kw)


# ----------------------------------------------------------------------------- teachers
class ScriptedTeacherDouble:
    """A teacher that answers with fixed replies in order (the last one repeats; none means "").
    Offers both ``chat`` (with token usage) and ``generate`` (text only); records every prompt."""

    def __init__(self, *replies, prompt_tokens=20, completion_tokens=3):
        self.replies = list(replies) or [""]
        self.prompts: list[str] = []
        self.pt, self.ct = prompt_tokens, completion_tokens

    def chat(self, messages, max_tokens=None, temperature=None, **kw):
        return ReplyDouble(self.generate(messages), self.pt, self.ct)

    def generate(self, messages, max_tokens=256, temperature=0.0):
        self.prompts.append(messages[-1]["content"])
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


class GarbageTeacherDouble(ScriptedTeacherDouble):
    """Always answers something no strict parser accepts."""

    def __init__(self):
        super().__init__("Sure! Happy to help with that. Let me think step by step...")


class StructuredTeacherDouble:
    """A teacher client with ``LLMClient.chat``'s keywords (``json_schema`` among them): answers with
    the scripted replies in order (an exception in the script is raised; then ``default``) and
    records every request's messages (``seen``) and keywords (``calls``), so a test can see whether
    a request carried a schema."""

    def __init__(self, *replies, default: str = ""):
        self.replies, self.default = list(replies), default
        self.seen: list[list[dict[str, str]]] = []
        self.calls: list[dict[str, Any]] = []

    def chat(self, messages, *, temperature=None, max_tokens=None, stop=None, seed=None,
             response_format=None, grammar=None, json_schema=None):
        self.seen.append([dict(m) for m in messages])
        self.calls.append({"temperature": temperature, "max_tokens": max_tokens, "stop": stop, "seed": seed,
                           "response_format": response_format, "grammar": grammar, "json_schema": json_schema})
        r = self.replies.pop(0) if self.replies else self.default
        if isinstance(r, BaseException):
            raise r
        return ReplyDouble(r)


class PlainTeacherDouble(StructuredTeacherDouble):
    """A teacher whose ``chat`` takes only the plain keywords (no grammar, no schema)."""

    def chat(self, messages, *, temperature=None, max_tokens=None, stop=None, seed=None):
        return super().chat(messages, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)


class FailingTeacherDouble:
    """Every call raises ``error``, like an endpoint that is down after the client's retries."""

    def __init__(self, error: Exception | None = None):
        self.error = error or TimeoutError("teacher endpoint timed out")
        self.calls = 0

    def generate(self, messages, max_tokens=256, temperature=0.0):
        self.calls += 1
        raise self.error


class JudgeTeacherDouble:
    """The answer judge: CORRECT when the predicted answer equals a reference, a chatty unparseable
    reply for predictions in ``chatty``, an exception for those in ``broken``."""

    def __init__(self, chatty=(), broken=()):
        self.chatty, self.broken = set(chatty), set(broken)
        self.calls = 0
        self._lock = threading.Lock()

    def chat(self, messages, max_tokens=8, temperature=0.0, **kw):
        with self._lock:
            self.calls += 1
        text = messages[-1]["content"]
        refs = re.search(r"Reference answers: (.*)\n", text).group(1).split(" | ")
        pred = re.search(r"Predicted answer: (.*)\n", text).group(1)
        if pred in self.broken:
            raise TimeoutError("judge timed out (double)")
        if pred in self.chatty:
            return ReplyDouble("Well, it is probably right, I would say CORRECT.", 11, 3)
        return ReplyDouble("CORRECT" if pred in refs else "INCORRECT.", 11, 3)


class SnippetTeacherDouble:
    """The snippet writer: a 'snippet' naming the titles it was shown; records every request."""

    def __init__(self, text: str | None = None):
        self.text, self.requests = text, []

    def generate(self, messages, max_tokens=256, temperature=0.0):
        self.requests.append((messages, max_tokens))
        if self.text is not None:
            return self.text
        titles = re.findall(r"^\[\d+\] (.+)$", messages[-1]["content"], flags=re.M)
        return "Relevant: " + "; ".join(titles)


# ----------------------------------------------------------------------------- environments and runners
class OneDocEnvDouble:
    """A search environment that knows one document (Quellbrook, founded by Mara Eskel)."""

    def search(self, q):
        return "1. [d1] Quellbrook: founded by Mara Eskel.", [{"id": "d1", "title": "Quellbrook"}]

    def read(self, ref):
        return "Quellbrook was founded by Mara Eskel.", {"id": "d1", "contents": "founded by Mara Eskel"}


class ValRunnerDouble:
    """The val rollout of the gate: EM depends on which generated skill the library holds."""

    def __init__(self, em_with: dict[str, float]):
        self.em_with = em_with
        self.calls: list[str] = []

    def __call__(self, library: Path, label: str) -> dict:
        gen = [d.name.rsplit("-v", 1)[0].replace("-", "_") for d in (library / "generated").iterdir()]
        assert len(gen) == 1, gen  # exactly the library plus this one candidate
        self.calls.append(gen[0])
        return {"em": self.em_with[gen[0]], "f1": self.em_with[gen[0]] + 0.1, "n": 10}


def gated_candidate(library: Path) -> str | None:
    """The skill id of the one generated candidate a gate's library copy holds (None: the library alone)."""
    gen_dir = library / "generated"
    gen = [d.name.rsplit("-v", 1)[0].replace("-", "_") for d in gen_dir.iterdir()] if gen_dir.is_dir() else []
    assert len(gen) <= 1, gen  # the library alone, or it plus exactly one candidate
    return gen[0] if gen else None


class AnchorRunnerDouble:
    """The anchors run of the gate (``run(library, label) -> (summary, {anchor id: EM})``): every anchor
    passes except those in ``fail``, and a library holding the generated skill ``sid`` also fails
    ``breaks[sid]``. Records which skill (None for the library alone) each run had."""

    def __init__(self, ids, *, fail=(), breaks: dict[str, set[str]] | None = None):
        self.ids, self.fail, self.breaks = list(ids), set(fail), breaks or {}
        self.calls: list[str | None] = []

    def __call__(self, library: Path, label: str):
        sid = gated_candidate(library)
        self.calls.append(sid)
        bad = self.fail | self.breaks.get(sid or "", set())
        ems = {i: 0.0 if i in bad else 1.0 for i in self.ids}
        return {"n": len(self.ids), "em": sum(ems.values()) / len(self.ids)}, ems


class JudgeRunnerDouble:
    """The judge gate's run (``run(library, label) -> (summary, {qid: judged score}, judge counts)``):
    every held-out answer is judged supported except those in ``unsupported``; a library holding the
    generated skill ``sid`` also loses ``breaks[sid]`` and gains ``fixes[sid]``; ``unjudged`` questions
    get no verdict. Records which skill (None for the library alone) each run had."""

    def __init__(self, ids, *, unsupported=(), breaks=None, fixes=None, unjudged=()):
        self.ids, self.unsupported, self.unjudged = list(ids), set(unsupported), set(unjudged)
        self.breaks, self.fixes = breaks or {}, fixes or {}
        self.calls: list[str | None] = []

    def __call__(self, library: Path, label: str):
        sid = gated_candidate(library)
        self.calls.append(sid)
        bad = (self.unsupported | self.breaks.get(sid or "", set())) - self.fixes.get(sid or "", set())
        scores = {i: 0.0 if i in bad else 1.0 for i in self.ids if i not in self.unjudged}
        return ({"n": len(self.ids)}, scores,
                {"asked": len(self.ids), "unsupported": len(bad), "errors": len(self.unjudged)})


# ----------------------------------------------------------------------------- HTTP endpoints
class OpenAIEndpointDouble:
    """Answers ``POST /v1/chat/completions`` on 127.0.0.1, following a script of faults.

    ``statuses`` are played for the first requests, then 200 forever (``always`` overrides). Each
    entry is an HTTP status or a fault: ``"hang"`` (no reply until ``hang_s`` passes or the double
    closes), ``"garbage"`` (a 200 whose JSON body is not JSON), ``"no-choices"`` (a 200 with an
    empty ``choices`` list). A plain 200 carries ``reply(body)`` (default: the last user message
    echoed), with usage 10 prompt / 5 completion tokens. It counts requests and the peak number in
    flight (each request sleeps ``delay_s`` inside the count).
    """

    def __init__(self, statuses: list[int | str] | None = None, *, always: int | str | None = None,
                 delay_s: float = 0.0, hang_s: float = 120.0, reply: Callable[[dict], str] | None = None,
                 port: int = 0) -> None:
        self.statuses = list(statuses or [])
        self.always = always
        self.delay_s, self.hang_s = delay_s, hang_s
        self.reply = reply or (lambda body: body["messages"][-1]["content"])
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIEndpointDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def _next_status(self, body: dict) -> int | str:
        with self._lock:
            self.requests += 1
            self.bodies.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.always is not None:
                return self.always
            return self.statuses.pop(0) if self.statuses else 200

    def _payload(self, status: int | str, body: dict) -> tuple[int, bytes]:
        if status == "hang":
            self._closing.wait(self.hang_s)
            return 200, b""
        if status == "garbage":
            return 200, b"<html>502 Bad Gateway</html> not json {"
        choices = [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": self.reply(body)}}]
        if status == 200 or status == "no-choices":
            return 200, json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                    "choices": choices if status == 200 else [],
                                    "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                              "total_tokens": 15}}).encode()
        assert isinstance(status, int), status
        return status, json.dumps({"error": {"message": f"scripted {status}", "type": "server_error"}}).encode()

    def _other(self, method: str, path: str, body: dict | None) -> tuple[int, bytes]:
        """Requests to any path but chat completions: 404, as a server without that route answers."""
        return 404, json.dumps({"detail": "Not Found"}).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                self._send(*double._other("GET", self.path, None))

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.endswith("/chat/completions"):
                    self._send(*double._other("POST", self.path, body))
                    return
                status = double._next_status(body)
                try:
                    time.sleep(double.delay_s)
                    code, data = double._payload(status, body)
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("retry-after-ms", "10")  # keep the client's backoff short
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up on a hung request
                    pass
                finally:
                    with double._lock:
                        double.in_flight -= 1

        return Handler


class RoleAwareEndpointDouble(OpenAIEndpointDouble):
    """An OpenAI chat endpoint that plays three roles by system prompt: the judge (always
    'INCORRECT'), the snippet writer (a fixed summary) and the policy (FINAL at once)."""

    REPLIES = {"judge": "INCORRECT", "snippet": "The documents name a city.",
               "policy": "Thought: done\nAction: FINAL[Paris]"}

    def __init__(self) -> None:
        self.roles: list[str] = []
        super().__init__(reply=self._play)

    def _play(self, body: dict) -> str:
        system = body["messages"][0]["content"]
        role = "judge" if "grade" in system else "snippet" if "research agent" in system else "policy"
        with self._lock:
            self.roles.append(role)
        return self.REPLIES[role]


class SelectiveOutageEndpointDouble(OpenAIEndpointDouble):
    """A policy endpoint that answers ``FINAL[Paris]`` at once, except that every request whose
    messages mention one of ``down_for`` gets ``fault`` (default a 500; ``"hang"``: no reply): an
    outage that hits some questions only."""

    def __init__(self, down_for, fault: int | str = 500) -> None:
        self.down_for, self.fault = list(down_for), fault
        super().__init__(reply=lambda body: "Thought: done\nAction: FINAL[Paris]")

    def _next_status(self, body: dict) -> int | str:
        status = super()._next_status(body)
        text = " ".join(str(m.get("content", "")) for m in body["messages"])
        return self.fault if any(q in text for q in self.down_for) else status


class ConstraintRefusingEndpointDouble(OpenAIEndpointDouble):
    """An OpenAI chat endpoint that refuses constrained requests the way llama.cpp's server refuses a
    grammar it cannot parse: HTTP 400 with ``message`` whenever the body carries one of ``refused``
    (body fields). Every other request is answered by ``reply`` (default: a FINAL at once)."""

    def __init__(self, refused=("grammar",), *,
                 message: str = "Failed to initialize samplers: failed to parse grammar",
                 reply: Callable[[dict], str] | None = None) -> None:
        self.refused, self.message = tuple(refused), message
        super().__init__(reply=reply or (lambda body: "Thought: done\nAction: FINAL[Paris]"))

    def _payload(self, status: int | str, body: dict) -> tuple[int, bytes]:
        if status == 200 and any(k in body for k in self.refused):
            return 400, json.dumps({"error": {"code": 400, "message": self.message,
                                              "type": "invalid_request_error"}}).encode()
        return super()._payload(status, body)


class VLLMEndpointDouble(OpenAIEndpointDouble):
    """``vllm serve <base> --enable-lora``: ``GET /v1/models`` lists the base and every adapter (the
    adapter with ``parent`` = base, as vLLM does), ``POST /v1/load_lora_adapter`` registers one at run
    time (404 unless ``runtime_lora``, as without VLLM_ALLOW_RUNTIME_LORA_UPDATING; 400 when the name
    is taken), and a chat request for a model it does not serve gets vLLM's 404. ``calls`` records
    every (method, path, body); the chat bodies are in ``bodies`` as for the parent double."""

    def __init__(self, base: str, adapters: dict[str, str] | None = None, *, runtime_lora: bool = True,
                 reply: Callable[[dict], str] | None = None, port: int = 0) -> None:
        self.base, self.adapters, self.runtime_lora = base, dict(adapters or {}), runtime_lora
        self.calls: list[tuple[str, str, dict | None]] = []
        super().__init__(reply=reply or (lambda body: "Thought: done\nAction: FINAL[Paris]"), port=port)

    def models(self) -> list[str]:
        return [self.base, *self.adapters]

    def _other(self, method: str, path: str, body: dict | None) -> tuple[int, bytes]:
        with self._lock:
            self.calls.append((method, path, body))
            if method == "GET" and path == "/health":
                return 200, b""
            if method == "GET" and path == "/v1/models":
                data = [{"id": self.base, "object": "model", "root": self.base, "parent": None}]
                data += [{"id": n, "object": "model", "root": p, "parent": self.base} for n, p in self.adapters.items()]
                return 200, json.dumps({"object": "list", "data": data}).encode()
            if method == "POST" and path == "/v1/load_lora_adapter" and self.runtime_lora:
                assert body is not None
                name = body["lora_name"]
                if name in self.adapters:
                    return 400, json.dumps({"error": {"message": f"The lora adapter '{name}' has already been "
                                                                f"loaded.", "code": 400}}).encode()
                self.adapters[name] = body["lora_path"]
                return 200, f"Success: LoRA adapter '{name}' added successfully.".encode()
        return super()._other(method, path, body)

    def _next_status(self, body: dict) -> int | str:
        status = super()._next_status(body)
        with self._lock:
            self.calls.append(("POST", "/v1/chat/completions", body))
        return status if body.get("model") in self.models() else 404

    def _payload(self, status: int | str, body: dict) -> tuple[int, bytes]:
        if status == 404:
            return 404, json.dumps({"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                              "type": "NotFoundError", "code": 404}}).encode()
        return super()._payload(status, body)


def vllm_console_script_double(bin_dir: Path) -> Path:
    """An executable ``bin_dir/vllm``, as vLLM installed in an environment of its own puts on PATH:
    ``vllm serve <base> [--lora-modules name=path ...] --port N ...`` serves ``VLLMEndpointDouble``
    on that port (adapters registered by name) until it is stopped, and appends its argv to
    ``bin_dir/argv.jsonl``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "vllm"
    exe.write_text(f"""#!{sys.executable}
import json, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from doubles import VLLMEndpointDouble
args = sys.argv[1:]
with open({str(bin_dir / "argv.jsonl")!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
assert args[0] == "serve", args
mods = []
if "--lora-modules" in args:
    for a in args[args.index("--lora-modules") + 1:]:
        if a.startswith("--"):
            break
        mods.append(a.split("=", 1))
with VLLMEndpointDouble(args[1], dict(mods), port=int(args[args.index("--port") + 1])):
    while True:
        time.sleep(1)
""")
    exe.chmod(0o755)
    return exe


class RetrieverServerDouble:
    """A stdlib HTTP server answering POST /retrieve with ``respond(n, body) -> (status, payload)``."""

    def __init__(self, respond: Callable[[int, dict], tuple[int, Any]]) -> None:
        self.bodies: list[dict] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.bodies.append(body)
                status, payload = respond(len(double.bodies), body)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ----------------------------------------------------------------------------- skills
class RewritingPFDouble(ProgramFunction):
    """Rewrites every SEARCH; asks the teacher when given one (no internal try/except)."""

    skill_id = "retrieval_failure"
    needs_teacher = True

    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH"

    def intervene(self, ctx, action_type, arg, teacher=None):
        if teacher is not None:
            q = teacher.generate([{"role": "user", "content": arg}], max_tokens=16).strip()
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                                new_action_arg=q, reason="teacher query")
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=arg.split()[0], reason="deterministic query")


class VotingPFDouble(ProgramFunction):
    """A handler-only PF: never fires on steps, votes against every FINAL with its reason."""

    handler_kind = "code"

    def __init__(self, skill_id, kind="code", raises=False):
        self.skill_id = skill_id
        self.handler_kind = kind
        self.raises = raises
        self.asked = 0

    def should_activate(self, ctx, action_type, arg):
        return False

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention()

    def check_final(self, ctx, answer, teacher=None):
        self.asked += 1
        if self.raises:
            raise RuntimeError("handler bug")
        if self.handler_kind == "llm":
            assert teacher is not None
            return teacher.generate([{"role": "user", "content": answer}]) or None
        return f"{self.skill_id} doubts {answer}"


class ContextRecordingPFDouble(ProgramFunction):
    """Never fires; records a copy of every step context it is asked about (``seen``), PF-private keys
    left out, so a test can compare what a PF saw with what a replay rebuilds."""

    skill_id = "context_recorder"

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def should_activate(self, ctx, action_type, arg):
        self.seen.append({k: v for k, v in ctx.items() if not k.startswith("_")})
        return False

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention()


class CheapPFDouble(ProgramFunction):
    """A cheap step PF for the latency benchmark: fires on READ only."""

    def __init__(self, skill_id):
        self.skill_id = skill_id

    def should_activate(self, ctx, action_type, arg):
        return action_type == "READ" and ctx["read_count"] > 5

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text="x")


def skill(skill_id, pf=None, *, priority=0.5, modes=("all",), keywords=(), phases=None, summary=None):
    """An in-memory skill around ``pf`` (no folder on disk)."""
    spec = SkillSpec(skill_id=skill_id, priority=priority, applicable_modes=list(modes),
                     trigger_keywords=list(keywords), phases=phases or {},
                     system_summary=summary or f"summary of {skill_id}", description=f"does {skill_id}")
    if pf is not None:
        pf.skill_id = skill_id
    return Skill(spec=spec, path=Path(f"/virtual/{skill_id}"), version=1, generated=False, pf=pf)


def library(*skills):
    """An in-memory search library, ordered the way the loader orders one."""
    lib = SkillLibrary(domain="search", root=Path("/virtual"), skills=list(skills))
    lib.skills.sort(key=lambda s: (-s.spec.priority, s.skill_id))
    return lib


# ----------------------------------------------------------------------------- distributed rollouts
class ReadThenAnswerReplyDouble:
    """The reply of a greedy search policy behind an endpoint double: SEARCH the question, READ the first
    hit, then answer with the first words of what was read. Every step depends on the retriever's
    results, so two runs agree only if they searched the same index the same way."""

    def __call__(self, body: dict) -> str:
        last = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        text = last.removeprefix("Observation: ").split("\nNext Thought", 1)[0]
        if last.startswith("Question: "):
            return f"Thought: look it up\nAction: SEARCH[{text.removeprefix('Question: ')[:80]}]"
        hit = re.search(r"\[(d\d+)\]", text)
        if hit and text.startswith("1. "):
            return f"Thought: read the first hit\nAction: READ[{hit.group(1)}]"
        words = re.sub(r"\[d\d+\]", "", text).split()
        return f"Thought: answer\nAction: FINAL[{' '.join(words[:2]) or 'unknown'}]"


class ReadThenAnswerPolicyDouble:
    """A greedy search policy in this process, replying as ``ReadThenAnswerReplyDouble`` does: each
    reply is a function of the conversation alone, so concurrent episodes and two runs of the same
    episodes get the same replies. Records every call's keyword arguments (``calls``). Thread-safe."""

    def __init__(self) -> None:
        self.reply = ReadThenAnswerReplyDouble()
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def chat(self, messages, **kw):
        with self._lock:
            self.calls.append(kw)
        return ReplyDouble(self.reply({"messages": messages}), 7, 3)


@dataclass(frozen=True)
class KillOnceSpecDouble:
    """An episode spec whose episode ``qid`` kills its own worker process the first time it runs (the
    ``marker`` file says it already happened); every other episode runs ``inner`` unchanged."""

    inner: Any
    qid: str
    marker: Path

    def build(self):
        import os
        import signal

        from hasp.agent.remote import BuiltEpisode

        built = self.inner.build()

        def run(item):
            if item.id == self.qid and not self.marker.exists():
                self.marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            return built.run(item)

        return BuiltEpisode(run, built.close)

    def failed(self, item, error):
        return self.inner.failed(item, error)


@dataclass(frozen=True)
class SlowBuildSpecDouble:
    """An episode spec whose build takes ``build_s`` and is counted in the file ``builds`` (one line per
    build), so a test sees how often a process built it; its episode echoes the item."""

    builds: Path
    build_s: float = 0.3

    def build(self):
        from hasp.agent.remote import BuiltEpisode

        with open(self.builds, "a", encoding="utf-8") as f:
            f.write("built\n")
        time.sleep(self.build_s)
        return BuiltEpisode(lambda item: item)

    def failed(self, item, error):
        return None


def flow_params_with_doubles(work: Path, experiment: str, **evolve: Any) -> Path:
    """``work/params.yaml`` for a flow whose clients are doubles: a 10-question epoch, 3 steps, an
    endpoint no request reaches, no LoRA step (it needs real weights), ``evolve`` over the defaults."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["data"].update(n_questions=10)
    params["agent"].update(max_steps=3)
    params["llm"].update(base_url="http://127.0.0.1:9/v1", model="double-model", max_concurrency=2)
    params["evolve"].update(evolve)
    params["train"].update(enabled=False)
    params["tracking"]["experiment"] = experiment
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    return work / "params.yaml"


def flow_with_doubles(mp: Any, work: Path, seeds: Path) -> dict[str, Any]:
    """Copy the seed library to ``work/skills/search`` and make the evolution flow's clients doubles
    (``SearchingPolicyDouble`` acts and serves as the trained policy, ``StudentDouble`` proposes)."""
    import shutil

    import hasp.flows.evolve as fe

    shutil.copytree(seeds, work / "skills" / "search", ignore=shutil.ignore_patterns("__pycache__"))
    doubles = {"policy": SearchingPolicyDouble(), "student": StudentDouble()}
    mp.setattr(fe, "make_clients", lambda p, out: fe.Clients(policy=doubles["policy"], student=doubles["student"],
                                                             trained=doubles["policy"], teacher=None))
    return doubles
