"""validate()'s repeats on a shared machine cannot hide a planner that is wrong (ddp_lab/plan/validate.py).

A configuration whose step time misses is run again, after every configuration's first run and
taking turns, each round on a fresh calibration of this machine (the calibrations validate()
measured itself; a caller's are kept), and the attempt with the median error counts. Here the
planner is made wrong on purpose for one configuration only, in a term the calibration feeds:
ZeRO-1's collectives counted 100 times (gloo does not overlap, so all of them are in the step),
about 1.8 s predicted against the ~0.1 s the ranks take. It misses both attempts although the
repeat is predicted from a fresh calibration; DDP, which issues no reduce-scatter or all-gather,
is not touched. Two attempts (`attempts=2`), not validate()'s default three: a third round runs
the same loop body as the second (calibrate again, then repeat each configuration that missed),
and two rounds already tell a fresh calibration from a reused one; that saves a calibration and
a run (4-8 s of CPU here). Real gloo runs and calibrations; no timing is asserted, so it may run
beside other tests (it is not `measures_time`): a 15x miss stays a miss under any load this
machine sees. Its calibrations time each collective once per size (`calibration_repeats=1`): a
noisier fit cannot turn a 15x miss into a hit. It takes more than 20 s (about 25 s of CPU on an
AVX2-only 2-core machine: two calibrations and five short runs) because what it proves is the
order of real calibrations and runs.
"""

from dataclasses import replace

import pytest

from ddp_lab.plan import validate as plan_validate

pytestmark = pytest.mark.slow


def test_a_wrong_planner_misses_every_attempt_on_fresh_calibrations_and_its_repeats_come_after_the_others(
        capsys, monkeypatch):
    configs = {c.kind: c for c in plan_validate.default_configs()}
    right = plan_validate.step_time

    def wrong_for_zero1(model, cluster, strategy):
        time = right(model, cluster, strategy)
        if strategy.zero != 1:
            return time
        return replace(time, dp_comm=time.dp_comm * 100, dp_comm_exposed=time.dp_comm_exposed * 100)

    used = []     # (kind, the calibration each attempt was predicted from), kept alive so `is` compares them
    threads = []  # torch threads per rank of every run
    compare = plan_validate.compare

    def recording(measured, calibration):
        used.append((measured.config.kind, calibration))
        threads.append(measured.threads)
        return compare(measured, calibration)

    # the launcher's default would give each rank OMP_NUM_THREADS threads: timed runs and calibrations take one
    # whatever the machine (measure.RANK_THREADS; 8 per rank on a 16-core machine made lesson 13's predictions miss)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")

    monkeypatch.setattr(plan_validate, "step_time", wrong_for_zero1)
    monkeypatch.setattr(plan_validate, "compare", recording)
    calibrations = {}
    rows = plan_validate.validate([configs["zero1"], configs["ddp"]], steps=1, calibrations=calibrations,
                                  attempts=2, progress=True, calibration_repeats=1)
    zero, ddp = rows
    assert zero.attempts == 2, plan_validate.table(rows)
    assert max(zero.attempt_errors) < -plan_validate.STEP_TOLERANCE, plan_validate.table(rows)
    # the wrong term is the calibration's and decides the miss: more than the compute measured in the run
    assert zero.predicted_time.dp_comm_exposed > zero.predicted_time.compute, zero.predicted_time
    assert zero.states_equal and ddp.states_equal     # bytes do not depend on the attempt
    printed = [line.split(":")[0].split(" for ")[0] for line in capsys.readouterr().out.splitlines()]
    # the round of repeats starts with a fresh calibration; ZeRO-1's repeat waits for DDP's first run (and takes
    # turns with DDP's, if DDP missed under load too)
    rounds = [i for i, line in enumerate(printed) if line == "calibrating this machine again"]
    assert printed[:3] == ["calibrating this machine", "training ZeRO-1", "training DP (DDP)"], printed
    assert len(rounds) == 1 and printed[rounds[0] + 1] == "training ZeRO-1", printed
    assert printed.count("training ZeRO-1") == 2 and set(calibrations) == {(2, 2)}
    # each of ZeRO-1's attempts was predicted from its own calibration, the second the one kept
    zero_calibrations = [calibration for kind, calibration in used if kind == "zero1"]
    assert len({id(c) for c in zero_calibrations}) == 2 and zero_calibrations[-1] is calibrations[(2, 2)]
    assert set(threads) == {1} and {c["threads"] for _, c in used} == {1}, (threads, [c["threads"] for _, c in used])

    # a calibration the caller passes is the caller's to test: kept through the repeats, never measured again
    given = dict(calibrations)
    rows = plan_validate.validate([configs["zero1"]], steps=1, calibrations=given, attempts=2, progress=True)
    assert rows[0].attempts == 2 and max(rows[0].attempt_errors) < -plan_validate.STEP_TOLERANCE
    printed = capsys.readouterr().out.splitlines()
    assert not [line for line in printed if line.startswith("calibrating")], printed
    assert given[(2, 2)] is calibrations[(2, 2)] and all(c is given[(2, 2)] for _, c in used[-2:])
