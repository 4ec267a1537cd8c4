"""The datasets and tokenizers a plan names, opened once before any process starts.

``attnload run`` opens every dataset and tokenizer here, so a bad file is one line and exit 2
before any load; each Locust process opens its datasets with the same :func:`open_datasets`
(``runner/sender/dialogs.py``), so a path means the same file on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnload.config.model import Profile, TestConfig
from attnload.workload.dataset import Dataset, open_dataset
from attnload.workload.tokenizer import load_tokenizer


def dataset_path(path: str, config_source: str) -> Path:
    """A dataset path as given (relative to the working directory), else relative to the config file."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    beside = Path(config_source).parent / given
    return beside if beside.exists() else given


def open_datasets(config: TestConfig, profiles: Sequence[Profile]) -> dict[str, Dataset]:
    """Every dataset the profiles name, opened and validated (a bad file is a UsageError, before any load)."""
    return {
        p.name: open_dataset(dataset_path(p.dataset.path, config.source), p.dataset.format)
        for p in profiles
        if p.dataset is not None
    }


def check_traffic(config: TestConfig, profiles: Sequence[Profile] | None = None) -> None:
    """Open every dataset and tokenizer once, so a bad file is one line and exit 2 before any process starts."""
    for dataset in open_datasets(config, profiles if profiles is not None else config.profiles).values():
        dataset.close()
    for target in config.models:
        load_tokenizer(target.tokenizer)
