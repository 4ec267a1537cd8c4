"""The attention microscope rendered: the console's "decode fit" and "KV capacity" tables and the HTML
report's ITL-against-position plot (docs/microscope.md)."""
