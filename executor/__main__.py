"""`python -m executor` runs the executor command."""

from executor.cli import main

main()
