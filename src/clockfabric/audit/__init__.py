"""Fleet audit: facts gathered on every host, then judged centrally by a registry of checks."""
