"""The studies behind cotcredit's documented findings: each folder holds a study's scripts, its
protocol and the small summary tables and figures the documentation quotes.

Run a study from the repository root as a module (`python -m studies.<name>.run_study`) or by
its make target (studies/README.md lists them). The studies import cotcredit's public API and
each other as modules of this package; what they write besides their summaries is regenerated,
never tracked.
"""
