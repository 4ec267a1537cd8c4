"""A wrong model id behind a gateway classes as ``not_found``, not ``bad_request``.

The bodies are the ones the gateways really send. LiteLLM's proxy raises
``ProxyModelNotFoundError`` (an HTTPException with ``detail={"error": "...Invalid model name
passed in model=..."}``, litellm/proxy/route_llm_request.py) and its handler wraps it in a
ProxyException: newer releases stringify the detail (``message`` is the repr of a dict,
``code`` the string "400"), older ones pass the dict through (``message`` is an object,
``code`` the int 400); ``type`` and ``param`` are the string "None" there, and
"invalid_request_error"/"model" in hand-written gateway shims. The three bodies live in
tests/data/gateway_errors/ so the end-to-end run serves the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnload.client.classify import classify_status
from attnload.errors import ErrorClass

DATA = Path(__file__).parent / "data" / "gateway_errors"
LITELLM_NEW = (DATA / "litellm_invalid_model_str.json").read_bytes()
LITELLM_OLD = (DATA / "litellm_invalid_model_obj.json").read_bytes()
LITELLM_SHIM = (DATA / "litellm_invalid_model_shim.json").read_bytes()
OPENAI_STYLE_400 = json.dumps(
    {
        "error": {
            "message": "The model `gpt-9` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
).encode()
OPENROUTER_STYLE = json.dumps({"error": {"message": "gpt-9 is not a valid model ID", "code": 400}}).encode()


@pytest.mark.parametrize(
    "body",
    [LITELLM_NEW, LITELLM_OLD, LITELLM_SHIM, OPENAI_STYLE_400, OPENROUTER_STYLE],
    ids=["litellm-new", "litellm-old", "litellm-shim", "openai-400", "openrouter"],
)
def test_model_not_found_in_a_400_body(body: bytes) -> None:
    failure = classify_status(400, body)
    assert failure.kind is ErrorClass.NOT_FOUND
    assert "gpt-9" in failure.detail and failure.detail.startswith("HTTP 400: ")


def test_litellm_old_object_message_is_unwrapped() -> None:
    """The nested ``{"error": ...}`` object reads as its text, not as a Python dict repr."""
    failure = classify_status(400, LITELLM_OLD)
    assert failure.detail == "HTTP 400: /chat/completions: Invalid model name passed in model=gpt-9"


def test_the_hint_names_the_fix() -> None:
    failure = classify_status(400, LITELLM_NEW)
    assert "Fix: check the model id" in str(failure) and "GET /models" in str(failure)


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"message": "temperature must be between 0 and 2", "type": "invalid_request_error"}}',
        b'{"error": {"message": "Invalid value for max_tokens", "param": "max_tokens", "code": "400"}}',
    ],
)
def test_other_400s_stay_bad_request(body: bytes) -> None:
    assert classify_status(400, body).kind is ErrorClass.BAD_REQUEST
