from cotcredit.cli import main

main()
