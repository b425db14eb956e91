"""The managed llama.cpp models' explicit sampling and tools (``_models.local``), and
the sampling a run records in ``config.toml``: no server needed (the real model's
tests are in test_real_model*.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from taketurns import ConfigError, EvalConfig, Sampling
from taketurns._cli.main import main
from taketurns._eval.plan import make_env, resolve_role
from taketurns._models.local import TOOLS_FORMAT, chat_format_in, tools_format

MODEL = "llamacpp/smollm2-135m-instruct"


def test_a_llamacpp_role_is_sent_an_rl_sampler_unless_the_config_sets_one() -> None:
    config = EvalConfig(env_id="kuhn-poker", model=MODEL)
    env = make_env(config)
    agent = resolve_role(config, env, "player0", env.roles["player0"])
    sent = agent.sampling.request_fields()
    # llama.cpp's own defaults (0.8, 0.95, 40, 0.05, 1.1) never apply silently
    assert sent == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "logprobs": True,
        "top_logprobs": 0,
        "max_tokens": 64,
    }
    mine = Sampling(temperature=0.6, extra={"top_k": 5})
    config = EvalConfig(env_id="kuhn-poker", model=MODEL, sampling=mine)
    sent = resolve_role(config, env, "player0", env.roles["player0"]).sampling.request_fields()
    assert (sent["temperature"], sent["top_k"], sent["top_p"]) == (0.6, 5, 1.0)


def test_a_template_that_ignores_tools_is_served_with_one_that_takes_them_or_refused() -> None:
    chatml = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    )
    assert tools_format(MODEL, chatml, field="env.agent.model") == TOOLS_FORMAT
    assert tools_format(MODEL, chatml + "{{ tools }}", field="env.agent.model") is None
    with pytest.raises(ConfigError, match=r"env\.agent\.model = .*ignores tools"):
        tools_format(MODEL, "[INST] {{ messages }} [/INST]", field="env.agent.model")
    assert chat_format_in("--n_ctx 4096 --chat_format chatml") == "chatml"
    assert chat_format_in("--chat_format=functionary") == "functionary"
    assert chat_format_in("--n_ctx 4096") is None


def test_config_toml_says_what_each_role_was_sent_and_still_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "1", "-o", str(out), "--no-progress"]
    assert main([*argv, "--sampling.temperature=0.5", "--sampling.max_tokens=9"]) == 0
    text = (out / "config.toml").read_text()
    for role in ("player0", "player1"):
        line = next(x for x in text.splitlines() if x.startswith(f"# env.{role} "))
        assert "temperature = 0.5" in line
        assert "max_tokens = 9" in line
    assert tomllib.loads(text)["sampling"]["temperature"] == 0.5
    capsys.readouterr()
    assert main(["eval", "-o", str(out), "--resume", "--no-progress"]) == 0
