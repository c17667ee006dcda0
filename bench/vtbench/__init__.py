"""bench/run.py's parts: helpers.py (what the experiments' declarations share), engine.py (how
each kind of experiment runs), render.py (its Markdown and output files), docs.py (--update-docs)
and experiments/ (the experiments, one module per system, joined into one table)."""
