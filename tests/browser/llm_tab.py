"""Page helpers shared by the LLM-tab browser tests: start and stop a test from Locust's UI, read the tab."""

from __future__ import annotations

import re
from typing import Any


def start_from_ui(page: Any, users: int, spawn_rate: int, host: str | None = None) -> None:
    """Fill Locust's start form and submit it, as a person would."""
    page.get_by_label(re.compile("Number of users", re.I)).fill(str(users))
    page.get_by_label(re.compile("Ramp up", re.I)).fill(str(spawn_rate))
    if host is not None:
        field = page.get_by_label(re.compile("^Host", re.I))
        if field.count():
            field.fill(host)
    page.get_by_role("button", name=re.compile("^start", re.I)).click()


def open_llm_tab(page: Any) -> None:
    page.get_by_role("tab", name="LLM").click()


def read_llm_table(page: Any) -> list[dict[str, str]]:
    """The LLM tab's rows as header → text."""
    table = page.locator("table").first
    headers = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    rows = []
    for row in table.locator("tbody tr").all():
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        rows.append(dict(zip(headers, cells, strict=False)))
    return rows


def stop_from_ui(page: Any) -> None:
    page.get_by_role("button", name=re.compile("^stop", re.I)).click()
