"""The OpenAI requests the emulator accepts, validated with vLLM's rules and vLLM's error messages.

Each rule cites where vLLM (0.33, ``vllm/`` in its wheel) makes it. Fields
that change what a real server computes but not what the emulator can model
(penalties, seeds, ``top_p``...) are accepted and ignored, as the emulator
has no model to apply them to; fields that change the answer's shape are
honoured: ``n``, ``echo``, ``logprobs``, ``stop``, ``max_tokens``, batch
prompts, streaming and usage.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

# vllm/envs.py: VLLM_MAX_N_SEQUENCES (16384) and VLLM_MAX_COMPLETION_PROMPTS (1024), their defaults.
MAX_N = 16_384
MAX_PROMPTS = 1024
# vllm/entrypoints/openai/completion/protocol.py (CompletionRequest.max_tokens) and
# chat_completion/protocol.py: the default when a request leaves max_tokens out or sends null.
DEFAULT_COMPLETION_MAX_TOKENS = 16
# vllm/sampling_params.py _verify_args: temperature in [0, 2].
MAX_TEMPERATURE = 2.0
# What vLLM applies when a request leaves temperature out (completion/protocol.py _DEFAULT_SAMPLING_PARAMS).
DEFAULT_TEMPERATURE = 1.0


class ApiError(Exception):
    """An error answered in vLLM's shape: ``{"error": {"message", "type", "param", "code"}}``.

    vllm/entrypoints/serve/engine/protocol.py ErrorInfo/ErrorResponse;
    serve/exception_handling/error_response.py: a validation error is 400
    ``BadRequestError`` with its parameter, an unknown model 404 ``NotFoundError``.
    """

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
        return JSONResponse(body, status_code=self.status)


def invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


class StreamOptions(BaseModel):
    """vllm/entrypoints/generate/base/protocol.py:293."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


TokenId = Annotated[int, Field(ge=0)]


class _Sampling(BaseModel):
    """What completions and chat completions share."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    n: int = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    stop: str | list[str] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False

    @model_validator(mode="before")
    @classmethod
    def _null_max_tokens(cls, data: Any) -> Any:
        # completion/protocol.py normalize_null_max_tokens: ``"max_tokens": null`` means the default.
        if isinstance(data, dict) and "max_tokens" in data and data["max_tokens"] is None:
            data = {k: v for k, v in data.items() if k != "max_tokens"}
        return data

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        # serve/utils/api_utils.py should_include_usage.
        return bool(self.stream_options and self.stream_options.include_usage)

    def check_sampling(self) -> None:
        """vllm/sampling_params.py ``_verify_args`` and ``_verify_greedy_sampling``, in its order and words."""
        n = self.n
        if n < 1:
            raise invalid(f"n must be at least 1, got {n}.")
        if n > MAX_N:
            raise invalid(
                f"n must be at most {MAX_N}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES "
                "environment variable."
            )
        temperature = self.temperature_value
        if not math.isfinite(temperature):
            raise invalid(f"temperature must be a finite number, got {temperature}.", "temperature")
        if temperature < 0.0:
            raise invalid(f"temperature must be non-negative, got {temperature}.", "temperature")
        if temperature > MAX_TEMPERATURE:
            raise invalid(f"temperature must be in [0, 2], got {temperature}.", "temperature")
        if any(not s for s in self.stop_strings):
            raise invalid("stop cannot contain an empty string.")
        # sampling_params.py: below _SAMPLING_EPS (1e-5) is greedy, and greedy allows one sequence only.
        if temperature < 1e-5 and n > 1:
            raise invalid(f"n must be 1 when using greedy sampling, got {n}.")
        if self.stream_options is not None and not self.stream:
            # completion/protocol.py validate_stream_options.
            raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")

    @property
    def temperature_value(self) -> float:
        return DEFAULT_TEMPERATURE if self.temperature is None else float(self.temperature)


class CompletionRequest(_Sampling):
    """vllm/entrypoints/openai/completion/protocol.py ``CompletionRequest``: the fields the emulator acts on."""

    prompt: list[TokenId] | list[list[TokenId]] | str | list[str] | None = None
    max_tokens: int = DEFAULT_COMPLETION_MAX_TOKENS
    echo: bool | None = False
    logprobs: int | None = None

    def prompts(self) -> list[str | list[int]]:
        """One entry per prompt of a batch; checks vLLM's prompt rules (protocol.py validators)."""
        prompt = self.prompt
        if prompt is None or prompt == "" or prompt == []:
            raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
        if isinstance(prompt, str):
            return [prompt]
        if all(isinstance(t, int) for t in prompt):
            return [list(prompt)]  # type: ignore[arg-type]
        items: list[str | list[int]] = list(prompt)  # type: ignore[arg-type]
        if len(items) > MAX_PROMPTS:
            raise invalid(
                f"prompt list length {len(items)} exceeds the maximum allowed count of {MAX_PROMPTS}. To increase "
                "this limit, set the VLLM_MAX_COMPLETION_PROMPTS environment variable.",
                "prompt",
            )
        return items

    def check(self) -> None:
        # completion/protocol.py check_logprobs.
        if self.logprobs is not None and self.logprobs < 0 and self.logprobs != -1:
            raise invalid("`logprobs` must be a positive value or -1.", "logprobs")
        self.check_sampling()

    @property
    def wanted_logprobs(self) -> int | None:
        return self.logprobs


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[ContentPart] | None = None

    @property
    def text(self) -> str:
        """The message's text; text parts joined by newlines, as vLLM flattens them for a string template."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text or "" for part in self.content if part.type == "text")


class ChatCompletionRequest(_Sampling):
    """vllm/entrypoints/openai/chat_completion/protocol.py ``ChatCompletionRequest``: the fields acted on."""

    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False

    @property
    def output_limit(self) -> tuple[int | None, str]:
        """The requested output tokens and the parameter that asked (chat_completion/protocol.py:685)."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"

    def check(self) -> None:
        # chat_completion/protocol.py check_logprobs and the generation-prompt rule.
        top = self.top_logprobs
        if top is not None:
            if top < 0 and top != -1:
                raise invalid("`top_logprobs` must be a positive value or -1.", "top_logprobs")
            if (top == -1 or top > 0) and not self.logprobs:
                raise invalid("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
        if self.continue_final_message and self.add_generation_prompt:
            raise invalid("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        if not self.messages:
            raise invalid("messages must contain at least one message.", "messages")
        self.check_sampling()

    @property
    def wanted_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    """vllm/entrypoints/serve/tokenize/protocol.py ``DetokenizeRequest``."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0, le=2**63 - 1)]]
