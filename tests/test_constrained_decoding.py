"""Decoding that cannot leave the format, without a model: the reply grammars agree with the
parsers (a grammar is read as a regular expression by ``gbnf_regex``), each dialect's request shape,
the logged and counted fallback when an endpoint refuses a constraint, the wiring through the agent
loop and the single-step domains, and Phase C's per-cluster JSON schema.
``tests/test_constrained_model.py`` runs the same grammars and schema on llama.cpp with the real model.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import re

import jsonschema
import pytest
from doubles import (ConstraintRefusingEndpointDouble, DialectPolicyDouble, OneDocEnvDouble, OpenAIEndpointDouble,
                     ScriptedPolicyDouble, VLLMEndpointDouble)
from gbnf_regex import accepts
from test_declarative_proposals import cluster_of, invented_read_traj

from hasp.agent.loop import AgentConfig, agent_config, load_prompts, run_episode
from hasp.agent.parser import (ACTION_LINE_TOKENS, ACTIONS, MAX_ARG_CHARS, MAX_THOUGHT_CHARS, PLACEHOLDERS,
                               ParsedAction, action_grammar, parse_action)
from hasp.agent.replay import replay
from hasp.config import Params
from hasp.domains.code.task import CODE_GRAMMAR, extract_code
from hasp.domains.math.datasets import MathItem
from hasp.episode.domains import MathDomain
from hasp.episode.spec import episode_spec
from hasp.domains.math.task import MAX_ANSWER_CHARS, answer_grammar, split_output
from hasp.evolve.declarative import (REPLY_SCHEMA, Menus, check_reply, propose_declarative, reply_format_for,
                                     reply_schema)
from hasp.llm import gbnf, structured
from hasp.llm.client import LLMClient, LLMConfig, LLMError
from hasp.pf.vocabulary import CONDITIONS

GRAMMAR = action_grammar()
USER = [{"role": "user", "content": "Question: where?\nNext Thought and Action:"}]
ARGS = ["Paris", "Ana Morro", "Ana Morro's birthplace", "d40", "doc0012", "1990", "(1+1+1)*8", "\\frac{1}{2}",
        "Telvik, Norway", "São Paulo", "what year: 1990?", "a-b_c.d^e", "Answers", "docs", "query builder",
        "doc idx", "....", "<b>bold</b>", "{x}", "x" * MAX_ARG_CHARS]


def _text(name: str, arg: str, thought: str | None) -> str:
    return (f"Thought: {thought}\n" if thought is not None else "") + f"Action: {name}[{arg}]"


# ----------------------------------------------------------------------------- the action grammar

@pytest.mark.parametrize("name,arg,thought", list(itertools.product(
    ACTIONS, ARGS, [None, "", "I need the founder of Brightwell Labs.", "t" * MAX_THOUGHT_CHARS])))
def test_every_canonical_action_is_admitted_and_parses_back_to_itself(name, arg, thought):
    text = _text(name, arg, thought)
    assert accepts(GRAMMAR, text)
    got = parse_action(text)
    assert isinstance(got, ParsedAction) and (got.type, got.arg) == (name, arg)


def test_the_prompt_demonstration_is_in_the_grammar():
    turns = [m["content"] for m in load_prompts()["demo"] if m["role"] == "assistant"]
    assert turns and all(accepts(GRAMMAR, t) for t in turns)


@pytest.mark.parametrize("text", [
    "The answer is Paris.", "Paris", "I think I should search.", "FINAL[Paris]", "Action: FINAL: Paris",
    "Action: Final[Paris]", "Action: FINAL(Paris)", "Action: FINAL[]", "Action: FINAL[Paris",
    "Action: FINAL[Paris]\nThought: more", "Action: FINAL[Paris] because", "Thought: a\nThought: b\nAction: FINAL[x]",
    "Thought: use SEARCH[x] first\nAction: FINAL[y]", "Thought: Action: SEARCH: x\nAction: FINAL[y]",
    "Thought: read (d1)\nAction: FINAL[y]", 'Action: FINAL["Paris"]', "Action: FINAL[ Paris ]",
    "Action: SEARCH[a  b]", "Action: SEARCH[a\tb]", "Action: FINAL[Paris ']", "Action: FINAL['Paris]",
    "Action: FINAL[" + "x" * (MAX_ARG_CHARS + 1) + "]",
    "Thought: " + "x" * (MAX_THOUGHT_CHARS + 1) + "\nAction: FINAL[y]",
    *[f"Action: FINAL[{p}]" for p in sorted(PLACEHOLDERS)],
    *[f"Action: READ[{p.upper()}]" for p in sorted(PLACEHOLDERS)],
    "Action: SEARCH[Query]", "Action: READ[Doc Id]", "Action: READ[DOC_id]",
])
def test_prose_placeholders_and_other_spellings_are_outside_the_grammar(text):
    assert not accepts(GRAMMAR, text)


def _canonical(arg: str) -> bool:
    """What the grammar promises to admit: an argument the parser reads back unchanged, without
    brackets, line breaks or quotes but an inner apostrophe, within the length bound, not a placeholder."""
    return (0 < len(arg) <= MAX_ARG_CHARS and not re.search(r"[\[\]\n\r\t\"`]", arg)
            and not re.search(r"^[ ']|[ ']$|[ '][ ']", arg) and arg.lower() not in PLACEHOLDERS)


def test_whatever_the_grammar_admits_parses_to_its_action_line_and_it_admits_every_canonical_one():
    rng = random.Random(0)
    pieces = ["answer", "ANSWER", "doc", "id", "_", " ", "  ", "'", '"', "...", "…", "[", "]", "(x)", "Paris",
              "1990", ":", "\n", "query", "-", "^", "\\", "Ünïcode", "`"]
    thoughts = [None, "", "ok", "I need SEARCH[x]", "note: y", "plain words here", "a (b)"]
    admitted = 0
    for _ in range(3000):
        arg = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))
        thought, name = rng.choice(thoughts), rng.choice(ACTIONS)
        text = _text(name, arg, thought)
        ok = accepts(GRAMMAR, text)
        thought_ok = thought is None or not re.search(r"[\n\[\](){}<>:]", thought)
        assert ok == (thought_ok and _canonical(arg)), text
        if ok:
            admitted += 1
            got = parse_action(text)
            assert isinstance(got, ParsedAction) and (got.type, got.arg) == (name, arg), text
    assert admitted > 300


def test_the_thought_leaves_the_action_line_room_in_the_reply_budget():
    """A token holds at least one character: a thought of (budget - ACTION_LINE_TOKENS) characters
    cannot use up the budget before the action starts."""
    g = action_grammar(max_tokens=64)
    room = 64 - ACTION_LINE_TOKENS
    assert accepts(g, "Thought: " + "1" * room + "\nAction: FINAL[1]")
    assert not accepts(g, "Thought: " + "1" * (room + 1) + "\nAction: FINAL[1]")
    tiny = action_grammar(max_tokens=ACTION_LINE_TOKENS)
    assert accepts(tiny, "Action: READ[d1]") and not accepts(tiny, "Thought: \nAction: READ[d1]")
    assert action_grammar(max_tokens=1000) == GRAMMAR  # the character cap holds on a large budget


def test_the_answer_only_grammar_admits_final_alone():
    final = action_grammar(("FINAL",))
    assert accepts(final, "Thought: done\nAction: FINAL[Telvik]") and accepts(final, "Action: FINAL[1961]")
    assert not accepts(final, "Action: SEARCH[Telvik]") and not accepts(final, "Action: READ[d40]")
    with pytest.raises(ValueError, match="action names must be upper-case words"):
        action_grammar(("ask",))
    assert accepts(action_grammar(("TO_KM", "FINAL")), "Action: TO_KM[3 miles]")  # a task's own tool


@pytest.mark.parametrize("text", ["answer: no steps are left", "answer_1961", "Answer Telvik", "ANSWERS",
                                  "answer"])
def test_the_answer_only_argument_cannot_start_with_the_placeholder_word(text):
    assert not accepts(action_grammar(("FINAL",)), f"Action: FINAL[{text}]")
    assert accepts(action_grammar(), f"Action: FINAL[{text}]") is (text.lower() != "answer")


@pytest.mark.parametrize("text", ["answe", "an answer", "Ansbach", "1961 answer", "a"])
def test_the_answer_only_argument_may_share_letters_with_the_placeholder(text):
    assert accepts(action_grammar(("FINAL",)), f"Action: FINAL[{text}]")


def test_gbnf_pieces_are_written_in_escapes_llama_cpp_reads():
    assert gbnf.literal('say "hi"\n\\') == '"say \\"hi\\"\\n\\\\"'
    assert gbnf.char_class("^-]") == "[\\x2D\\]\\x5E]" and gbnf.char_class("a", negated=True) == "[^a]"
    with pytest.raises(ValueError, match="not a string of words"):
        gbnf.any_word_but(["doc  id"], banned="[]", separators=" ", prefix="x", rest="x-rest")


# ----------------------------------------------------------------------------- math and code formats

@pytest.mark.parametrize("text,answer", [
    ("FINAL[42]", "42"), ("6*7 = 42.\nFINAL[42]", "42"), ("Halve it.\nStill \\frac{1}{2}.\nFINAL[\\frac{1}{2}]",
                                                          "\\frac{1}{2}"),
    ("Use 8*3.\nFINAL[(1+1+1)*8]", "(1+1+1)*8"),
])
def test_a_math_reply_the_grammar_admits_has_the_answer_split_output_reads(text, answer):
    g = answer_grammar(256)
    assert accepts(g, text) and split_output(text)[1] == answer


@pytest.mark.parametrize("text", [
    "The answer is 42.", "FINAL[42] done", "FINAL[]", "FINAL[ 42]", "Try [1, 2].\nFINAL[3]", "x\nFINAL[4\n2]",
    "FINAL[" + "1" * (MAX_ANSWER_CHARS + 1) + "]", "x" * 400 + "\nFINAL[1]",
])
def test_the_math_grammar_refuses_replies_without_one_final_answer_line(text):
    assert not accepts(answer_grammar(256), text)


def test_the_math_reasoning_bound_leaves_room_for_the_answer_in_the_reply_budget():
    assert answer_grammar(64) != answer_grammar(256)
    short = answer_grammar(64)
    assert accepts(short, "x" * 20 + "\nFINAL[1]") and not accepts(short, "x" * 60 + "\nFINAL[1]")


def test_a_code_reply_the_grammar_admits_is_one_python_block_extract_code_reads():
    code = "def add(a, b):\n    s = `1` if a else ``\n    return a + b"
    text = f"```python\n{code}\n```"
    assert accepts(CODE_GRAMMAR, text) and extract_code(text, "add") == code
    for bad in ("Here is the code:\n" + text, text + "\nDone.", "```python\nx = '```'\n```", "def add(a, b): ..."):
        assert not accepts(CODE_GRAMMAR, bad)


# ----------------------------------------------------------------------------- dialects

def test_each_dialect_says_a_constraint_its_own_way():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert structured.encode("llamacpp", grammar="root ::= \"x\"").body == {"grammar": 'root ::= "x"'}
    assert structured.encode("llamacpp", json_schema=schema).body == {"json_schema": schema}
    v = structured.encode("vllm", grammar="g")
    assert v.body == {"structured_outputs": {"grammar": "g"}} and v.response_format is None
    vs = structured.encode("vllm", json_schema=schema)
    assert vs.body == {} and vs.response_format == {"type": "json_schema",
                                                    "json_schema": {"name": "reply", "schema": schema}}
    o = structured.encode("openai", grammar="g")
    assert not o.sent and "no grammar" in o.dropped
    assert structured.encode("openai", json_schema=schema).response_format == vs.response_format
    assert not structured.encode("openai").kind and not structured.encode("llamacpp").sent
    with pytest.raises(ValueError, match="not both"):
        structured.encode("llamacpp", grammar="g", json_schema=schema)
    with pytest.raises(ValueError, match="unknown dialect"):
        structured.encode("tgi", grammar="g")
    with pytest.raises(ValueError, match="dialect"):
        LLMConfig(base_url="http://x/v1", model="m", dialect="tgi")


@pytest.mark.parametrize("setting,dialect,actions,json_", [
    ("auto", "llamacpp", True, True), ("auto", "vllm", True, True), ("auto", "openai", False, False),
    ("actions", "openai", True, True), ("json", "llamacpp", False, True), ("off", "llamacpp", False, False),
])
def test_llm_constrained_resolves_against_the_dialect(setting, dialect, actions, json_):
    assert structured.constrains_actions(setting, dialect) is actions
    assert structured.constrains_json(setting, dialect) is json_


def test_backends_name_their_dialect_and_clients_that_do_not_say_are_openai():
    backends = ("llamacpp", "vllm", "transformers")
    assert [structured.backend_dialect(b) for b in backends] == ["llamacpp", "vllm", "openai"]
    assert structured.dialect_of(ScriptedPolicyDouble()) == "openai"
    assert structured.dialect_of(LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model="m",
                                                     dialect="vllm"))) == "vllm"


def _client(url: str, **kw) -> LLMClient:
    return LLMClient(LLMConfig(base_url=url, model="m", timeout_s=10.0, max_retries=0, **kw))


def test_a_llamacpp_request_carries_the_grammar_in_its_body_beside_the_configured_fields():
    schema = {"type": "object"}
    with OpenAIEndpointDouble() as ep:
        client = _client(ep.base_url, dialect="llamacpp", extra_body={"lora": [{"id": 0, "scale": 1.0}]})
        client.chat(USER, grammar=GRAMMAR)
        client.chat(USER, json_schema=schema)
        client.chat(USER)
    assert ep.bodies[0]["grammar"] == GRAMMAR and ep.bodies[0]["lora"] == [{"id": 0, "scale": 1.0}]
    assert ep.bodies[1]["json_schema"] == schema and "grammar" not in ep.bodies[1]
    assert "grammar" not in ep.bodies[2] and "json_schema" not in ep.bodies[2]
    assert (client.usage.constrained, client.constraint_fallbacks) == (2, 0)


def test_a_vllm_request_has_the_shape_the_vllm_double_takes():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with VLLMEndpointDouble("m") as ep:
        client = _client(ep.base_url, dialect="vllm")
        client.chat(USER, grammar=GRAMMAR)
        client.chat(USER, json_schema=schema)
    assert ep.bodies[0]["structured_outputs"] == {"grammar": GRAMMAR}
    assert not any(k.startswith("guided_") or k == "grammar" for k in ep.bodies[0])
    assert ep.bodies[1]["response_format"] == {"type": "json_schema",
                                               "json_schema": {"name": "reply", "schema": schema}}
    assert client.usage.constrained == 2


def test_the_openai_dialect_sends_no_grammar_and_counts_each_request_that_went_without(caplog):
    with OpenAIEndpointDouble() as ep, caplog.at_level(logging.WARNING, logger="hasp.llm.client"):
        client = _client(ep.base_url)
        client.chat(USER, grammar=GRAMMAR)
        client.chat(USER, grammar=GRAMMAR)
    assert all("grammar" not in b and "structured_outputs" not in b for b in ep.bodies)
    assert client.constraint_fallbacks == 2 and client.usage.constrained == 0
    assert len([r for r in caplog.records if "grammar not applied" in r.getMessage()]) == 1


def test_a_refused_grammar_is_one_warning_then_unconstrained_answers_counted_each_time(caplog):
    with ConstraintRefusingEndpointDouble() as ep, caplog.at_level(logging.WARNING, logger="hasp.llm.client"):
        client = _client(ep.base_url, dialect="llamacpp", reply_cache=False)  # every request reaches the server
        replies = [client.chat(USER, grammar=GRAMMAR).text for _ in range(3)]
        plain = client.chat(USER)
    assert replies == ["Thought: done\nAction: FINAL[Paris]"] * 3 and plain.text == replies[0]
    # the first request is refused and sent again without the grammar; the refusal is remembered
    assert ep.requests == 5 and "grammar" in ep.bodies[0] and all("grammar" not in b for b in ep.bodies[1:])
    assert client.constraint_fallbacks == 3 and client.usage.constrained == 0 and client.usage.requests == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "failed to parse grammar" in warnings[0] and "constraint_fallbacks" in warnings[0]


def test_a_refused_schema_falls_back_too_but_other_bad_requests_still_fail():
    with ConstraintRefusingEndpointDouble(("json_schema",), message="JSON schema error at #: unrecognized type") as ep:
        client = _client(ep.base_url, dialect="llamacpp")
        assert client.chat(USER, json_schema={"type": "objectx"}).text
        assert client.constraint_fallbacks == 1 and ep.requests == 2
    with ConstraintRefusingEndpointDouble(message="the request exceeds the available context size") as ep:
        client = _client(ep.base_url, dialect="llamacpp")
        with pytest.raises(LLMError, match="http 400"):
            client.chat(USER, grammar=GRAMMAR)
        assert client.constraint_fallbacks == 0 and ep.requests == 1
    with pytest.raises(ValueError, match="cannot go on one request"):
        _client("http://127.0.0.1:9/v1", dialect="llamacpp").chat(USER, grammar="g", response_format={"type": "json"})


# ----------------------------------------------------------------------------- the agent loop and single steps

def _episode(policy, **cfg):
    return run_episode(qid="q", question="Where was Ana Morro born?", answers=["Telvik"], policy=policy,
                       env=OneDocEnvDouble(), cfg=AgentConfig(**cfg), variant="react")


def test_every_policy_step_carries_the_grammar_and_the_answer_only_turn_a_final_one():
    pol = DialectPolicyDouble(["Action: SEARCH[Ana Morro]", "Action: READ[d40]", "Action: FINAL[Telvik]"])
    t = _episode(pol, max_steps=2, constrained="auto", max_tokens=48)
    assert t.terminated == "budget_final" and t.prediction == "Telvik"
    step, final = action_grammar(max_tokens=48), action_grammar(("FINAL",), 48)
    assert [c.get("grammar") for c in pol.calls] == [step, step, final]


@pytest.mark.parametrize("policy,constrained,sent", [
    (ScriptedPolicyDouble(), "auto", False),          # a double without a dialect: plain OpenAI
    (DialectPolicyDouble(dialect="openai"), "auto", False),
    (DialectPolicyDouble(dialect="vllm"), "auto", True),
    (DialectPolicyDouble(), "off", False),
    (DialectPolicyDouble(), "json", False),          # json constrains Phase C proposals only
    (ScriptedPolicyDouble(), "actions", True),
])
def test_llm_constrained_decides_whether_steps_carry_the_grammar(policy, constrained, sent):
    _episode(policy, max_steps=1, constrained=constrained, final_on_budget=False)
    assert ("grammar" in policy.calls[0]) is sent


def test_the_agent_config_takes_llm_constrained_from_params():
    params = Params.model_validate({"llm": {"constrained": "off"}})
    assert agent_config(params).constrained == "off" and agent_config(Params()).constrained == "auto"


def test_an_unquoted_yaml_off_means_off():
    """``constrained: off`` in a params file is YAML's false; it must not be a validation error."""
    import yaml

    params = Params.model_validate(yaml.safe_load("llm:\n  constrained: off\n"))
    assert params.llm.constrained == "off"
    with pytest.raises(ValueError):
        Params.model_validate({"llm": {"constrained": True}})


