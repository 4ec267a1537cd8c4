"""attnload: compare LLM serving by attention mechanism under high concurrency."""

__version__ = "0.1.0"
