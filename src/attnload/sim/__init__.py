"""The attention-aware simulator: an OpenAI-compatible server driven by the roofline cost
model. It imports only ``attnload.attention``, the histogram sketch and token estimator
in ``attnload.measure`` and ``attnload.errors``: nothing of the load generator."""
