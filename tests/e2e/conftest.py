"""Every test under ``tests/e2e/`` starts real processes: marked ``e2e`` here, so no module can forget it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from attnload.engines.vllm import INSTALL_HINT, vllm_env
from helpers.vllm_pair import Pair, serving_pair

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def vllm_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """One pair of real vLLM servers for every ``vllm`` test that needs no flags of its own (skips without
    the vLLM env, saying how to install it)."""
    if vllm_env() is None:
        pytest.skip(INSTALL_HINT)
    with serving_pair(tmp_path_factory.mktemp("vllm")) as pair:
        yield pair
