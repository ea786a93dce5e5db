from rlobs.cli import main

main()
