"""Reasoning models' own view (time to the first answer token, reasoning tokens and their share, the
server's count), every renderer.

Kept apart from the main tables so a run without reasoning reads exactly as before: the view
appears only when some model streamed (or its server reported) reasoning tokens.
"""
