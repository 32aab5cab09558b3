"""The command line: what a user types, checked, and turned into a run.

Owns parsing (click in main.py; exec's common options without click in
quick.py; the balancing options once, options.py, and the settings made of
them, settings.py), what a command prints, and each subcommand (a module
per command, loaded only when it runs: main.SUBCOMMANDS).  Every error
reaches the user here, once (report.py; click's own in main.py).

The top layer: it may import every layer below; nothing below imports it.
A command never imports another command's private names: what two share
lives in a module of its own (shared.py for stat and probe, gate.py for
exec and compare).
"""
