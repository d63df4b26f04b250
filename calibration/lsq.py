"""Bounded least squares over a profile's parameters, with a weak prior towards the base values.

Each parameter moves inside its bounds, scaled to [0, 1]; the residuals are the relative errors of the
predictions plus PRIOR_WEIGHT times each parameter's distance from its base value in those units, so a
parameter the data cannot see stays where its source put it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from twin.profile import Profile

PRIOR_WEIGHT = 0.05


class ParameterSpace:
    """The fitted parameters of `base`, scaled to [0, 1] between their bounds."""

    def __init__(self, base: Profile, names: list[str]) -> None:
        missing = [n for n in names if n not in base.params]
        if missing:
            raise ValueError(f"profile {base.id} has no parameter {missing[0]!r}")
        self.base = base
        self.names = [n for n in names if base.params[n].bounds is not None]
        bounds = [base.params[n].bounds for n in self.names]
        self.lo = np.array([b[0] for b in bounds], dtype=float)
        self.hi = np.array([b[1] for b in bounds], dtype=float)
        self.z0 = (np.array([base[n] for n in self.names]) - self.lo) / (self.hi - self.lo)

    def values(self, z: np.ndarray) -> dict[str, float]:
        return dict(zip(self.names, self.lo + np.clip(z, 0, 1) * (self.hi - self.lo), strict=True))

    def profile(self, z: np.ndarray, new_id: str | None = None) -> Profile:
        return self.base.with_values(self.values(z), new_id or self.base.id)

    def fit(self, predict: Callable[[Profile], np.ndarray], goals: np.ndarray, z: np.ndarray | None = None
            ) -> np.ndarray:
        """The scaled point that best matches `goals` (zero goals are compared in absolute units)."""
        from scipy.optimize import least_squares

        scale = np.where(goals != 0, np.abs(goals), 1.0)

        def residuals(zz: np.ndarray) -> np.ndarray:
            pred = predict(self.profile(zz))
            return np.concatenate([(pred - goals) / scale, PRIOR_WEIGHT * (zz - self.z0)])

        start = self.z0.copy() if z is None else z
        return least_squares(residuals, start, bounds=(0.0, 1.0), diff_step=1e-4, xtol=1e-10, ftol=1e-10).x
