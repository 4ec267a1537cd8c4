"""Real chat traffic: dataset prompts, multi-turn conversations, trace replay, exact token counts.

Pure, layout-independent building blocks (issue 17). Nothing here sends a request or
reads a clock: a user or scheduler asks for the next request's content and feeds the
streamed answer back, so every rule (history grows by exactly what the server streamed,
each dataset record before any repeat, equal trace hash ids give equal prefix text) is
testable without a server.

- ``dataset``: ShareGPT / JSONL files, indexed in one streamed pass, records loaded lazily.
- ``conversation``: one user's conversation state machine and its config model.
- ``trace``: Mooncake JSONL and Azure CSV traces, and the prompt text for a trace request.
- ``tokenizer``: an optional local ``tokenizer.json`` (``pip install attnload[tokenizer]``)
  and the estimator behind the same small interface.
"""
