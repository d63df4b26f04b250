"""User-facing errors of the calibration commands."""


class CalibrationError(Exception):
    """A problem with the user's input or environment that the user can fix; one line on stderr."""
