"""`python -m twin` runs the twin command."""

from twin.cli import main

main()
