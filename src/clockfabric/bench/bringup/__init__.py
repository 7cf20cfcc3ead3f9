"""Lab bring-up and tear-down (command.py), against the same lab built one ip/tc process a step
(baseline.py)."""