def test_a_math_episode_sends_its_answer_grammar_when_constrained():
    item = MathItem(id="m", problem="What is 6*7?", answers=["42"])
    pol = DialectPolicyDouble(["6*7 = 42.\nFINAL[42]"])
    spec = episode_spec(Params.model_validate({"llm": {"constrained": "auto"}}), MathDomain(max_tokens=256), "react")
    t = spec.runner(policy=pol)(item).traj
    assert t.em == 1.0 and pol.calls[0]["grammar"] == answer_grammar(256)
    plain = ScriptedPolicyDouble(["FINAL[42]"])
    spec.runner(policy=plain)(item)
    assert "grammar" not in plain.calls[0]


# ----------------------------------------------------------------------------- Phase C: the cluster's schema

MENUS = Menus(watches=["READ", "SEARCH"], conditions=["last_action_failed", "arg_not_in_results"],
              sources=["best_unread_result", "top_result", "answer_span_from_evidence", "arg_shortened"])


def _replies(schema: dict) -> list[dict]:
    """Every value of each enum of the schema in some reply (the free texts fixed): each watched
    action with each repair, each condition alone and the first ones in pairs, each max_fires."""
    props = schema["properties"]
    repair = "rewrite" if "rewrite" in props else "inject"
    choices = props[repair]["enum"] if repair == "rewrite" else ["Read one of the results shown."]
    conds = props["when"]["items"]["enum"]
    whens = [[c] for c in conds] + [list(p) for p in itertools.permutations(conds[:3], 2)]
    base = {"skill_id": props["skill_id"]["enum"][0], "description": "Reads a shown result.", "max_fires": 2}
    return ([{**base, "watches": [w], "when": whens[0], repair: r} for w in props["watches"]["items"]["enum"]
             for r in choices]
            + [{**base, "watches": [props["watches"]["items"]["enum"][0]], "when": when, repair: choices[0],
                "max_fires": n} for when in whens for n in (1, 2, 3)])


