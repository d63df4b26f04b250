"""Sourced numbers and sourced efficiency curves (piecewise, linear in log x, clamped at the ends)."""

from __future__ import annotations

import bisect
import math
from itertools import pairwise
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints, model_validator

_TINY = float(np.finfo(float).tiny)

Source = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Confidence = Literal["H", "M", "L"]  # H first-party/exact, M ambiguous or reputable third party, L folk or derived


class Figure(BaseModel):
    """A number with where it came from and how far to trust it."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    value: float = Field(gt=0)
    source: Source
    confidence: Confidence


class CurvePoint(BaseModel):
    """One point of an efficiency curve: the efficiency reached at operation size `x`."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    x: float = Field(gt=0)
    # a fraction of the nominal figure; a measurement may slightly exceed an 'effective' nominal figure
    value: float = Field(gt=0, le=2)
    source: Source
    confidence: Confidence


def interp_clamped(xs: list[float], ys: list[float], x: float) -> float:
    """np.interp at one point in plain Python: linear between the points `xs` (ascending), flat beyond them."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x) - 1
    return ys[i] + (x - xs[i]) * (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])


class _Table:
    """The curve's points as arrays for np.interp; derived from the fields, so any two compare equal."""

    __slots__ = ("log_x", "log_x_list", "y", "y_list")

    def __init__(self, points: tuple[CurvePoint, ...]) -> None:
        self.log_x = np.log(np.array([p.x for p in points], dtype=float))
        self.y = np.array([p.value for p in points], dtype=float)
        self.log_x_list, self.y_list = self.log_x.tolist(), self.y.tolist()  # the scalar path, without numpy

    def at(self, lx: float) -> float:
        """np.interp at one point, in plain Python (the cost models ask one size at a time in their loops)."""
        return interp_clamped(self.log_x_list, self.y_list, lx)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Table)

    __hash__ = None  # type: ignore[assignment]


class Curve(BaseModel):
    """Efficiency as a function of an operation's size: linear interpolation in log(x) between the points,
    the end values beyond them."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    points: tuple[CurvePoint, ...] = Field(min_length=1)
    _table: _Table = PrivateAttr()

    @model_validator(mode="after")
    def _increasing(self) -> Curve:
        xs = [p.x for p in self.points]
        if any(b <= a for a, b in pairwise(xs)):
            raise ValueError(f"points must have strictly increasing x, got {xs}")
        return self

    def model_post_init(self, context: object, /) -> None:
        self._table = _Table(self.points)

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        """The efficiency at size `x` (a scalar gives a float, an array an array of its shape)."""
        t = self._table
        if isinstance(x, (int, float)):
            return t.at(math.log(max(x, _TINY)))
        x = np.asarray(x, dtype=float)
        if x.ndim == 0:
            return t.at(math.log(max(float(x), _TINY)))
        return np.interp(np.log(np.maximum(x, _TINY)), t.log_x, t.y)
