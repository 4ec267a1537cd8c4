"""The attention microscope's results (docs/microscope.md): every stage's ``decode_fit``, and for a decode sweep
each model's ``kv_read`` and the verdict's mechanism sentence; a capacity probe's ``kv_capacity``."""
