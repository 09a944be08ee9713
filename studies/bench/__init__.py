"""The benchmark's full run: protocol, summary and figure (see PROTOCOL.md)."""