@pytest.mark.parametrize("menus", [MENUS, Menus(["READ"], [], []), Menus(["FINAL"], ["has_read"], ["top_result"])])
def test_every_reply_the_cluster_schema_allows_is_a_declaration_that_compiles(menus):
    schema = reply_schema(menus, "read_shown_result")
    jsonschema.Draft202012Validator.check_schema(schema)
    replies = _replies(schema)
    assert replies
    for fields in replies:
        jsonschema.validate(fields, schema)
        _, decl, sid = check_reply(json.dumps(fields), cluster_of("q1"), ["redundant_read"])
        assert sid == "read_shown_result" and decl.watches == fields["watches"]
    assert schema["additionalProperties"] is False and set(schema["required"]) == set(schema["properties"])


def test_the_cluster_schema_narrows_names_to_its_menus():
    schema = reply_schema(MENUS, "read_shown_result")
    props = schema["properties"]
    assert props["watches"]["items"]["enum"] == ["READ", "SEARCH"]
    assert props["when"]["items"]["enum"] == MENUS.conditions
    assert "SEARCH arg_shortened" not in props["rewrite"]["enum"]  # the prompt's example is refused as a copy
    assert "inject" not in props and "READ top_result" in props["rewrite"]["enum"]
    empty = reply_schema(Menus(["READ"], [], []), "x_y")["properties"]
    assert "rewrite" not in empty and empty["when"]["items"]["enum"] == sorted(c for c in CONDITIONS if c != "always")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**_replies(reply_schema(Menus(["READ"], [], []), "x_y"))[0], "inject": "Use {top_result}"},
                            reply_schema(Menus(["READ"], [], []), "x_y"))
    assert REPLY_SCHEMA == reply_schema() and "enum" not in REPLY_SCHEMA["properties"]["when"]["items"]


