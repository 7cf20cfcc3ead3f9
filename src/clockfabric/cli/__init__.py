"""The command line: thin verbs over the library."""
