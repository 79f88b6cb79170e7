"""The params schema is the one source of defaults, and a bad params file is one error line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hasp.cli import main
from hasp.config import (AgentParams, LLMParams, Params, ParamsError, TrainerParams, TrainParams, demo_params,
                         load_params)

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- params files
@pytest.mark.parametrize("text, expected", [
    (None, "no such params file"),
    ("- data\n- llm\n", "top level must be a mapping"),
    ("data:\n  n_question: 12\n", "data.n_question: Extra inputs are not permitted"),
    ("data: [\n", "not valid YAML"),
])
def test_a_bad_params_file_is_one_error_line_and_exit_2(tmp_path, capsys, text, expected):
    path = tmp_path / "params.yaml"
    if text is not None:
        path.write_text(text)
    out = tmp_path / "data"
    assert main(["data", "prepare", "--out", str(out), "--params", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and expected in err
    assert not out.exists()


@pytest.mark.parametrize("key, value, bound", [
    ("signals.reward_floor", -5, "greater than or equal to -1"),
    ("signals.reward_floor", 1.5, "less than or equal to 1"),
    ("eval.split_seed", -3, "greater than or equal to 0"),
    ("data.seed", -1, "greater than or equal to 0"),
    ("train.seed", 2**32, "less than or equal to 4294967295"),
])
def test_out_of_range_reward_floor_and_seeds_are_refused_naming_the_key(key, value, bound):
    with pytest.raises(ParamsError) as e:
        load_params(ROOT / "params.yaml", {key: value})
    assert f"{key}: Input should be {bound}" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key, value", [("signals.reward_floor", -1), ("signals.reward_floor", 1),
                                        ("eval.split_seed", 0), ("train.seed", 2**32 - 1)])
def test_reward_floor_and_seed_bounds_are_inclusive(key, value):
    load_params(ROOT / "params.yaml", {key: value})


def test_a_refused_value_in_the_file_names_its_line(tmp_path):
    (tmp_path / "p.yaml").write_text("# knobs\nagent:\n  top_k: 3\n  max_steps: five\nllm:\n  backend: llamacp\n")
    with pytest.raises(ParamsError) as e:
        load_params(tmp_path / "p.yaml")
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'p.yaml'}: ") and "\n" not in msg
    assert "line 4: agent.max_steps: Input should be a valid integer" in msg
    assert "line 6: llm.backend: Input should be 'llamacpp'" in msg
    with pytest.raises(ParamsError) as e:  # an override is not in the file: no line
        load_params(tmp_path / "p.yaml", {"agent.max_steps": "six", "llm.backend": "vllm"})
    assert "agent.max_steps: Input should be" in str(e.value) and "line" not in str(e.value)


def test_an_empty_params_file_means_the_schema_defaults(tmp_path):
    (tmp_path / "p.yaml").write_text("")
    assert load_params(tmp_path / "p.yaml") == Params() == load_params(None)


def test_overrides_under_a_non_mapping_section_are_refused(tmp_path):
    (tmp_path / "p.yaml").write_text("data: 3\n")
    with pytest.raises(ParamsError, match="data is not a mapping"):
        load_params(tmp_path / "p.yaml", {"data.seed": 1})


def test_the_shipped_params_file_loads():
    load_params(ROOT / "params.yaml")


def test_the_demo_section_scales_the_run_and_leaves_the_rest(tmp_path):
    base, demo = load_params(ROOT / "params.yaml"), demo_params(ROOT / "params.yaml")
    assert demo.data.hop_weights == {1: 1.0} and demo.data.n_questions < base.data.n_questions
    assert demo.evolve.filtering == base.evolve.filtering and demo.llm == base.llm
    (tmp_path / "p.yaml").write_text("agent: {max_steps: 9}\ndemo: {agent.max_steps: 3}\n")
    assert load_params(tmp_path / "p.yaml").agent.max_steps == 9
    assert demo_params(tmp_path / "p.yaml").agent.max_steps == 3


@pytest.mark.parametrize("demo, expected", [
    ("{agent.max_stepz: 3}", "demo: agent.max_stepz names no setting"),
    ("{demo.x: 1}", "demo: demo.x names no setting"),
    ("{agent.max_steps: -3}", "agent.max_steps: Input should be greater than or equal to 1 (set by its demo: section)"),
])
def test_a_bad_demo_section_is_one_line_naming_the_key(tmp_path, capsys, demo, expected):
    (tmp_path / "p.yaml").write_text(f"demo: {demo}\n")
    assert main(["demo", "--params", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "p.yaml") in err and expected in err


# ----------------------------------------------------------------------------- one source of defaults
def _schema_default(model, name):
    return model.model_fields[name].get_default(call_default_factory=True)


@pytest.mark.parametrize("runtime, schema", [
    ("hasp.agent.loop:AgentConfig", AgentParams),
    ("hasp.llm.client:LLMConfig", LLMParams),
])
def test_runtime_config_defaults_are_the_schema_defaults(runtime, schema):
    import importlib

    mod, _, name = runtime.partition(":")
    cls = getattr(importlib.import_module(mod), name)
    shared = [f for f in dataclasses.fields(cls)
              if f.name in schema.model_fields and f.default is not dataclasses.MISSING]
    assert shared, f"{name} shares no knob with {schema.__name__}"
    for f in shared:
        assert f.default == _schema_default(schema, f.name), f"{name}.{f.name}"


def test_harness_and_signal_defaults_are_the_schema_defaults():
    from hasp.agent.harness import EpisodeHarness
    from hasp.config import HarnessParams, SignalParams
    from hasp.pf.conditions import ConditionEnv
    from hasp.train.data import DEFAULT_REWARD_FLOOR

    fields = {f.name: f.default for f in dataclasses.fields(EpisodeHarness)}
    for name in ("pre_final_step_threshold", "teacher_max_tokens"):
        assert fields[name] == _schema_default(HarnessParams, name)
    cond = {f.name: f.default for f in dataclasses.fields(ConditionEnv)}
    assert cond["pre_final_step_threshold"] == _schema_default(HarnessParams, "pre_final_step_threshold")
    assert DEFAULT_REWARD_FLOOR == _schema_default(SignalParams, "reward_floor")


def test_every_trainer_knob_is_a_train_param_with_help():
    assert set(TrainerParams.model_fields) <= set(TrainParams.model_fields)
    for name, f in TrainerParams.model_fields.items():
        assert f.description, f"train.{name} has no help text"


def test_a_trainer_knob_set_in_params_reaches_the_recipe(tmp_path):
    pytest.importorskip("trl")
    from hasp.train.sft import SFTRecipe

    (tmp_path / "p.yaml").write_text("train:\n  lora_dropout: 0.1\n  weighting: oversample\n  enabled: false\n")
    recipe = SFTRecipe.from_params(load_params(tmp_path / "p.yaml").train)
    assert recipe.lora_dropout == 0.1 and recipe.weighting == "oversample"
    assert SFTRecipe() == SFTRecipe.from_params(TrainParams())
    assert "enabled" not in recipe.to_dict()


def test_episodes_in_flight_never_exceed_the_embedded_servers_slots():
    """Requests beyond llama.cpp's slots queue and recompute their prompts, so an embedded llama.cpp
    server caps what runs at once; a remote endpoint or another backend keeps llm.max_concurrency."""
    from hasp.config import LLMParams

    embedded = LLMParams.model_validate({"max_concurrency": 16, "llamacpp": {"parallel": 4}})
    assert embedded.in_flight == 4
    assert embedded.model_copy(update={"max_concurrency": 2}).in_flight == 2
    remote = LLMParams.model_validate({"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_concurrency": 16})
    assert remote.in_flight == 16
    assert LLMParams.model_validate({"backend": "transformers", "max_concurrency": 16}).in_flight == 16