def test_schema_proposals_send_the_cluster_schema_through_the_client():
    replayed = {"q1": list(replay(invented_read_traj(), 5))}
    reply = json.dumps({"skill_id": "repeated_invalid_read", "description": "Reads a shown result instead.",
                        "watches": ["READ"], "when": ["last_action_failed"], "rewrite": "READ top_result",
                        "max_fires": 2})
    student = ScriptedPolicyDouble([reply])
    (cand,) = propose_declarative([cluster_of("q1")], student, existing_skill_ids=[], replayed=replayed,
                                  reply_format="schema")
    assert cand.declared and not cand.parse_error, cand.parse_error
    schema = student.calls[0]["json_schema"]
    assert "response_format" not in student.calls[0] and schema["properties"]["skill_id"]["enum"] == [cand.skill_id]
    assert schema["properties"]["watches"]["items"]["enum"] == ["READ"]
    # Objective B's target is the JSON the student wrote for this prompt, not the line format it was not asked in
    from hasp.evolve.declarative import reply_lines

    assert cand.target == reply and reply_lines(cand) == reply


@pytest.mark.parametrize("setting,embedded,expected", [
    ("auto", True, "schema"), ("auto", False, "schema"), ("json_schema", True, "schema"), ("lines", True, "lines"),
    ("choices", False, "choices"),
])
def test_constrained_proposals_turn_auto_and_json_schema_into_the_cluster_schema(setting, embedded, expected):
    assert reply_format_for(setting, embedded, constrained=True) == expected
    assert reply_format_for("auto", embedded) == ("choices" if embedded else "json")


