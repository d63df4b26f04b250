"""`python -m calibration` runs the `calibration` command."""

from calibration.cli import main

main()
