"""A run's set-up: its settings read once, checked against the job and against what the files they name hold, and
resolved into a frozen recipe (recipe.py, which asks sources.py to read the files), from which build.py builds the
run without reading a setting."""
