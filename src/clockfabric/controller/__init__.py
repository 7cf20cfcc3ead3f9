"""The controller: fleet-wide state from agents' pushes, stored, watched by detectors, alerted on."""
