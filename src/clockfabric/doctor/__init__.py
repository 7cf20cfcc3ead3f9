"""`clockfabric doctor`: is this host ready for its agent? One line per check, each failure with its fix.

Checks read what the agent would read (its options, through agent.config and the agent's own
loaders) and look at the host as it is; none changes it and none pushes data to the controller.
"""
