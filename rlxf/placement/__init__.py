"""Where roles run. ``local``: every role in this process (the embedded default)."""
