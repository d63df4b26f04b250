"""What the measured cases can tell apart (DESIGN section 7): the Jacobian of the distinct targets at the
start point, its singular values and the parameter combinations they resolve.

Both axes are logarithmic: entry (i, j) is d log(target i) / d log(parameter j), the fraction a target
moves per fraction the parameter moves, so parameters of any unit compare. A parameter whose value is 0 (a term
its source says is absent, such as a per-call overhead the overhead job has not measured) has no log
scale and is not a candidate: a measurement, not a case fit, gives it a value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from calibration.targets import Target
from twin.profile import Profile

# A direction is identified when its singular value is at least this fraction of the largest: a condition
# number of at most 20, so a 1 % error in the measured numbers moves the weakest resolved combination of
# parameters by at most about 20 %.
RELATIVE_THRESHOLD = 0.05
# A parameter moves a target when the target changes by at least 1 % of the parameter's relative change.
MOVES = 0.01
# Every free parameter must move at least this many distinct measured numbers (DESIGN section 7).
MIN_TARGETS = 3
LOG_STEP = 0.02  # finite-difference step in log(parameter)


@dataclass
class Identifiability:
    """The Jacobian of `targets` (distinct, non-zero) with respect to parameters `names`."""

    names: list[str]
    targets: list[Target]
    jacobian: np.ndarray  # len(targets) x len(names)

    def __post_init__(self) -> None:
        if self.jacobian.size:
            _, s, vt = np.linalg.svd(self.jacobian, full_matrices=False)
        else:
            s, vt = np.zeros(0), np.zeros((0, len(self.names)))
        self.singular: np.ndarray = s
        self.vectors: np.ndarray = vt

    @property
    def relative(self) -> np.ndarray:
        """Singular values over the largest."""
        return self.singular / self.singular[0] if self.singular.size and self.singular[0] > 0 else self.singular

    @property
    def identifiable(self) -> int:
        """Directions whose singular value reaches RELATIVE_THRESHOLD of the largest."""
        return int(np.sum(self.relative >= RELATIVE_THRESHOLD)) if self.singular.size else 0

    def moved(self, name: str) -> list[Target]:
        """The distinct targets the parameter moves (|entry| >= MOVES)."""
        col = self.jacobian[:, self.names.index(name)]
        return [t for t, v in zip(self.targets, col, strict=True) if abs(v) >= MOVES]

    def directions(self, top: int = 3) -> list[str]:
        """Each singular value with the parameters its right singular vector weighs most."""
        out = []
        for k, (s, r) in enumerate(zip(self.singular, self.relative, strict=True)):
            v = self.vectors[k]
            order = np.argsort(-np.abs(v))[:top]
            combo = " ".join(f"{v[j]:+.2f} {self.names[j]}" for j in order if abs(v[j]) >= 0.05)
            mark = "" if r >= RELATIVE_THRESHOLD else "  (not identified)"
            out.append(f"s{k + 1} = {s:.3g} ({r:.3f} of the largest): {combo}{mark}")
        return out

    def refusal(self) -> str | None:
        """Why these parameters cannot all be freed (None when they can)."""
        weak = [(n, len(self.moved(n))) for n in self.names if len(self.moved(n)) < MIN_TARGETS]
        if weak:
            listed = ", ".join(f"{n} ({k})" for n, k in weak)
            return (f"refusing to free {listed}: each moves fewer than {MIN_TARGETS} of the {len(self.targets)} "
                    f"distinct measured numbers by {MOVES:g} or more of its own relative change")
        if len(self.names) > self.identifiable:
            return (f"refusing to free {len(self.names)} parameters: the Jacobian of {len(self.targets)} distinct "
                    f"measured numbers has {self.identifiable} singular values above {RELATIVE_THRESHOLD:g} of the "
                    f"largest; free at most {self.identifiable} (without --free, the fit picks them)")
        return None

    def select(self) -> list[str]:
        """The largest set of parameters the data identifies: those moving at least MIN_TARGETS numbers,
        taken in the order of a column-pivoted QR (most independent first) and cut where the chosen set's
        smallest singular value falls below RELATIVE_THRESHOLD of its largest, or where it would hold more
        parameters than there are distinct numbers (a set that wide has no singular value of its own to test)."""
        from scipy.linalg import qr

        movers = [j for j, n in enumerate(self.names) if len(self.moved(n)) >= MIN_TARGETS]
        if not movers:
            return []
        _, _, piv = qr(self.jacobian[:, movers], mode="economic", pivoting=True)
        order = [movers[p] for p in piv]
        chosen: list[int] = []
        for j in order:
            trial = [*chosen, j]
            s = np.linalg.svd(self.jacobian[:, trial], compute_uv=False)
            if len(s) == len(trial) and s[-1] >= RELATIVE_THRESHOLD * s[0]:
                chosen = trial
        return [self.names[j] for j in sorted(chosen)]

    def subset(self, names: list[str]) -> Identifiability:
        return Identifiability(names, self.targets, self.jacobian[:, [self.names.index(n) for n in names]])


def log_jacobian(base: Profile, names: list[str], targets: list[Target],
                 predict: Callable[[Profile], np.ndarray]) -> Identifiability:
    """Forward differences of log(predicted targets) in log(parameter) at `base`'s values."""
    zero = [n for n in names if base.params[n].value <= 0]
    if zero:
        raise ValueError(f"parameter {zero[0]} is {base.params[zero[0]].value:g}: a log-space Jacobian cannot see "
                         "it (its source says the term is absent; a measurement job gives it a value)")
    y0 = _log_of(predict(base), targets, base)
    cols = []
    for n in names:
        moved = base.with_values({n: base.params[n].value * float(np.exp(LOG_STEP))}, base.id)
        cols.append((_log_of(predict(moved), targets, moved) - y0) / LOG_STEP)
    return Identifiability(list(names), targets, np.array(cols).T if cols else np.zeros((len(targets), 0)))


def _log_of(predicted: np.ndarray, targets: list[Target], profile: Profile) -> np.ndarray:
    """log(predicted); a prediction that is not a positive finite number is refused naming its target."""
    from calibration.targets import unusable_prediction

    bad = unusable_prediction(profile.id, predicted, targets, positive=True)
    if bad:
        raise ValueError(f"{bad}: a log-space fit needs positive finite predictions (a stage predicted as 0 s or "
                         "without bound); check the profile's parameters")
    return np.log(predicted)
