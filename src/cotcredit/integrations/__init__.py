"""RREDCoT credit inside other training engines (each module needs its engine installed)."""
