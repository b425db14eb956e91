"""``--base-url URL`` without ``--model``: the model is the one the server lists.

An OpenAI-compatible server lists what it serves at ``GET {base_url}/models``. When it
lists exactly one model that one is used (and said); otherwise the eval is refused
with the list, naming ``--model``. Never a silent default: the built-in model's name
sent to a real server would only earn a 404.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from taketurns._config.options import EvalConfig
from taketurns._errors import ConfigError, ModelEndpointError
from taketurns._eval.env import roles_of

__all__ = ["asks_for_model", "served_model"]


def asks_for_model(config: EvalConfig) -> bool:
    """Whether ``config`` (whose ``model`` nobody gave) has an eval-level base URL that
    some role reaches with the eval's model (a role naming neither its own model nor
    its own URL)."""
    if config.base_url is None:
        return False
    return any(r.model is None and r.base_url is None for r in roles_of(config.env).values())


def served_model(config: EvalConfig, *, say: Callable[[str], None]) -> str:
    """The one model the server at ``config.base_url`` lists, asked within
    ``config.preflight_timeout_s``. Raises ``ConfigError`` naming ``--model`` when it
    lists none or several, or cannot be asked."""
    from taketurns._models.openai import OpenAIClient  # httpx2: only when asked

    url = str(config.base_url)
    limit = config.preflight_timeout_s

    async def ask() -> list[str] | None:
        client = OpenAIClient(url, api_key_var=config.api_key_var, timeout=limit, retries=0)
        try:
            with trio.move_on_after(limit):
                return await client.models()
            return None
        finally:
            await client.aclose()

    try:
        models = trio.run(ask)
    except ModelEndpointError as exc:
        raise ConfigError(
            f"--model: not given, and the models of {url} could not be listed ({exc}); "
            "check --base-url, or name the model with --model NAME"
        ) from None
    if models is None:
        raise ConfigError(
            f"--model: not given, and {url}/models did not answer within {limit:g} s; "
            "check --base-url, or name the model with --model NAME"
        )
    if len(models) != 1:
        listed = ", ".join(models) if models else "none"
        raise ConfigError(
            f"--model: not given, and {url} serves {len(models)} models ({listed}); "
            "name one with --model NAME"
        )
    say(f"model {models[0]} (the one {url} serves; --model picks another)")
    return models[0]
