"""`python -m cotcredit`: the command line (also under `accelerate launch -m cotcredit`)."""

from cotcredit.cli import main

main()
