"""Mutation fuzzing of every parser (command.py): the parsers and their seeds (parsers.py), the
mutations (mutate.py)."""
