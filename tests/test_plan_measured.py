"""The planner against real runs on gloo ranks here: the configurations lessons 07-10 run
(DP, ZeRO-1, ZeRO-2, FSDP2 as ZeRO-3 per layer and as one unit, TP, PP, DP x TP), each trained
for a few steps.

- model-state bytes per rank: predicted == measured, exactly;
- activation bytes per rank (saved-tensor hooks): within 10 %;
- step time with calibrate.this_machine(): within 30 % of the measured median, for every
  configuration (TP and DP x TP included) measured while other programs left the cores to the
  ranks (`Row.timing_comparable`); on a machine that other programs keep busy the step-time and
  calibration tests skip, saying how many cores those programs kept busy.

Lesson 13 asserts the same three claims for DP, FSDP2 (one unit), TP and PP in its own
validation cell, which nbval re-runs in CI; this file trains only the rest (ZeRO-1, ZeRO-2,
FSDP2 per layer, DP x TP), and test_every_configuration_is_validated_somewhere reads the lesson's
cell to prove that together they cover every configuration. Training all eight here again cost
about 40 s of CI. About 30-45 s on 2 cores (longer while other programs load them): it must
train four configurations (5 timed steps each) and calibrate this machine twice, (2, 2) and (4, 2);
a configuration that misses adds two runs and two calibrations of its kind (about 15-25 s), and
test_calibration_fits_its_own_timings checks the latest calibration of each kind.
"""

import ast
import functools
import json
import re
import statistics
from pathlib import Path

import pytest

from ddp_lab.hardware.load import QUIET_CORES
from ddp_lab.plan import validate as plan_validate
from ddp_lab.plan.calibrate import measure_this_machine
from ddp_lab.torch_compat.fsdp import fsdp2_runs_on_cpu

pytestmark = [pytest.mark.slow, pytest.mark.measures_time]   # runs alone: it times this machine


@pytest.fixture(scope="module")
def calibrations():
    return {}


LESSON_13 = Path(__file__).resolve().parents[1] / "notebooks" / "13-plan-your-training-run.ipynb"


@functools.cache   # read the notebook once
def lesson_13_kinds() -> frozenset[str]:
    """The configuration kinds lesson 13's validation cell trains (its `c.kind in (...)` filter)."""
    cells = ["".join(cell["source"]) for cell in json.loads(LESSON_13.read_text())["cells"]
             if cell["cell_type"] == "code"]
    validating = [source for source in cells if "validation.default_configs(" in source]
    assert len(validating) == 1, "lesson 13 should pick its validation configurations in one cell"
    picked = re.search(r"c\.kind in (\([^)]*\))", validating[0])
    assert picked, "lesson 13's validation cell no longer filters `c.kind in (...)`: update this test"
    return frozenset(ast.literal_eval(picked.group(1)))


@pytest.fixture(scope="module")
def rows(calibrations):
    configs = [c for c in plan_validate.default_configs() if c.kind not in lesson_13_kinds()]
    return plan_validate.validate(configs, steps=5, calibrations=calibrations)


def per_rank(rows, attribute):
    return {row.name: getattr(row, attribute) for row in rows}


def test_every_configuration_is_validated_somewhere(rows):
    """Here or in lesson 13's validation cell (whose asserts nbval re-runs), never in neither."""
    here, lesson = {row.kind for row in rows}, lesson_13_kinds()
    fsdp2 = {"fsdp2", "fsdp2_layers"} if fsdp2_runs_on_cpu() else set()
    assert here | (lesson & {c.kind for c in plan_validate.default_configs()}) == \
        {"ddp", "zero1", "zero2", "tp", "pp", "dp_tp"} | fsdp2
    assert not here & lesson and {"zero1", "zero2", "dp_tp"} <= here


def test_model_states_equal_exactly(rows):
    assert per_rank(rows, "measured_states") == per_rank(rows, "predicted_states")


def test_activations_within_10_percent(rows):
    errors = {row.name: round(row.activation_error, 4) for row in rows}
    assert all(abs(e) <= plan_validate.ACTIVATION_TOLERANCE for e in errors.values()), errors


