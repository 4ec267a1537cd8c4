"""What the master shows while a run is on: the progress line of a headless run and the web UI's
"LLM" tab; the rest of ``report`` renders a finished run."""
