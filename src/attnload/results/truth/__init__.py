"""What a run did not measure, said with its numbers: empty models and stages (``no_data``), TTFT of the
requests a stop cut (censored, Kaplan–Meier), error examples, latencies without a stalled worker's
requests, and the sample and 95 % interval behind each verdict figure (docs/design.md, measurement rules).
"""
