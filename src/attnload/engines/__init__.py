"""Real inference engines in the loop: tiny generated models and a vLLM launcher.

Nothing here is imported by the load path. ``tiny_models`` writes two random-weight model
folders with the KV geometry of the real GQA/MLA pair (docs/vllm.md); ``vllm`` finds the
separate vLLM environment (``make vllm-env``) and starts and stops its servers as process
groups, for ``attnload demo --engine vllm``, the ``vllm`` test marker and bench/vllm_crosscheck.py.
"""