def _where_the_time_went(row) -> str:
    """A missed row's predicted parts, to tell a compute miss from a communication miss in CI's log."""
    t = row.predicted_time
    return (f"{row.name}: measured {row.measured_step * 1e3:.1f} ms, predicted {t.total * 1e3:.1f} = compute "
            f"{t.compute * 1e3:.1f} + tp {t.tp_comm * 1e3:.1f} + dp exposed {t.dp_comm_exposed * 1e3:.1f} + bubble "
            f"{t.bubble * 1e3:.1f} + pp {t.pp_comm * 1e3:.1f}; attempts {[f'{e:+.3f}' for e in row.attempt_errors]}, "
            f"other programs {row.other_programs}")


def test_step_time_within_30_percent(rows):
    """Timing on a shared machine: validate() runs a configuration that misses twice more, each time on a
    fresh calibration of this machine, and the attempt with the median error counts (one burst of load from
    another program is not the planner's fault)."""
    print(plan_validate.table(rows))
    assert all(row.attempts in (1, 3) and len(row.attempt_errors) == row.attempts for row in rows)
    comparable = [row for row in rows if row.timing_comparable]
    missed = [row for row in comparable if abs(row.step_error) > plan_validate.STEP_TOLERANCE]
    assert not missed, "\n".join(map(_where_the_time_went, missed))
    if len(comparable) < len(rows):
        pytest.skip("other programs kept " + ", ".join(f"{row.other_programs:.2f} cores busy during {row.name}"
                                                      for row in rows if not row.timing_comparable)
                    + ": those step times are not held against the model, which assumes the cores are the ranks'")


def _median_miss(fit: dict, samples) -> float:
    """The median over a collective's timed sizes of |alpha + beta n - t| / max(t, 1 ms)."""
    return statistics.median(abs(fit["alpha"] + fit["beta"] * n - t) / max(t, 1e-3) for n, t in samples)


def test_calibration_fits_its_own_timings(calibrations, rows):   # rows: validate() fills calibrations
    """Each collective's alpha-beta line passes within 50 % (or 1 ms, for what a collective adds
    to a step is a difference of noisy rounds) of the median of its timed sizes, and a 4-8 MB
    all-reduce, all-gather or reduce-scatter costs more than the median of its smaller sizes
    (bytes take time). Against the 4-byte size alone it failed once on a quiet machine: that one
    difference of rounds came out 5.2 ms, above 1 KB's 1.4 ms and 4 MB's 4.9 ms; one noisy point
    is what the median is for, and sizes that cost the same still fail. A fit that misses is measured once
    more, as validate() re-runs a configuration whose step time misses, and the fresh fit must pass: in
    fresh-clone CI a quiet (2, 2) send fit once came out at 0.52, two sizes' in-step cost rounding to 0 against
    a 0.85 ms alpha (medians seen here on quiet runs: 0.01-0.44); a line that does not describe its
    collective misses both times."""
    assert set(calibrations) == {(2, 2), (4, 2)}
    assert all(set(machine["matmul_flops"]) == {"fp32"} for machine in calibrations.values())   # validate(): fp32 runs
    busy = {key: machine["other_programs"] for key, machine in calibrations.items()
            if machine["other_programs"] is not None and machine["other_programs"] >= QUIET_CORES}
    if busy:
        pytest.skip(f"other programs kept cores busy while calibrating {busy}: the fits describe their load")
    for key, machine in calibrations.items():
        for name, fit in machine["collectives"].items():
            samples = machine["samples"][name]
            assert fit["alpha"] >= 0 and fit["beta"] >= 0
            if _median_miss(fit, samples) >= 0.5:
                again = measure_this_machine(ranks=key[0], group=key[1], precisions=("fp32",))
                fit, samples = again["collectives"][name], again["samples"][name]
                assert _median_miss(fit, samples) < 0.5, (key, name, machine["collectives"][name], fit, samples)
            smaller = statistics.median(t for _, t in samples[:-1])
            assert name == "send" or samples[-1][1] > smaller, (key, name, samples)
        # a sanity bound, not a claim: the step's GEMMs are not the probe's shape, so its FLOP rate may beat the
        # probe's; measured up to 1.53 for 4 ranks on 2 quiet cores (2026-11-26), never near 2
        assert 0 < machine["matmul_efficiency"] <= 2.0, machine


def test_plot_has_a_point_per_configuration(rows):
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lab.plots.plan_validation import predicted_vs_measured

    figure = predicted_vs_measured(rows)
    assert [len(ax.get_title()) > 0 for ax in figure.axes] == [True] * 3
    assert all(len([l for l in ax.lines if l.get_marker() == "o"]) == len(rows) for ax in figure.axes)
