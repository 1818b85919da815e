"""Predicted vs measured: the planner's numbers for small runs on this machine, next to what those runs measured.

`validate()` trains each configuration of `default_configs()` on real gloo ranks
(`ddp_lab.plan.measure`) and asks the planner about the same model and strategy:
- model-state bytes per rank: `memory.model_state_bytes(stage_parameters(...))`, must be equal;
- activation bytes per rank: Korthikanti et al.'s per-layer bytes times the layers in flight on
  that rank's pipeline stage (plus the head on the last stage), must be within 10 %;
- step time: `steptime.step_time(model, calibrate.this_machine(...), strategy)`: the step's FLOPs
  over the measured matmul rate times the machine's one calibrated efficiency
  (`probes.CALIBRATION_SHAPE`; TP ranks repeat its elementwise share around the parallel
  matmuls), plus what each collective adds to a step (fitted per collective, timed after
  compute as a step issues it: `calibrate._time_collectives`) and the bubble; must be within
  30 % of the measured median, for every configuration.
  Never the time of the step itself: the rate and efficiency are measured on fixed matmuls and
  a fixed one-layer step, between the timed steps (so the load of the moment counts for both).

The small model: 2 layers, hidden 256, 4 heads, vocabulary 512, sequence 128, fp32 (CPU), so
every dimension divides by 2 (whole heads per TP rank, equal FSDP2 shards of dim 0: FSDP2 pads
dim 0 up to a multiple of the group size, which would break an exact byte count), and a step
(~5.6 GFLOP per rank with micro-batch 4, about 0.1 s) is long against a collective's latency.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddp_lab.hardware.load import QUIET_CORES
from ddp_lab.plan.calibrate import measure_this_machine
from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.plan.measure import Config, run
from ddp_lab.course.plan.memory import model_state_bytes, stage_activation_bytes, stage_parameters
from ddp_lab.course.plan.model import Transformer
from ddp_lab.course.plan.steptime import step_time
from ddp_lab.course.plan.strategy import Strategy
from ddp_lab.torch_compat.fsdp import fsdp2_runs_on_cpu

STATE_TOLERANCE = 0            # bytes: model states must be equal
ACTIVATION_TOLERANCE = 0.10    # relative
STEP_TOLERANCE = 0.30          # relative

def validation_model():
    """The small decoder every configuration trains (see the module docstring for why these sizes)."""
    return Transformer("validate-2x256", layers=2, hidden=256, heads=4, vocab=512, seq_len=128)


def default_configs(model=None) -> list:
    """The configurations lessons 07-10 run, at one size: DP, ZeRO-1, ZeRO-2, FSDP2 (ZeRO-3), TP, PP, DP x TP.

    ZeRO-3 twice: "fsdp2", FSDP2 with the whole model as one unit, whose 2 all-gathers and 1
    reduce-scatter of all weights per step are what the planner's ZeRO-3 model counts; and
    "fsdp2_layers", FSDP2 as lesson 09 wraps it (one unit per layer, then the root: the same
    bytes in 3 all-gathers forward, 3 backward and 3 reduce-scatters).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    model = validation_model() if model is None else model

    def fp32(**fields):   # the reference decoder computes attention eagerly (reference.py): Korthikanti's case
        return Strategy(precision="fp32", attention="eager", **fields)

    configs = [
        Config("DP (DDP)", "ddp", model, fp32(dp=2, micro_batch=4)),
        Config("ZeRO-1", "zero1", model, fp32(dp=2, zero=1, micro_batch=4)),
        Config("ZeRO-2", "zero2", model, fp32(dp=2, zero=2, micro_batch=4)),
        Config("ZeRO-3 (FSDP2)", "fsdp2", model, fp32(dp=2, zero=3, micro_batch=4, fsdp_unit="model")),
        Config("ZeRO-3 (FSDP2/layer)", "fsdp2_layers", model, fp32(dp=2, zero=3, micro_batch=4)),
        Config("TP", "tp", model, fp32(tp=2, micro_batch=4)),
        Config("PP (1F1B)", "pp", model, fp32(pp=2, micro_batch=2, grad_accum=4)),
        Config("DP x TP", "dp_tp", model, fp32(dp=2, tp=2, micro_batch=4)),
    ]
    return [c for c in configs if not c.kind.startswith("fsdp2") or fsdp2_runs_on_cpu()]


