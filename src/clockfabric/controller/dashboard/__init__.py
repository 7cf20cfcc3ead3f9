"""The fleet dashboard: a page served by the controller (same process, same tokens), its data
from the controller's API, kept live by server-sent events. docs/dashboard.md describes it."""
