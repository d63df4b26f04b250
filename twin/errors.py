"""User-facing errors: every one of them becomes a single line on stderr and a non-zero exit."""


class TwinError(Exception):
    """A problem with the user's input that the user can fix (never a bug)."""


class LayoutError(TwinError):
    """A layout breaks a validity rule; the message names the rule and the numbers."""

    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        self.detail = detail
        super().__init__(f"{rule}: {detail}")