@dataclass(frozen=True)
class Row:
    """One configuration: predicted and measured, per rank for bytes, the step for time.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    kind: str                         # how it was run (measure.KINDS)
    label: str                        # the strategy's short label (dp2 tp1 pp1 z1 ...)
    ranks: int
    predicted_states: tuple           # per rank: params + grads + optimizer bytes
    measured_states: tuple
    predicted_activations: tuple      # per rank, bytes
    measured_activations: tuple
    predicted_step: float             # seconds
    measured_step: float
    predicted_time: object            # the planner's TimeBreakdown
    matmul_flops: float               # the rate the prediction used (FLOP/s per rank)
    other_programs: float | None = None  # cores other programs kept busy meanwhile (None: unknown)
    attempt_errors: tuple = ()        # every attempt's step error, in the order they ran (see `validate`)

    @property
    def attempts(self) -> int:
        """Runs of this configuration (`validate` repeats one that misses); this row is the median one."""
        return len(self.attempt_errors) or 1

    @property
    def timing_comparable(self) -> bool:
        """Whether the step time can be held against the model: the ranks had their cores to themselves.

        The planner models this machine with its cores all the ranks' own; while other programs
        keep QUIET_CORES or more busy, the ranks wait for the scheduler and the step time says more
        about the other programs than about the plan (`ddp_lab.hardware.load`).
        """
        return self.other_programs is None or self.other_programs < QUIET_CORES

    @property
    def states_equal(self) -> bool:
        return self.predicted_states == self.measured_states

    @property
    def activation_error(self) -> float:
        """Largest relative error over ranks (measured / predicted - 1, signed)."""
        return max((m / p - 1 for p, m in zip(self.predicted_activations, self.measured_activations)), key=abs)

    @property
    def step_error(self) -> float:
        """measured / predicted - 1."""
        return self.measured_step / self.predicted_step - 1

    @property
    def ok(self) -> bool:
        """Model states equal, activations within 10 %, step time within 30 % (where it can be compared)."""
        return (self.states_equal and abs(self.activation_error) <= ACTIVATION_TOLERANCE
                and (abs(self.step_error) <= STEP_TOLERANCE or not self.timing_comparable))


def _stage_of(rank: int, strategy) -> int:
    return rank // (strategy.dp * strategy.tp)   # tp fastest, then dp, then pp (Megatron order)


def predicted_per_rank(model, strategy) -> tuple[list[int], list[int]]:
    """(model-state bytes, activation bytes) the planner predicts for each rank 0..gpus-1.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    states, acts = [], []
    for rank in range(strategy.gpus):
        stage = _stage_of(rank, strategy)
        states.append(model_state_bytes(stage_parameters(model, strategy, stage), strategy).model_states)
        acts.append(stage_activation_bytes(model, strategy, stage))
    return states, acts