def test_llamacpp_gets_bounded_numbers_as_enums_and_other_dialects_the_schema_as_it_is():
    """llama.cpp's schema grammar bounds integers only: a score in [0, 1] goes as the enum 0.0, 0.05,
    ..., 1.0 (so a reply cannot write 3), nested schemas included; vLLM and OpenAI get the schema."""
    from hasp.evolve.review import REVIEW_SCHEMA
    from hasp.llm.structured import NUMBER_STEPS, bounded_numbers, encode

    sent = encode("llamacpp", json_schema=REVIEW_SCHEMA).body["json_schema"]
    q = sent["properties"]["q_concept"]
    assert "type" not in q and len(q["enum"]) == NUMBER_STEPS + 1 and q["enum"][:3] == [0.0, 0.05, 0.1]
    assert q["enum"][-1] == 1.0 and sent["properties"]["decision"] == REVIEW_SCHEMA["properties"]["decision"]
    assert REVIEW_SCHEMA["properties"]["q_concept"]["type"] == "number"  # the caller's schema is not changed
    assert encode("openai", json_schema=REVIEW_SCHEMA).response_format["json_schema"]["schema"] == REVIEW_SCHEMA
    nested = {"type": "array", "items": {"type": "number", "minimum": 2, "maximum": 4}}
    assert bounded_numbers(nested)["items"]["enum"][::10] == [2.0, 3.0, 4.0]
    assert bounded_numbers({"type": "number", "minimum": 0}) == {"type": "number", "minimum": 0}
