"""Measurement: the mergeable histogram sketch (neutral: the simulator uses it too), the
recorder and its deltas, the local token estimator and paired statistics."""