def compare(measured, calibration: dict) -> Row:
    """The planner's prediction for a measured run, as a Row.

    The cluster is `ClusterSpec.from_measurements(...)` from `calibration` (collectives' alpha-beta
    fitted as the run issues them, `calibration_key`), with the matmul rate and the calibration step's efficiency
    (`ddp_lab.plan.probes.CALIBRATION_SHAPE`) that the run's own ranks measured between its
    timed steps, so that a change of load between calibration and run (other programs on the
    machine) does not count as a prediction error.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    config = measured.config
    model, strategy = config.model, config.strategy
    states, acts = predicted_per_rank(model, strategy)
    machine = dict(calibration, matmul_flops={"fp32": measured.matmul_flops},
                   matmul_efficiency=measured.step_flops / measured.matmul_flops)
    cluster = ClusterSpec.from_measurements(machine, config.ranks)
    time = step_time(model, cluster, strategy)
    return Row(config.name, config.kind, strategy.label(), config.ranks, tuple(states),
               tuple(sum(s.values()) for s in measured.states), tuple(acts), tuple(measured.activations),
               time.total, measured.step_time, time, measured.matmul_flops)


def validate(configs=None, steps: int = 5, calibrations: dict | None = None, attempts: int = 3,
             progress: bool = False, calibration_repeats: int = 5) -> list[Row]:
    """Run every configuration on gloo ranks here and compare it with the planner's prediction.

    Timing on a shared machine: a configuration whose step time misses STEP_TOLERANCE is run
    `attempts - 1` more times, and the attempt with the median step error among those timed on
    a quiet machine (`Row.timing_comparable`; all, if none was) is returned (one burst
    of load is not the planner's fault; a planner that is wrong misses every time). The repeats
    come after every configuration's first run, taking turns, so a burst that lasts several runs
    does not decide every attempt of one configuration (fresh-clone CI once failed with ZeRO-2's
    three back-to-back attempts all 50 % slow, while ZeRO-1 before them was within 4 %). Before
    each round of repeats the calibrations validate() measured itself are measured again: the
    machine the repeat is predicted for is the machine of that moment (fresh-clone CI once
    failed with DP x TP 39 % slow in three attempts, ZeRO-2 and ZeRO-3 just before them within
    9 %, no other program visible; the compute is measured between the timed steps, so the part
    a stale calibration can miss is the step's collectives, about 60 ms of the 175 predicted).
    A calibration the caller passed is the caller's to test and is kept. Bytes are the same in
    every attempt.

    Args:
        configs: `measure.Config`s (default: `default_configs()`).
        steps: timed steps per configuration (the median counts).
        calibrations: {(processes, group): measure_this_machine(processes, group=group) dict}
            to reuse, keyed by `calibration_key(config)`; missing ones are measured and added to
            it, and replaced by a fresh measurement before a round of repeats that needs them
            (pass the same dict again to reuse them: then they are the caller's, kept).
        attempts: runs at most per configuration (1: never repeat).
        progress: print a line as each configuration starts (a run takes a few seconds each on
            an idle 2-core machine, much longer on a busy one).
        calibration_repeats: timed rounds per collective and size in each calibration
            (`measure_this_machine`'s `repeats`; fewer: a quicker, noisier fit).

    Returns:
        One `Row` per configuration, in the order of `configs`;
        `ddp_lab.plots.plan_validation.predicted_vs_measured(rows)` draws them.

    Example:
        >>> rows = validate()                                  # doctest: +SKIP
        >>> all(row.states_equal for row in rows)              # doctest: +SKIP
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    configs = default_configs() if configs is None else list(configs)
    calibrations = {} if calibrations is None else calibrations
    given = set(calibrations)   # the caller's: never measured again
    tries = {}    # config index -> [Row per attempt, each with the cores other programs kept busy meanwhile]

    def calibrate(key, note: str = "") -> None:
        if progress:
            print(f"calibrating this machine{note}: {key[0]} ranks, collectives in groups of {key[1]} ...", flush=True)
        # fp32 only: compare() predicts every run from the fp32 rate its own ranks measured
        calibrations[key] = measure_this_machine(ranks=key[0], group=key[1], repeats=calibration_repeats,
                                                 precisions=("fp32",))

    def attempt(index: int, note: str = "") -> None:
        config = configs[index]
        if progress:
            print(f"training {config.name} for {steps} steps{note} ...", flush=True)
        measured = run(config, steps=steps)
        calibration = calibrations[calibration_key(config)]
        row = compare(measured, calibration)
        loads = [c for c in (measured.other_programs, calibration.get("other_programs")) if c is not None]
        tries.setdefault(index, []).append(replace(row, other_programs=max(loads, default=None)))

    for index, config in enumerate(configs):
        if calibration_key(config) not in calibrations:
            calibrate(calibration_key(config))
        attempt(index)
    missed = [index for index in tries if abs(tries[index][0].step_error) > STEP_TOLERANCE]
    for round_ in range(2, attempts + 1):
        for key in dict.fromkeys(calibration_key(configs[index]) for index in missed):
            if key not in given:
                calibrate(key, " again")
        for index in missed:
            attempt(index, f" again (attempt {round_} of {attempts}: its first missed)")
    rows = []
    for index in range(len(configs)):
        # the median of the attempts timed on a quiet machine (of all, if none was): one busy attempt in the
        # middle must not turn two quiet misses into a row that is not compared
        counted = [row for row in tries[index] if row.timing_comparable] or tries[index]
        median = sorted(counted, key=lambda row: row.step_error)[len(counted) // 2]
        rows.append(replace(median, attempt_errors=tuple(row.step_error for row in tries[index])))
    return rows


def calibration_key(config) -> tuple[int, int]:
    """(processes, ranks per process group) the calibration for `config` must run with.

    The collectives are timed as the run issues them: in groups of the size of its largest
    group (dp, tp or pp), while all of its processes compute. DP x TP on 4 processes runs its
    collectives in pairs, so it is calibrated as (4, 2): pairs of ranks that wait for a partner
    who shares the 2 cores with two other processes.

    Example:
        >>> [calibration_key(c) for c in default_configs()][-1]
        (4, 2)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    s = config.strategy
    return config.ranks, max(2, s.dp, s.tp, s.pp)


def table(rows) -> str:
    """Fixed-width text: predicted vs measured per configuration (the most loaded rank's bytes).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    lines = [f"{'configuration':22s} {'ranks':>5s} {'states MB pred/meas':>21s} {'activations MB pred/meas':>25s} "
             f"{'err':>6s} {'step ms pred/meas':>19s} {'err':>6s}"]
    for row in rows:
        worst = max(range(row.ranks), key=lambda r: row.measured_states[r] + row.measured_activations[r])
        errors = ", ".join(f"{error:+.0%}" for error in row.attempt_errors)
        repeats = f" ({row.attempts} runs: {errors}; the median of the quiet ones)" if row.attempts > 1 else ""
        lines.append(
            f"{row.name:22s} {row.ranks:5d} "
            f"{row.predicted_states[worst] / 1e6:10.3f}/{row.measured_states[worst] / 1e6:<10.3f} "
            f"{row.predicted_activations[worst] / 1e6:12.3f}/{row.measured_activations[worst] / 1e6:<12.3f} "
            f"{row.activation_error:+6.1%} {row.predicted_step * 1e3:9.1f}/{row.measured_step * 1e3:<9.1f} "
            f"{row.step_error:+6.1%}{repeats}")
    return "\n".join(lines)
