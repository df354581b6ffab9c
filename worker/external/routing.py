"""Routing between a weak and a strong model, scored as RouteLLM scores it (Ong et al. 2024).

A router gives each prompt a strong-call score; a threshold sends the prompts scoring at or above
it to the strong model, the rest to the weak one. Sweeping the threshold traces a curve of
(share of strong calls, quality), quality being the mean correctness of the model each prompt is
routed to. Against the two models alone:

    PGR(q)  = (q - weak quality) / (strong quality - weak quality)   (performance gap recovered)
    APGR    = the area under PGR over the share of strong calls, from 0 to 1
    CPT(x)  = the least share of strong calls at which PGR reaches x (None: never)

Random routing traces the straight line from (0, 0) to (1, 1): APGR 0.5. The oracle (strong first
where only it is right, weak last where only the weak is right) traces the highest curve any
scorer can. Accuracy of the routing label is not the score: "always weak" is the right label on
most prompts and recovers nothing.

The curve is exact: one point per distinct score (every prompt at that score goes together), so
prompts that tie move as a group and the line between two points is the expected quality of
breaking the tie at random (a constant scorer is the random line, not a lucky order). RouteLLM's
own script samples the curve at ten quantiles; the exact curve is the limit of that sampling.

Intervals resample prompts with replacement (a bootstrap); the same resamples serve every router
on the same prompts, so two routers' intervals come from the same draws, and a figure averaged
over seeds is averaged inside each resample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
BOOTSTRAPS = 1000
CPT_LEVELS = (0.5, 0.8)
# Shares of strong calls at which a curve is reported as data (what a dashboard plots).
CURVE_SHARES = tuple(i / 20 for i in range(21))


@dataclass
class Outcomes:
    """Which model answered each prompt right (1.0 / 0.0), in one fixed prompt order."""

    weak: Floats
    strong: Floats

    @classmethod
    def of(cls, weak: Sequence[bool], strong: Sequence[bool]) -> Outcomes:
        if len(weak) != len(strong):
            raise ValueError("weak and strong outcomes must cover the same prompts")
        return cls(np.asarray(weak, dtype=np.float64), np.asarray(strong, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.weak)

    def oracle_scores(self) -> Floats:
        """Strong-call scores of the oracle: +1 where only the strong model is right, -1 where
        only the weak one is, 0 where they agree."""
        return self.strong - self.weak


@dataclass
class Curve:
    """A router's curve on some prompts: shares of strong calls (0 first, 1 last) and the
    quality at each."""

    shares: Floats
    quality: Floats
    weak_quality: float
    strong_quality: float

    @property
    def pgr(self) -> Floats:
        return pgr(self.quality, self.weak_quality, self.strong_quality)

    def apgr(self) -> float:
        return float(area(self.shares, self.pgr))

    def cpt(self, level: float) -> float | None:
        return cpt(self.shares, self.pgr, level)

    def points(self, shares: Sequence[float] = CURVE_SHARES) -> list[tuple[float, float]]:
        """(share of strong calls, quality) at `shares`, read off the curve."""
        quality = np.interp(shares, self.shares, self.quality)
        return [
            (round(float(s), 4), round(float(q), 4)) for s, q in zip(shares, quality, strict=True)
        ]


def pgr(quality: Floats, weak: float | Floats, strong: float | Floats) -> Floats:
    """Performance gap recovered (shapes broadcast); NaN where the two models are equally good."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (quality - weak) / (np.asarray(strong) - weak)
    return np.where(np.isfinite(out), out, np.nan)


def area(x: Floats, y: Floats) -> Floats:
    """The trapezoid area under y over x, along the last axis."""
    return np.sum((x[..., 1:] - x[..., :-1]) * (y[..., 1:] + y[..., :-1]) / 2, axis=-1)


def cpt(shares: Floats, pgrs: Floats, level: float) -> float | None:
    """The least share of strong calls at which the (piecewise linear) PGR reaches `level`."""
    reached = np.flatnonzero(pgrs >= level)
    if not len(reached):
        return None
    i = int(reached[0])
    if i == 0:
        return float(shares[0])
    x0, x1, y0, y1 = shares[i - 1], shares[i], pgrs[i - 1], pgrs[i]
    return float(x0 + (x1 - x0) * (level - y0) / (y1 - y0))


def _groups(scores: Floats) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(prompt order, highest score first; the index in that order where each group of equal
    scores ends)."""
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    ends = np.flatnonzero(np.r_[ranked[1:] != ranked[:-1], True])
    return order, ends


def curve(scores: Sequence[float] | Floats, outcomes: Outcomes) -> Curve:
    """The exact curve of one router's scores (see the module docstring)."""
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) != len(outcomes) or not len(scores):
        raise ValueError("a curve needs one score per prompt, and some prompts")
    order, ends = _groups(scores)
    n = len(scores)
    gain = (outcomes.strong - outcomes.weak)[order]
    weak_quality = float(outcomes.weak.mean())
    shares = np.r_[0.0, (ends + 1) / n]
    quality = weak_quality + np.r_[0.0, np.cumsum(gain)[ends]] / n
    return Curve(shares, quality, weak_quality, float(outcomes.strong.mean()))


def resamples(n: int, seed: int = 0, count: int = BOOTSTRAPS) -> npt.NDArray[np.int64]:
    """(count, n): how often each prompt is drawn in each bootstrap resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=count)


def _resampled(
    scores: Floats, outcomes: Outcomes, draws: npt.NDArray[np.int64]
) -> tuple[Floats, Floats]:
    """(shares, PGR) of one router's curve in every resample: (count, groups + 1) each."""
    order, ends = _groups(scores)
    weights = draws[:, order].astype(np.float64)
    total = weights.sum(axis=1, keepdims=True)
    weak = (draws * outcomes.weak).sum(axis=1) / total[:, 0]
    strong = (draws * outcomes.strong).sum(axis=1) / total[:, 0]
    gain = (outcomes.strong - outcomes.weak)[order]
    zero = np.zeros((len(draws), 1))
    shares = np.hstack([zero, np.cumsum(weights, axis=1)[:, ends] / total])
    quality = weak[:, None] + np.hstack([zero, np.cumsum(weights * gain, axis=1)[:, ends] / total])
    return shares, pgr(quality, weak[:, None], strong[:, None])


@dataclass
class RoutingScore:
    """A router's figures on some prompts, averaged over its seeds, with bootstrap intervals."""

    apgr: float
    apgr_ci95: tuple[float, float]
    cpt: dict[float, float | None]  # PGR level -> least share of strong calls (mean over seeds)
    cpt_ci95: dict[float, tuple[float, float] | None]
    weak_quality: float
    strong_quality: float
    n: int
    seeds: int
    apgr_per_seed: list[float] = field(default_factory=list)
    # (share of strong calls, quality) at CURVE_SHARES, averaged over seeds: the plot's data.
    points: list[tuple[float, float]] = field(default_factory=list)
    # The APGR in each bootstrap resample (averaged over seeds): what `pooled` averages.
    apgr_boot: Floats = field(default_factory=lambda: np.zeros(0))


def score_router(
    scores_per_seed: Sequence[Sequence[float] | Floats],
    outcomes: Outcomes,
    draws: npt.NDArray[np.int64] | None = None,
) -> RoutingScore:
    """APGR and CPT of a router (one score list per seed, same prompts) with 95% intervals from
    `draws` (`resamples(len(outcomes))` when None); pass the same draws to every router that is
    compared on these prompts."""
    if draws is None:
        draws = resamples(len(outcomes))
    curves = [curve(scores, outcomes) for scores in scores_per_seed]
    boot_apgr = np.zeros(len(draws))
    boot_cpt: dict[float, list[Floats]] = {level: [] for level in CPT_LEVELS}
    for scores in scores_per_seed:
        shares, pgrs = _resampled(np.asarray(scores, dtype=np.float64), outcomes, draws)
        boot_apgr += area(shares, pgrs)
        for level in CPT_LEVELS:
            found = [cpt(s, p, level) for s, p in zip(shares, pgrs, strict=True)]
            boot_cpt[level].append(np.array([np.nan if f is None else f for f in found]))
    boot_apgr /= len(curves)
    per_seed = [c.apgr() for c in curves]
    cpts: dict[float, float | None] = {}
    cpt_ci: dict[float, tuple[float, float] | None] = {}
    for level in CPT_LEVELS:
        found = [c.cpt(level) for c in curves]
        cpts[level] = None if None in found else float(np.mean([f for f in found if f is not None]))
        mean = np.mean(boot_cpt[level], axis=0)  # NaN where a seed never reaches the level
        cpt_ci[level] = interval(mean[np.isfinite(mean)]) if np.isfinite(mean).any() else None
    quality = np.mean([c.points() for c in curves], axis=0)
    return RoutingScore(
        apgr=float(np.mean(per_seed)),
        apgr_ci95=interval(boot_apgr),
        cpt=cpts,
        cpt_ci95=cpt_ci,
        weak_quality=curves[0].weak_quality,
        strong_quality=curves[0].strong_quality,
        n=len(outcomes),
        seeds=len(curves),
        apgr_per_seed=per_seed,
        points=[(round(float(s), 4), round(float(q), 4)) for s, q in quality],
        apgr_boot=boot_apgr,
    )


def pooled(scores: Sequence[RoutingScore]) -> RoutingScore:
    """One router's figures averaged over several sets of prompts (anchor splits): the mean
    APGR, its interval from the mean of the sets' resamples (each set resampled on its own), the
    mean CPT where every set reaches the level, and the mean curve; `apgr_per_seed` holds each
    seed's APGR averaged over the sets."""
    if not scores:
        raise ValueError("nothing to pool")
    boot = np.mean([s.apgr_boot for s in scores], axis=0)
    cpts: dict[float, float | None] = {}
    for level in CPT_LEVELS:
        found = [s.cpt.get(level) for s in scores]
        cpts[level] = None if None in found else float(np.mean([f for f in found if f is not None]))
    points = np.mean([s.points for s in scores], axis=0)
    return RoutingScore(
        apgr=float(np.mean([s.apgr for s in scores])),
        apgr_ci95=interval(boot),
        cpt=cpts,
        cpt_ci95=dict.fromkeys(CPT_LEVELS),
        weak_quality=float(np.mean([s.weak_quality for s in scores])),
        strong_quality=float(np.mean([s.strong_quality for s in scores])),
        n=sum(s.n for s in scores),
        seeds=scores[0].seeds,
        apgr_per_seed=[float(a) for a in np.mean([s.apgr_per_seed for s in scores], axis=0)],
        points=[(round(float(x), 4), round(float(q), 4)) for x, q in points],
        apgr_boot=boot,
    )


def quality_boot(correct: Floats, draws: npt.NDArray[np.int64]) -> Floats:
    """One model's quality in every resample."""
    out: Floats = (draws * correct).sum(axis=1) / draws.sum(axis=1)
    return out


def interval(values: Floats) -> tuple[float, float]:
    """The 95% percentile interval of resampled figures (a resample where the two models are
    equally good has no PGR, and is left out)."""
    low, high = np.nanpercentile(values, [2.5, 97.5])
    return (round(float(low), 4), round(float(high), 4))
